"""One test body, two APIs: the async core (``haclient.aio``) and the blocking ``haclient``.

How this works: every rule test is written once, as async code against the shape of the async
API, and receives an ``Api``. ``AioApi`` hands out the real async objects behind a thin proxy that
awaits what needs awaiting (``set_message_listener`` is a plain method in the async API, a
coroutine here, so the test can always ``await``). ``BlockingApi`` hands out the blocking objects
behind the same proxy, which runs each blocking call in a worker thread
(``anyio.to_thread.run_sync``) so the test's event loop (and an in-process broker on it) keeps
running, and turns iteration into async iteration. Objects returned by a call (sessions,
producers, consumers, browsers) are proxied recursively; messages and destinations are plain
values and pass through.

Listeners: a test writes its listener as a coroutine function and passes it through
``api.listener(fn)``. The async API runs it as it is (on the loop, in the consumer's listener
task). The blocking API calls listeners on the session's dispatcher thread; there the wrapper
runs the coroutine on a private event loop of that thread, and every proxied call made inside it
runs *inline on the dispatcher thread* (``_IN_LISTENER``), exactly as a blocking listener would
call it, so "close the consumer from its own listener" (C4) really happens on the listener's
thread. Listener code may only share thread-safe state with the test (``Signal``, list appends).

Messages: ``await api.acknowledge(message)`` (the async ``acknowledge()`` returns an awaitable,
the blocking one blocks).
"""

from __future__ import annotations

import contextvars
import functools
import inspect
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import anyio.to_thread

from haclient.message import Message

__all__ = ["API_NAMES", "AioApi", "Api", "BlockingApi", "Proxy", "Signal", "eventually", "make_api"]

API_NAMES = ("aio", "blocking")

# The classes whose instances a proxied call wraps in turn (by class name: the blocking facade's
# classes live in another module and may be named like the async ones).
_WRAPPED = frozenset(
    {
        "Connection",
        "Session",
        "MessageProducer",
        "Producer",
        "MessageConsumer",
        "Consumer",
        "QueueBrowser",
        "Browser",
    }
)

_IN_LISTENER: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "rules_in_listener", default=False
)


def _wrappable(value: Any) -> bool:
    return type(value).__module__.startswith("haclient.") and type(value).__name__ in _WRAPPED


def _unwrap(value: Any) -> Any:
    return value._target if isinstance(value, Proxy) else value


class Proxy:
    """An async view of an API object: methods become coroutines, attributes pass through."""

    __slots__ = ("_api", "_target")

    def __init__(self, api: Api, target: Any) -> None:
        object.__setattr__(self, "_api", api)
        object.__setattr__(self, "_target", target)

    @property
    def target(self) -> Any:
        """The wrapped API object."""
        return self._target

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._target, name)
        if not inspect.ismethod(value):
            return value
        api = self._api

        async def call(*args: Any, **kwargs: Any) -> Any:
            args = tuple(_unwrap(a) for a in args)
            kwargs = {k: _unwrap(v) for k, v in kwargs.items()}
            return api._wrap(await api.call(value, *args, **kwargs))

        call.__name__ = name
        return call

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._target, name, value)  # producer.priority = 7 ...

    async def __aenter__(self) -> Proxy:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    def __aiter__(self) -> Any:
        return self._api._aiter(self._target)

    def __repr__(self) -> str:
        return f"<{self._api.name} {self._target!r}>"


class Api:
    """How a test reaches one of the two APIs."""

    name: str

    async def connect(self, url: str, **options: Any) -> Proxy:
        """Open a connection (``aio.connect`` / ``haclient.connect``)."""
        raise NotImplementedError

    async def call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Call one API method and return its result (awaited or run off the loop)."""
        raise NotImplementedError

    def listener(self, fn: Callable[[Message], Awaitable[None]]) -> Callable[[Message], Any]:
        """A listener for this API that runs the coroutine function ``fn``."""
        raise NotImplementedError

    def _aiter(self, target: Any) -> Any:
        raise NotImplementedError

    def _wrap(self, value: Any) -> Any:
        return Proxy(self, value) if _wrappable(value) else value

    async def acknowledge(self, message: Message) -> None:
        """``message.acknowledge()`` as this API does it."""
        await self.call(message.acknowledge)

    def __repr__(self) -> str:
        return self.name


class AioApi(Api):
    """The async core, on the test's own event loop."""

    name = "aio"

    async def connect(self, url: str, **options: Any) -> Proxy:
        import haclient.aio as aio

        return self._wrap(await aio.connect(url, **options))

    async def call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        result = fn(*args, **kwargs)
        if inspect.isawaitable(result):
            result = await result
        return result

    def listener(self, fn: Callable[[Message], Awaitable[None]]) -> Callable[[Message], Any]:
        return fn

    async def _anext(self, iterator: Any) -> Any:
        return await iterator.__anext__()

    def _aiter(self, target: Any) -> Any:
        return target.__aiter__()


