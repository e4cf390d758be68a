"""The chaos test bed: brokers behind Toxiproxy proxies, and the faults to inject into them.

``Bed`` is a blocking context manager. Embedded (the default), it runs reference brokers
(``chaos.broker``) on one event loop in a thread of its own: a shared-store HA pair (``ha=True``:
the first serves, the second waits on the store's lock and takes over, with every stored message,
when the first dies) or ``brokers`` independent brokers (each with a store of its own, so a
killed broker comes back with its durable messages). External (``broker_urls=...``), it only
puts proxies in front of the given brokers. Either way each broker gets a proxy on a free
loopback port of the Toxiproxy at ``toxiproxy_url`` (else ``$TOXIPROXY_URL``, else an embedded
``chaos.toxiproxy`` server), driven only through ``ToxiproxyClient``, so a real Toxiproxy runs
the same faults; ``bed.url()`` is a ``failover:`` URL over the proxies, with each broker's
user and password (``amqp://user:password@host:port`` given, or ``username``/``password``).

Faults are methods (``kill``, ``stop``, ``pause``, ``blackhole``, ``reset_peer``, ``latency``,
``bandwidth``, ``slicer``, ``limit_data``, ``flap``); each blocks for the fault's duration, undoes
it, and returns a ``FaultRecord``. ``chaos.faults`` names them for the matrix. On external brokers
the broker faults are played on the network: a kill or stop disables the proxies (every
connection dropped), a pause holds their data (a timeout toxic).

Everything started is stopped on leaving the ``with`` block, the proxies deleted.
"""

from __future__ import annotations

import itertools
import tempfile
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import anyio
from anyio.from_thread import BlockingPortal, start_blocking_portal

from chaos.applications import Applications
from chaos.broker import Broker
from chaos.broker.state import ACTIVEMQ_IDLE_TIMEOUT, BrokerMode
from chaos.net import free_port
from chaos.toxiproxy.client import ToxiproxyClient, ToxiproxyNotFound, open_toxiproxy
from failover.url import BrokerURL, parse_url
from haclient.errors import ConfigurationError
from haclient.options import CLIENT_OPTIONS

__all__ = ["Bed", "FaultRecord", "Member"]

T = TypeVar("T")

TAKEOVER_TIMEOUT = 15.0
DEFAULT_OPTIONS: dict[str, Any] = {
    "method": "roundrobin",
    "connectdelay": 20,
    "maxdelay": 200,
    "cyclecount": -1,
    # A round's workloads connect right after the last fault of the round before, perhaps
    # while the standby is still taking over: their first connect rides that out too.
    "startup.cyclecount": -1,
}


@dataclass
class FaultRecord:
    """One injected fault: its name, what it did, and when (``time.time()`` seconds)."""

    name: str
    detail: str
    start: float
    end: float = 0.0


@dataclass
class Member:
    """One broker of the bed and the proxy in front of it; ``scheme``, ``username``,
    ``password`` and ``options`` are how clients reach the broker behind the proxy."""

    name: str
    upstream: str
    proxy: str
    listen: str = ""
    broker: Broker | None = None
    tasks: list[Future[Any]] = field(default_factory=list)
    scheme: str = "amqp"
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    options: dict[str, str] = field(default_factory=dict)

    @property
    def url(self) -> str:
        """The broker as clients reach it: through the proxy, with its user and password."""
        host, _, port = self.listen.rpartition(":")
        through = BrokerURL(
            self.scheme,
            host,
            int(port),
            self.username,
            self.password,
            self.options,
            table=CLIENT_OPTIONS,
        )
        return through.to_string(include_secrets=True)


