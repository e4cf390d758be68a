"""The blocking API mirrors the async one: same public methods, same parameter names.

``async def f`` becomes ``def f``; ``__aenter__``/``__aexit__`` become ``__enter__``/``__exit__``
and ``__aiter__``/``__anext__`` become ``__iter__``/``__next__``. Properties stay properties,
and the async producer's plain attributes (its send defaults) are properties of the blocking one.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from types import SimpleNamespace

import pytest

import haclient
import haclient.aio as aio
import haclient.sync as sync
from haclient.message import MessageIdGenerator

PAIRS = [
    (aio.Connection, sync.Connection),
    (aio.ConnectionFactory, sync.ConnectionFactory),
    (aio.Session, sync.Session),
    (aio.MessageProducer, sync.MessageProducer),
    (aio.MessageConsumer, sync.MessageConsumer),
    (aio.QueueBrowser, sync.QueueBrowser),
]

RENAMED = {
    "__aenter__": "__enter__",
    "__aexit__": "__exit__",
    "__aiter__": "__iter__",
    "__anext__": "__next__",
}

NOT_API = {
    "restore",
    "begin_restore",
    "connection_lost",
    "restore_order",
    "encoding_terms",
    "message_ids",
    "validate_names",
    "send_timeout",
    "close_timeout",
    "pipelined_modes",
    "send_encoded_nowait",
    "send_encoded",
    "send_encoded_then",
    "send_encoded_async",
    "send_encoded_all",
    "traced",
    "take_failure",
    "report_lost",
    "receive_then",
}
"""The async objects' hooks for the failover manager, which the application never calls, the
async producer's side of the thread boundary, which the blocking producer's outbox calls on
the loop (``haclient.sync._outbox``), its batch send of stored encodings, which the outbox
relay calls on the loop (``haclient.exactly_once.relay``), and the async consumer's receive
without a task, which the blocking consumer's requests use on the loop
(``haclient.sync._served``)."""


def api(cls: type) -> dict[str, object]:
    """Public members by (blocking) name: methods, properties, and the protocol dunders."""
    members: dict[str, object] = {}
    for name, member in inspect.getmembers(cls):
        dunder = name in RENAMED or name in RENAMED.values()
        if name in NOT_API or (name.startswith("_") and not dunder):
            continue
        members[RENAMED.get(name, name)] = member
    return members


def parameters(function: Callable[..., object]) -> list[tuple[str, object, object]]:
    signature = inspect.signature(function)
    return [
        (p.name, p.kind, p.default)
        for p in list(signature.parameters.values())[1:]  # without self
    ]


def instance_attributes(cls: type) -> set[str]:
    """The async producer's send defaults are plain instance attributes, set in __init__ (no
    I/O there): the blocking producer has them as properties."""
    if cls is aio.MessageProducer:
        # __init__ only asks the session's context for message ids, the options, the
        # transaction and whether it traces: a stand-in will do.
        context = SimpleNamespace(
            connection=SimpleNamespace(message_ids=MessageIdGenerator),
            start_soon=None,
            options=aio.ConnectionOptions(),
            transaction=None,
            tracing=None,
        )
        producer = aio.MessageProducer(context, None)  # type: ignore[arg-type]
        return {name for name in vars(producer) if not name.startswith("_")}
    return set()


@pytest.mark.parametrize(("async_cls", "sync_cls"), PAIRS, ids=lambda c: c.__name__)
def test_same_public_members(async_cls: type, sync_cls: type) -> None:
    assert set(api(async_cls)) | instance_attributes(async_cls) == set(api(sync_cls))


@pytest.mark.parametrize(("async_cls", "sync_cls"), PAIRS, ids=lambda c: c.__name__)
def test_same_parameters_and_kinds(async_cls: type, sync_cls: type) -> None:
    async_api, sync_api = api(async_cls), api(sync_cls)
    for name in sorted(set(async_api) & set(sync_api)):
        a, s = async_api[name], sync_api[name]
        if isinstance(a, property):
            assert isinstance(s, property), f"{sync_cls.__name__}.{name} should be a property"
            assert (a.fset is None) == (s.fset is None), f"{name}: settable on one side only"
            continue
        assert callable(a)
        assert callable(s)
        assert not isinstance(s, property), f"{sync_cls.__name__}.{name} should be a method"
        assert not inspect.iscoroutinefunction(s), f"{sync_cls.__name__}.{name} is async"
        assert parameters(a) == parameters(s), f"{sync_cls.__name__}.{name}"
        if not name.startswith("_"):
            assert s.__doc__, f"{sync_cls.__name__}.{name} has no docstring"


def test_producer_defaults_are_properties_that_forward() -> None:
    defaults = instance_attributes(aio.MessageProducer)
    assert defaults >= {"delivery_mode", "priority", "time_to_live", "delivery_delay"}
    for name in defaults:
        member = getattr(sync.MessageProducer, name, None)
        assert isinstance(member, property), name
        assert member.fset is not None, name


BLOCKING_ONLY = {"private_loop"}
"""The blocking API's own keyword: which event-loop thread a connection runs on."""


def blocking_parameters(fn: object) -> dict[str, inspect.Parameter]:
    parameters = dict(inspect.signature(fn).parameters)  # type: ignore[arg-type]
    for name in BLOCKING_ONLY:
        assert parameters.pop(name).kind is inspect.Parameter.KEYWORD_ONLY
    return parameters


def test_connect_functions_take_the_same_parameters() -> None:
    """The same parameters, plus the blocking API's keyword-only ``private_loop``."""
    async_parameters = inspect.signature(aio.connect).parameters
    sync_parameters = blocking_parameters(sync.connect)
    assert async_parameters.keys() == sync_parameters.keys()
    assert [p.kind for p in async_parameters.values()] == [p.kind for p in sync_parameters.values()]
    assert inspect.signature(aio.ConnectionFactory).parameters.keys() == (
        blocking_parameters(sync.ConnectionFactory).keys()
    )


def test_the_blocking_api_is_exported_from_haclient() -> None:
    for name in (
        "connect",
        "ConnectionFactory",
        "Connection",
        "Session",
        "MessageProducer",
        "MessageConsumer",
        "QueueBrowser",
        "AckMode",
        "AckConfirmation",
    ):
        assert name in haclient.__all__, name
        assert getattr(haclient, name) is getattr(sync, name, None) or name.startswith("Ack")
    assert haclient.connect is sync.connect