class BlockingApi(Api):
    """The blocking facade: each call in a worker thread, listeners on the dispatcher thread."""

    name = "blocking"

    async def connect(self, url: str, **options: Any) -> Proxy:
        import haclient

        connect = getattr(haclient, "connect", None)
        if connect is None:
            raise AssertionError("the blocking API is missing: haclient.connect does not exist")
        return self._wrap(await self.call(connect, url, **options))

    async def call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        if _IN_LISTENER.get():
            return fn(*args, **kwargs)  # already on the dispatcher thread: call it as it is
        return await anyio.to_thread.run_sync(
            functools.partial(fn, *args, **kwargs), abandon_on_cancel=True
        )

    def listener(self, fn: Callable[[Message], Awaitable[None]]) -> Callable[[Message], Any]:
        def on_message(message: Message) -> None:
            token = _IN_LISTENER.set(True)
            try:
                anyio.run(fn, message)
            finally:
                _IN_LISTENER.reset(token)

        return on_message

    def _aiter(self, target: Any) -> Any:
        iterator = iter(target)
        api = self

        class _Iter:
            def __aiter__(self) -> _Iter:
                return self

            async def __anext__(self) -> Any:
                def step() -> tuple[bool, Any]:
                    try:
                        return False, next(iterator)
                    except StopIteration:
                        return True, None

                done, value = await api.call(step)
                if done:
                    raise StopAsyncIteration
                return value

        return _Iter()

    async def acknowledge(self, message: Message) -> None:
        result = await self.call(message.acknowledge)
        assert not inspect.isawaitable(result), "the blocking acknowledge() returned an awaitable"


def make_api(name: str) -> Api:
    """The ``Api`` called ``name`` (``aio`` or ``blocking``)."""
    return {"aio": AioApi, "blocking": BlockingApi}[name]()


class Signal:
    """A flag any thread or task may set and a test task may wait for (listeners use it)."""

    def __init__(self) -> None:
        self._event = threading.Event()

    def set(self) -> None:
        self._event.set()

    def is_set(self) -> bool:
        return self._event.is_set()

    async def wait(self, timeout: float = 10.0) -> bool:
        """True once set; False after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while not self._event.is_set():
            if time.monotonic() >= deadline:
                return False
            await anyio.sleep(0.005)
        return True


async def eventually(
    predicate: Callable[[], Any], timeout: float = 10.0, interval: float = 0.01
) -> Any:
    """Poll ``predicate`` (sync or async) until it returns something truthy; fail after
    ``timeout`` seconds with the last value."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"still {value!r} after {timeout} s")
        await anyio.sleep(interval)


# Brokers --------------------------------------------------------------------------------------


class Bed:
    """The broker a rule test runs against, and what the test may ask it.

    Attributes:
        kind: ``reference`` (the in-process reference broker, with its admin API) or
            ``rabbitmq`` (a private RabbitMQ node; outcomes are checked with a second consumer).
        url: The broker's URL.
        admin: The reference broker's ``BrokerThread`` (admin API), None on RabbitMQ.
    """

    def __init__(self, kind: str, url: str, admin: Any = None, **options: Any) -> None:
        self.kind = kind
        self.url = url
        self.admin = admin
        self._options = options

    @property
    def reference(self) -> bool:
        return self.kind == "reference"

    def options(self, **options: Any) -> dict[str, Any]:
        """``connect()`` keywords for this broker, plus ``options``."""
        return {**self._options, **options}

    @staticmethod
    def unique(prefix: str) -> str:
        """A node or subscription name no other test uses."""
        import uuid

        return f"rules-{prefix}-{uuid.uuid4().hex[:10]}"

    def subscriptions(self) -> list[Any]:
        """The reference broker's subscriptions (``SubscriptionInfo``)."""
        assert self.admin is not None
        admin = self.admin
        return admin.portal.call(lambda: admin.broker.state.subscriptions())  # type: ignore[no-any-return]

    async def lacks(self, capability: str, operation: Callable[[], Awaitable[Any]]) -> Any:
        """Run ``operation``; if the broker refuses it as unsupported (or never answers, as
        RabbitMQ does), skip the test with "broker lacks CAPABILITY (the broker's answer)".

        On the reference broker nothing is skipped: it supports every rule, so an error
        there fails the test."""
        import pytest

        from haclient.errors import AttachTimeoutError, NotImplementedByBrokerError

        known = _LACKING.get((self.url, capability))
        if known is not None:  # probed already (RabbitMQ makes a probe wait attach_timeout)
            pytest.skip(known)
        try:
            return await operation()
        except (NotImplementedByBrokerError, AttachTimeoutError) as exc:
            if self.reference:
                raise
            reason = f"broker lacks {capability} ({type(exc).__name__}: {exc})"
            _LACKING[(self.url, capability)] = reason
            pytest.skip(reason)

    async def require_offered(self, capability: str, feature: str) -> None:
        """Skip with "broker lacks FEATURE" unless the broker offers connection capability
        ``capability`` in its Open frame (e.g. ``SHARED-SUBS``). On the reference broker an
        absent capability fails the test."""
        import pytest

        import haclient.aio as aio

        async with await aio.connect(self.url, **self.options()) as connection:
            physical = connection._current
            assert physical is not None
            offered = set(physical.offered_capabilities)
        if capability not in offered:
            reason = f"broker lacks {feature} (no {capability} in its offered capabilities)"
            assert not self.reference, reason
            pytest.skip(reason)

    async def require_durable_subscriptions(self) -> None:
        """Probe once per broker: a durable subscription that ``unsubscribe`` can remove (a
        JMS durable subscription is found by its link name; RabbitMQ never answers the
        null-source attach that looks it up)."""
        import haclient.aio as aio
        from haclient.destination import Topic

        async def probe() -> None:
            options = self.options(client_id=self.unique("probe"))
            async with await aio.connect(self.url, **options) as connection:
                session = await connection.create_session()
                consumer = await session.create_durable_consumer(Topic(self.unique("p")), "p")
                await consumer.close()
                await session.unsubscribe("p")

        await self.lacks("durable subscriptions (unsubscribe by name)", probe)


_LACKING: dict[tuple[str, str], str] = {}