class Bed:
    """Brokers behind proxies, and faults to inject (see the module docstring).

    Args:
        brokers: How many embedded brokers (ignored with ``ha``: a pair).
        ha: Run a shared-store HA pair instead of independent brokers.
        broker_urls: External brokers (``amqp://[user:password@]host:port``): nothing
            embedded is started.
        username: The user clients log in as (SASL PLAIN) where a broker URL names none; the
            embedded brokers then accept only this user.
        password: That user's password.
        toxiproxy_url: An external Toxiproxy; default ``$TOXIPROXY_URL`` or the embedded one.
        poll_interval: How often a standby tries the store's lock (seconds).
        broker_mode: The embedded brokers' ``BrokerMode``: ``"reference"``, or ``"activemq"``
            to behave as ActiveMQ 5.x does where a client can tell (a client id held by a
            connection not yet noticed dead is refused, and that takes 30 s to notice).
        broker_idle_timeout: The embedded brokers' idle timeout (seconds): a broker drops a
            connection silent for twice this, as real brokers do with heartbeats. Without it, a
            connection whose client left while a proxy held its data (a blackhole, a silent
            broker) would keep its unacknowledged deliveries from redelivery for good. None:
            the mode's, 1 s in the reference mode, ActiveMQ's 15 s in ActiveMQ mode.
    """

    def __init__(
        self,
        brokers: int = 2,
        *,
        ha: bool = True,
        broker_urls: list[str] | None = None,
        toxiproxy_url: str | None = None,
        poll_interval: float = 0.02,
        broker_mode: str = "reference",
        broker_idle_timeout: float | None = None,
        username: str | None = None,
        password: str | None = None,
    ) -> None:
        """Check the arguments (no I/O).

        Raises:
            ConfigurationError: A broker URL that is not one ``amqp[s]://`` broker, a password
                without a user name, an unknown broker mode, or an idle timeout below 0.
        """
        if password is not None and username is None:
            raise ConfigurationError("a password without a user name", option="username")
        try:
            self.broker_mode = BrokerMode(broker_mode)
        except ValueError:
            known = ", ".join(mode.value for mode in BrokerMode)
            raise ConfigurationError(
                f"unknown broker mode {broker_mode!r} (known: {known})", option="broker_mode"
            ) from None
        if broker_idle_timeout is not None and not broker_idle_timeout >= 0:
            raise ConfigurationError(
                f"the brokers' idle timeout must be 0 s or more, not {broker_idle_timeout!r}",
                option="broker_idle_timeout",
            )
        self.username = username
        self.password = password
        self._prefix = f"bed-{uuid.uuid4().hex[:6]}"
        self._external_members = [
            self._external_member(i, url) for i, url in enumerate(broker_urls or [])
        ]
        self.ha = ha and not broker_urls
        self.external = bool(broker_urls)
        self.poll_interval = poll_interval
        if broker_idle_timeout is None:
            broker_idle_timeout = (
                ACTIVEMQ_IDLE_TIMEOUT if self.broker_mode is BrokerMode.ACTIVEMQ else 1.0
            )
        self.broker_idle_timeout = broker_idle_timeout
        self._count = 2 if self.ha else (len(broker_urls) if broker_urls else brokers)
        self._toxiproxy_url = toxiproxy_url
        self.members: list[Member] = []
        self.faults: list[FaultRecord] = []
        self.client: ToxiproxyClient | None = None
        self._stack = ExitStack()
        self.apps = Applications()
        """The application processes the ``app_kill`` fault may kill (``chaos.applications``)."""
        self._portal: BlockingPortal | None = None

    # --- life cycle ---------------------------------------------------------------------------

    def __enter__(self) -> Bed:
        try:
            self.client = self._stack.enter_context(open_toxiproxy(self._toxiproxy_url))
            if not self.external:
                tmp = Path(self._stack.enter_context(tempfile.TemporaryDirectory(prefix="bed-")))
                self._portal = self._stack.enter_context(start_blocking_portal())
                self._stack.callback(self._stop_brokers)
                self._start_brokers(tmp)
            else:
                self.members.extend(self._external_members)
            self._stack.callback(self._delete_proxies)
            for member in self.members:
                proxy = self.client.create_proxy(member.proxy, member.upstream)
                member.listen = proxy.listen
        except BaseException:
            self._stack.close()
            raise
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stack.close()

    def _external_member(self, index: int, text: str) -> Member:
        """The member for external broker ``text``: the proxy changes the address clients use,
        not their login, so its user and password are kept."""
        url = parse_url(text, options=CLIENT_OPTIONS)
        if len(url.brokers) != 1 or text.strip().lower().startswith("failover:"):
            raise ConfigurationError(
                f"one broker per URL (amqp://host:port), not {url}", option="broker_urls"
            )
        broker = url.brokers[0]
        host = f"[{broker.host}]" if ":" in broker.host else broker.host
        username = broker.username if broker.username is not None else self.username
        password = broker.password if broker.username is not None else self.password
        return Member(
            f"broker-{index}",
            f"{host}:{broker.port}",
            f"{self._prefix}-{index}",
            scheme=broker.scheme,
            username=username,
            password=password,
            options=dict(broker.options),
        )

    def _start_brokers(self, tmp: Path) -> None:
        for i in range(self._count):
            store = tmp / ("ha.db" if self.ha else f"broker-{i}.db")
            broker = Broker(
                port=free_port(),
                users=None if self.username is None else {self.username: self.password or ""},
                store=store,
                ha_poll_interval=self.poll_interval,
                idle_timeout=self.broker_idle_timeout,
                mode=self.broker_mode,
            )
            member = Member(
                f"broker-{i}",
                f"127.0.0.1:{broker.port}",
                f"{self._prefix}-{i}",
                username=self.username,
                password=self.password,
            )
            member.broker = broker
            self.members.append(member)
            member.tasks.append(self.portal.start_task_soon(_serve, broker))
            if i == 0 or not self.ha:
                self._until(_running(broker), "a broker did not start")

    def _stop_brokers(self) -> None:
        for member in self.members:
            for task in member.tasks:
                task.cancel()
        self._portal = None

    def _delete_proxies(self) -> None:
        assert self.client is not None
        for member in self.members:
            with suppress(ToxiproxyNotFound):
                self.client.delete_proxy(member.proxy)

    @property
    def stale_after(self) -> float:
        """Seconds an embedded broker may still hold a connection whose client is gone
        without a word (twice its idle timeout; 0 for external brokers, unknown here): its
        unsettled deliveries come back, and its client id is free, only then."""
        return 0.0 if self.external else 2 * self.broker_idle_timeout

    def unsettled(self, queues: Iterable[str]) -> int:
        """Messages of ``queues`` the serving broker delivered and has not had settled
        (embedded beds; 0 for external ones)."""
        if self.external:
            return 0
        broker = self.master().broker
        assert broker is not None
        names = list(queues)
        return self.call(_unsettled, broker, names)

    @property
    def portal(self) -> BlockingPortal:
        """The brokers' event loop (embedded beds only)."""
        if self._portal is None:
            raise RuntimeError("the bed runs no brokers of its own (external or closed)")
        return self._portal

    @property
    def proxies(self) -> ToxiproxyClient:
        """The Toxiproxy client (only while the bed is open)."""
        if self.client is None:
            raise RuntimeError("the bed is not open")
        return self.client

    def call(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn(*args)`` on the brokers' loop (the broker admin API is not thread-safe)."""
        return self.portal.call(fn, *args)

    @staticmethod
    def _until(condition: Callable[[], bool], what: str, timeout: float = TAKEOVER_TIMEOUT) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            if time.monotonic() > deadline:
                raise TimeoutError(what)
            time.sleep(0.005)

    def url(self, **options: Any) -> str:
        """``failover:(...)`` over the proxies with ``failover.<name>=value`` for each keyword
        (default: roundrobin, 20 ms connect delay backing off to 200 ms, unlimited cycles, at
        startup too)."""
        settings = {**DEFAULT_OPTIONS, **options}
        query = "&".join(f"failover.{name}={value}" for name, value in settings.items())
        return f"failover:({','.join(m.url for m in self.members)})?{query}"

    def master(self) -> Member:
        """The member serving now (HA: the store's holder; otherwise the first running)."""
        for member in self.members:
            if member.broker is None or member.broker.running:
                return member
        raise RuntimeError("no broker of the bed is serving")

    def queue_depth(self, address: str) -> int:
        """Messages waiting on ``address`` of the serving broker (embedded beds)."""
        broker = self.master().broker
        assert broker is not None
        return self.call(lambda: broker.queue_depth(address))

    # --- broker faults ------------------------------------------------------------------------

    @contextmanager
    def _record(self, name: str, detail: str) -> Iterator[FaultRecord]:
        record = FaultRecord(name, detail, time.time())
        self.faults.append(record)
        try:
            yield record
        finally:
            record.end = time.time()

    def kill(self, down: float = 0.0) -> FaultRecord:
        """Kill the serving broker hard (sockets reset, nothing said). HA: the standby takes
        over and the dead one rejoins as standby; otherwise it starts again after ``down``
        seconds. External brokers: every proxy disabled for ``down`` seconds."""
        return self._take_down("kill", down, graceful=False)

    def stop(self, down: float = 0.0) -> FaultRecord:
        """Stop the serving broker gracefully (Close frames), then as ``kill``."""
        return self._take_down("stop", down, graceful=True)

    def _take_down(self, name: str, down: float, *, graceful: bool) -> FaultRecord:
        if self.external:
            with self._record(name, f"every proxy disabled for {down:.2f} s") as record:
                self._all_down(down)
            return record
        member = self.master()
        broker = member.broker
        assert broker is not None
        detail = (
            f"{member.name} down; the standby took over; {member.name} back as the new "
            f"standby after {down:.2f} s"
            if self.ha
            else f"{member.name} down for {down:.2f} s, then restarted"
        )
        with self._record(name, detail) as record:
            self.portal.call(broker.stop if graceful else broker.kill)
            if self.ha:
                standby = next(m.broker for m in self.members if m is not member)
                assert standby is not None
                self._until(_running(standby), "the standby did not take over")
                time.sleep(down)  # then back as the new standby, waiting on the store's lock
                member.tasks.append(self.portal.start_task_soon(broker.start))
            else:
                time.sleep(down)
                self.portal.call(broker.start)
        return record

    def _all_down(self, seconds: float) -> None:
        for member in self.members:
            self.proxies.disable(member.proxy)
        time.sleep(seconds)
        for member in self.members:
            self.proxies.enable(member.proxy)

    def pause(self, seconds: float) -> FaultRecord:
        """The serving broker goes silent (reads and writes nothing) for ``seconds``; clients
        find out by their idle timeout (F13). External brokers: a blackhole instead."""
        if self.external:
            with self._record("pause", f"blackhole {seconds:.2f} s") as record:
                self._toxic_for(seconds, "timeout", timeout=0)
            return record
        broker = self.master().broker
        assert broker is not None
        with self._record("pause", f"{self.master().name} silent {seconds:.2f} s") as record:
            self.call(broker.pause)
            time.sleep(seconds)
            self.call(broker.resume)
        return record

    # --- network faults -----------------------------------------------------------------------

    def _toxic_for(
        self, seconds: float, type: str, stream: str = "downstream", **attrs: int
    ) -> None:
        names = []
        for member in self.members:
            toxic = self.proxies.add_toxic(
                member.proxy, type, stream=stream, name=None, toxicity=1.0, **attrs
            )
            names.append((member.proxy, toxic.name))
        try:
            time.sleep(seconds)
        finally:
            for proxy, name in names:
                with suppress(ToxiproxyNotFound):
                    self.proxies.remove_toxic(proxy, name)

    def _network(self, name: str, detail: str, seconds: float, type: str, **kw: Any) -> FaultRecord:
        with self._record(name, detail) as record:
            self._toxic_for(seconds, type, **kw)
        return record

    def blackhole(self, seconds: float) -> FaultRecord:
        """Every proxy holds what the brokers send (timeout toxic, timeout 0) for ``seconds``."""
        return self._network("blackhole", f"{seconds:.2f} s", seconds, "timeout", timeout=0)

    def reset_peer(self, seconds: float, after_ms: int = 0) -> FaultRecord:
        """Connections are reset (RST) ``after_ms`` after data arrives, for ``seconds``."""
        detail = f"RST after {after_ms} ms, {seconds:.2f} s"
        return self._network("reset_peer", detail, seconds, "reset_peer", timeout=after_ms)

    def latency(self, seconds: float, ms: int, jitter: int = 0) -> FaultRecord:
        """Every byte from the brokers waits ``ms`` (+- ``jitter``) for ``seconds``."""
        detail = f"{ms} ms +- {jitter} for {seconds:.2f} s"
        return self._network("latency", detail, seconds, "latency", latency=ms, jitter=jitter)

    def bandwidth(self, seconds: float, rate_kb: int) -> FaultRecord:
        """The brokers' output squeezed to ``rate_kb`` KB/s for ``seconds``."""
        detail = f"{rate_kb} KB/s for {seconds:.2f} s"
        return self._network("bandwidth", detail, seconds, "bandwidth", rate=rate_kb)

    def slicer(self, seconds: float, size: int = 7) -> FaultRecord:
        """Data both ways cut into slices of about ``size`` bytes for ``seconds``."""
        detail = f"{size}-byte slices for {seconds:.2f} s"
        with self._record("slicer", detail) as record, ExitStack() as stack:
            for stream in ("upstream", "downstream"):
                for member in self.members:
                    stack.enter_context(
                        self.proxies.toxic(
                            member.proxy,
                            "slicer",
                            stream=stream,
                            average_size=size,
                            size_variation=size // 2,
                            delay=100,
                        )
                    )
            time.sleep(seconds)
        return record

    def limit_data(self, seconds: float, nbytes: int) -> FaultRecord:
        """Each connection is closed after the brokers sent it ``nbytes`` more bytes (usually in
        the middle of a frame), for ``seconds``."""
        detail = f"cut after {nbytes} bytes, {seconds:.2f} s"
        return self._network("limit_data", detail, seconds, "limit_data", bytes=nbytes)

    def flap(self, period_ms: int, count: int) -> FaultRecord:
        """Every proxy goes down and up again ``count`` times, ``period_ms`` down then up."""
        detail = f"{count} x {period_ms} ms down/up"
        with self._record("flap", detail) as record:
            for _ in itertools.repeat(None, count):
                self._all_down(period_ms / 1000)
                time.sleep(period_ms / 1000)
        return record


def _unsettled(broker: Broker, queues: list[str]) -> int:
    """The unsettled deliveries of ``queues`` on ``broker`` (a queue it never had counts 0)."""
    total = 0
    for name in queues:
        with suppress(KeyError):
            total += broker.unacked_count(name)
    return total


def _running(broker: Broker) -> Callable[[], bool]:
    return lambda: broker.running


async def _serve(broker: Broker) -> None:
    async with broker:  # a standby waits on the store's lock here
        await anyio.sleep_forever()
