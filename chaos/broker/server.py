"""The reference broker: an anyio TCP listener running one server-role engine per socket.

How this works: ``Broker`` is an async context manager that owns a task group. ``start()`` binds
the listener (loopback by default) and serves it in that task group; every accepted socket gets an
``Engine`` in the server role, a ``Driver`` and a ``BrokerConnection`` that handles its events.
All connections share one ``BrokerState`` (nodes, transactions). Every stream passes through a
``Gate`` so that ``pause()`` can silence the whole broker (no reads, no writes) for heartbeat
tests.

Endings:
    ``stop()``: Close frames to every connection, wait briefly for the answers, then close.
    ``kill()``: sockets reset (SO_LINGER 0), no frames; the in-memory state is dropped as a crash
        would drop it. Durable messages survive only through a ``Persistence`` store.

Thread-safety: every method must run on the broker's event loop (see ``BrokerThread`` for a
blocking facade usable from other threads).
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import logging
import random
import socket
import struct
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

import anyio
from anyio.abc import ByteStream, SocketAttribute, SocketStream, TaskGroup, TaskStatus

from chaos.amqp_server import server_engine
from chaos.broker.accounts import Accounts
from chaos.broker.connection import REDIRECT, BrokerConnection
from chaos.broker.persistence import MemoryPersistence, Persistence
from chaos.broker.readiness import (
    ACTIVEMQ_READINESS,
    NO_DELAY,
    WARM,
    ColdStart,
    NotReady,
    Readiness,
    ReadinessDelay,
)
from chaos.broker.router import Router, expire_to
from chaos.broker.schedule import NodePolicy, broker_policy
from chaos.broker.state import (
    ACTIVEMQ_IDLE_TIMEOUT,
    ACTIVEMQ_PREFIXES,
    BrokerMode,
    BrokerState,
    NodeInfo,
)
from chaos.broker.store import SqlitePersistence
from chaos.broker.store_lock import StoreLock
from chaos.broker.topology import Topology, parse_peer
from chaos.net import Acceptor, Address, PortHold, bound_addresses
from haclient.amqp.config import EngineConfig, Role, TlsServerOptions
from haclient.amqp.driver import Driver
from haclient.amqp.types import ErrorCondition

__all__ = ["OFFERED_CAPABILITIES", "Broker"]

log = logging.getLogger("chaos.broker")

OFFERED_CAPABILITIES = (
    "ANONYMOUS-RELAY",
    "amqp:local-transactions",
    "SHARED-SUBS",
    "DELAYED_DELIVERY",
)
BROKER_PROPERTIES = {"product": "haclient-broker", "haclient-reference-broker": True}


class Gate:
    """Open or shut for every stream of the broker at once (``pause``/``resume``)."""

    def __init__(self) -> None:
        self._open = anyio.Event()
        self._open.set()

    @property
    def paused(self) -> bool:
        """True while shut."""
        return not self._open.is_set()

    def pause(self) -> None:
        """Shut: reads and writes wait."""
        if not self.paused:
            self._open = anyio.Event()

    def resume(self) -> None:
        """Open again."""
        self._open.set()

    async def wait_open(self) -> None:
        """Wait while shut."""
        while self.paused:
            await self._open.wait()


class GatedStream(ByteStream):
    """A byte stream that neither delivers nor sends data while its gate is shut."""

    def __init__(self, inner: SocketStream, gate: Gate) -> None:
        self._inner = inner
        self._gate = gate
        self._held_until: float | None = None

    def hold(self, seconds: float) -> None:
        """Write nothing more for ``seconds`` from now (a broker busy with a cold start)."""
        until = anyio.current_time() + seconds
        self._held_until = max(until, self._held_until or until)

    async def receive(self, max_bytes: int = 65536) -> bytes:
        """Read, then hold the data back while the gate is shut."""
        await self._gate.wait_open()
        data = await self._inner.receive(max_bytes)
        await self._gate.wait_open()
        return data

    async def send(self, item: bytes) -> None:
        """Write once the gate is open (and the hold, if any, has passed)."""
        if self._held_until is not None:
            held_until, self._held_until = self._held_until, None
            await anyio.sleep_until(held_until)
        await self._gate.wait_open()
        await self._inner.send(item)

    async def send_eof(self) -> None:
        """Half-close the socket."""
        await self._inner.send_eof()

    async def aclose(self) -> None:
        """Close the socket."""
        await self._inner.aclose()

    @property
    def extra_attributes(self) -> Mapping[Any, Any]:
        """The socket's attributes."""
        return self._inner.extra_attributes


class Broker:
    """The haclient reference AMQP 1.0 broker.

    Use as ``async with Broker(...) as broker:`` (started on entry, stopped on exit); inside,
    ``stop()``/``kill()`` and ``start()``/``restart()`` may be called any number of times.

    Args:
        host: Interface to bind (loopback only by default).
        port: TCP port; 0 picks a free one (kept across restarts).
        users: ``{name: password}``: their logins over SCRAM-SHA-512/256/1 and PLAIN (only
            salted credentials are kept); None allows ANONYMOUS (and any PLAIN login).
        tls: Serve TLS with this certificate and key; with its ``client_ca_file``, clients
            must present a certificate, and EXTERNAL logs them in as its common name.
        oauth_tokens: ``{token: user}``: offer XOAUTH2 with these tokens (``add_token`` and
            ``revoke_token`` change them at run time).
        sasl_mechanisms: Offer only these SASL mechanisms, in this order (None: every one
            the settings above enable; ``chaos.broker.accounts``).
        idle_timeout: Seconds; advertised on every connection, which is dropped after twice
            this without a frame. None: the mode's, 15 s in ActiveMQ mode (ActiveMQ 5.x's:
            a client that vanished without a word, its socket left open, holds its container
            id and its unsettled deliveries for 30 s), none in the reference mode; 0: none.
        max_frame_size: Largest frame accepted.
        refuse_duplicate_container_id: Refuse a second connection with a container id already
            connected (``amqp:invalid-field``, as ActiveMQ does).
        dead_letter_queue: Where rejected messages go (None: ``DLQ``, ``ActiveMQ.DLQ`` in
            ActiveMQ mode, ActiveMQ's own name).
        container_id: The broker's container id.
        persistence: Where durable messages are recorded (default: nowhere): an instance, or a
            factory called at every start. Either way ``recover()`` is called at every start
            and ``close()`` at every stop or kill, so a restart re-opens the same store.
        store: Path of a SQLite store for durable messages (shorthand for a
            ``SqlitePersistence``). The store is guarded by a file lock: only its holder
            serves. Two brokers given the same store form a shared-store master/slave pair:
            the slave's ``start()`` waits until the master dies, then recovers the store and
            listens (ActiveMQ's shared file system master/slave).
        ha_poll_interval: How often a waiting slave tries the lock (seconds): it takes over
            within about this long after the master died.
        peers: Peer broker URLs (``amqp://host:port``) announced to clients: in the Open
            frame's ``failover-server-list`` and on the topic ``amq.failover``
            (``chaos.broker.topology``); ``set_peers`` changes them at run time.
        expiry_address: Where expired messages go (None: they are dropped).
        max_delivery_count: Redelivery limit of every queue (None: unlimited): a message whose
            delivery failed goes to the dead-letter queue instead of back to its queue once its
            delivery-count, after the increment, reaches this (``chaos.broker.schedule``).
        queue_policies: Per-queue redelivery limits, ``{queue name: limit or None}``.
        on_standby: Called (on the event loop) when ``start()`` finds the store held by another
            broker and waits as its slave (the command line says so).
        mode: ``"activemq"`` (or ``BrokerMode.ACTIVEMQ``) behaves like ActiveMQ 5.x's AMQP
            transport where a client can tell (see ``BrokerMode``): mode ``second`` granted as
            ``first``, the address prefixes announced in the Open frame, a duplicate container
            id refused (implies ``refuse_duplicate_container_id``), ActiveMQ's slow detection
            of a dead connection (``idle_timeout``), a ``modified`` outcome with
            undeliverable-here taken as a poison ack (the message dead-lettered, to
            ``ActiveMQ.DLQ`` by default), and a readiness delay (below).
        readiness_delay: How long after its port opens each start answers the AMQP protocol
            header (``chaos.broker.readiness``): seconds, or a ``ReadinessDelay`` range drawn
            from at every start. None: the mode's, 60-80 ms in ActiveMQ mode (as ActiveMQ 5.17
            measured), none in the reference mode.
        not_ready: What a connection accepted before then meets: ``"wait"`` (held, its header
            answered once ready), ``"drop"`` (closed without a byte) or ``"either"`` (one or
            the other, evenly at random). None: the mode's, ``"either"`` in ActiveMQ mode
            (ActiveMQ 5.17 was seen to do both), ``"wait"`` in the reference mode.
        cold_start: Delays added, once per start, to the answers to the first Open, the first
            attach and the first durable message (``chaos.broker.readiness.ColdStart``, or its
            text ``"activemq"`` or ``"OPEN,ATTACH,SEND"``): a JVM's cold start. None: none, in
            either mode (timing benches ask for ``ACTIVEMQ_COLD_START``, as ActiveMQ 5.17
            measured).

    Raises:
        ValueError: an unknown ``mode``, or both ``store`` and ``persistence``, or a SASL
            mechanism that is unknown or not enabled.
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        users: Mapping[str, str] | None = None,
        tls: TlsServerOptions | None = None,
        idle_timeout: float | None = None,
        max_frame_size: int | None = None,
        refuse_duplicate_container_id: bool = False,
        dead_letter_queue: str | None = None,
        container_id: str = "haclient-broker",
        persistence: Persistence | Callable[[], Persistence] | None = None,
        store: str | Path | None = None,
        ha_poll_interval: float = 0.5,
        peers: Iterable[str] = (),
        expiry_address: str | None = None,
        max_delivery_count: int | None = None,
        queue_policies: Mapping[str, int | None] | None = None,
        on_standby: Callable[[], None] | None = None,
        mode: BrokerMode | str = BrokerMode.REFERENCE,
        oauth_tokens: Mapping[str, str] | None = None,
        sasl_mechanisms: Iterable[str] | None = None,
        readiness_delay: ReadinessDelay | float | None = None,
        not_ready: NotReady | str | None = None,
        redirect: str | None = None,
        cold_start: ColdStart | str | None = None,
    ) -> None:
        if store is not None and persistence is not None:
            raise ValueError("give either store or persistence, not both")
        self.mode = BrokerMode(mode)
        self.readiness_delay = _readiness_delay(readiness_delay, self.mode)
        self.not_ready = _not_ready(not_ready, self.mode)
        if isinstance(cold_start, str):
            cold_start = ColdStart.parse(cold_start)
        self.cold_start = cold_start or WARM
        self._rng = random.Random()
        self.host = host
        self.store_path = Path(store) if store is not None else None
        self._store_lock = StoreLock(store) if store is not None else None
        self.ha_poll_interval = ha_poll_interval
        self._on_standby = on_standby
        if store is not None:
            persistence = SqlitePersistence(store)
        self._port = port
        self.tls = tls
        self._persistence_source = persistence
        self.persistence: Persistence = MemoryPersistence()
        activemq = self.mode is BrokerMode.ACTIVEMQ
        self.dead_letter_queue = dead_letter_queue or ("ActiveMQ.DLQ" if activemq else "DLQ")
        self.expiry_address = expiry_address
        self.max_delivery_count = max_delivery_count
        self.queue_policies = dict(queue_policies or {})
        self._policy: NodePolicy | None = None
        self.topology = Topology(peers)
        self._redirect = parse_peer(redirect) if redirect is not None else None
        self.refuse_duplicate_container_id = refuse_duplicate_container_id
        self.accounts = Accounts(
            users,
            oauth_tokens,
            client_certificates=tls is not None and tls.client_ca_file is not None,
            mechanisms=sasl_mechanisms,
        )
        self.engine_config = EngineConfig(
            container_id=container_id,
            role=Role.SERVER,
            idle_timeout=_idle_timeout(idle_timeout, self.mode),
            max_frame_size=max_frame_size,
            properties=self._open_properties(),
            offered_capabilities=OFFERED_CAPABILITIES,
            auth=None,
            server_auth=self.accounts.server_auth(),
            tls=tls,
        )
        self._task_group: TaskGroup | None = None
        self._state: BrokerState | None = None
        self._gate: Gate | None = None
        self._scope: anyio.CancelScope | None = None
        self._stopped: anyio.Event | None = None
        self._acceptor: Acceptor | None = None
        self._readiness: Readiness | None = None
        self._sockets: dict[int, SocketStream] = {}
        self._connection_ids = itertools.count(1)
        self._accepting = False
        self._addresses: list[Address] = []
        self._port_hold = PortHold(())  # while stopped: the port stays the broker's

    def __repr__(self) -> str:
        return f"<Broker {self.url} running={self.running}>"

    # Topology ----------------------------------------------------------------------------------

    def _open_properties(self) -> dict[str, Any]:
        properties = dict(BROKER_PROPERTIES)
        if self.mode is BrokerMode.ACTIVEMQ:
            properties.update(ACTIVEMQ_PREFIXES)
        return self.topology.open_properties(properties)

    @property
    def peers(self) -> tuple[str, ...]:
        """The peer URLs announced to clients."""
        return self.topology.peers

    def set_peers(self, urls: Iterable[str]) -> None:
        """Announce a new peer list: new connections' Open frames carry it, and a membership
        message goes to every subscriber of ``amq.failover`` (only when it changed).

        Raises:
            ValueError: a URL is not ``amqp[s]://host[:port]`` (nothing changes then).
        """
        if not self.topology.set(urls):
            return
        self.engine_config = dataclasses.replace(
            self.engine_config, properties=self._open_properties()
        )
        if self.running:
            self.state.publish_membership()

    def redirect(self, url: str | None, *, open_too: bool = False) -> int:
        """Answer every new Open with a Close ``amqp:connection:redirect`` to ``url``
        (``amqp[s]://host[:port]``; its info: ``network-host``, ``port``, ``hostname``,
        ``scheme``), or serve again (None). ``open_too``: close the connections already open
        with that redirect as well. Returns how many were closed.

        Raises:
            ValueError: ``url`` is not ``amqp[s]://host[:port]`` (nothing changes then).
        """
        self._redirect = parse_peer(url) if url is not None else None
        if self._state is None:
            return 0
        self._state.redirect = self._redirect
        if not open_too or self._redirect is None:
            return 0
        live = [c for c in self._state.connections.values() if c.opened]
        for connection in live:
            assert isinstance(connection, BrokerConnection)
            connection.close(ErrorCondition(REDIRECT, "connect to another broker", self._redirect))
        return len(live)

    # Lifecycle ---------------------------------------------------------------------------------

    @property
    def port(self) -> int:
        """The port served (the real one once started)."""
        return self._port

    @property
    def url(self) -> str:
        """``amqp://host:port`` (``amqps://`` with TLS)."""
        return f"{'amqps' if self.tls else 'amqp'}://{self.host}:{self._port}"

    @property
    def ready(self) -> bool:
        """True while running and answering the protocol header (past the readiness delay)."""
        return self.running and self._readiness is not None and self._readiness.ready

    @property
    def ready_after(self) -> float | None:
        """The readiness delay drawn at this start (seconds; None before the first start)."""
        return None if self._readiness is None else self._readiness.delay

    @property
    def running(self) -> bool:
        """True between ``start()`` and ``stop()``/``kill()``."""
        return self._stopped is not None and not self._stopped.is_set()

    @property
    def state(self) -> BrokerState:
        """The current (or last) run's state.

        Raises:
            RuntimeError: the broker was never started.
        """
        if self._state is None:
            raise RuntimeError("the broker was never started")
        return self._state

    async def __aenter__(self) -> Broker:
        task_group = anyio.create_task_group()
        await task_group.__aenter__()
        self._task_group = task_group
        try:
            await self.start()
        except BaseException:
            self._task_group = None
            task_group.cancel_scope.cancel()
            await task_group.__aexit__(None, None, None)
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        try:
            with anyio.CancelScope(shield=True):
                await self.stop()
        finally:
            self._port_hold.release()
            task_group, self._task_group = self._task_group, None
            assert task_group is not None
            result = await task_group.__aexit__(exc_type, exc, tb)
        return result

    async def start(self) -> None:
        """Bind and serve; returns once the broker is ready: its port listening and its
        readiness delay passed (``readiness_delay``: a client that comes after ``start()``
        never meets the not-ready window; one already trying, as in a failover, may). No-op
        while running.

        Raises:
            RuntimeError: not inside ``async with broker``.
            OSError: the port cannot be bound.
        """
        if self.running:
            return
        if self._task_group is None:
            raise RuntimeError("start the broker with `async with Broker(...) as broker`")
        lock = self._store_lock
        if lock is not None and not lock.held and not lock.try_acquire():
            log.info("store %s is held by another broker: waiting as slave", self.store_path)
            if self._on_standby is not None:
                self._on_standby()
            await lock.wait_acquire(self.ha_poll_interval)
            log.info("store %s acquired: taking over as master", self.store_path)
        self._open_persistence()
        self._policy = policy = broker_policy(
            dead_letter_queue=self.dead_letter_queue,
            expiry_address=self.expiry_address,
            max_delivery_count=self.max_delivery_count,
            queue_policies=self.queue_policies,
            poison_undeliverable=self.mode is BrokerMode.ACTIVEMQ,
        )
        router = Router(
            self.persistence,
            self.dead_letter_queue,
            policy=policy,
            activemq_names=self.mode is BrokerMode.ACTIVEMQ,
        )
        policy.expire = expire_to(router, self.expiry_address)
        recovered = router.recover()
        self._state = BrokerState(
            router,
            refuse_duplicate_container_id=self.refuse_duplicate_container_id,
            topology=self.topology,
            mode=self.mode,
            cold_start=self.cold_start,
        )
        self._state.redirect = self._redirect
        self._gate = Gate()
        await self._task_group.start(self._serve)
        log.info("broker listening on %s (%d durable messages recovered)", self.url, recovered)
        assert self._readiness is not None
        await self._readiness.wait()

    def _open_persistence(self) -> None:
        source = self._persistence_source
        if source is None:
            return
        if isinstance(source, Persistence) and not isinstance(source, type):
            self.persistence = source
        else:
            self.persistence = source()

    async def _serve(self, *, task_status: TaskStatus[None]) -> None:
        listener = await anyio.create_tcp_listener(local_host=self.host, local_port=self._port)
        self._port_hold.release()
        self._port = int(listener.extra(SocketAttribute.local_port))
        self._addresses = bound_addresses(listener.listeners)
        self._stopped = stopped = anyio.Event()
        self._accepting = True
        self._readiness = readiness = Readiness(
            self.readiness_delay.draw(self._rng), self.not_ready, self._rng
        )
        self._acceptor = acceptor = Acceptor(listener.listeners)
        try:
            with anyio.CancelScope() as scope:
                self._scope = scope
                async with listener, anyio.create_task_group() as connections:
                    task_status.started()
                    connections.start_soon(readiness.run)
                    if self._policy is not None and self._policy.scheduler is not None:
                        connections.start_soon(self._policy.scheduler.run)  # timers
                    await acceptor.serve(self._serve_connection, connections)
                    await anyio.sleep_forever()  # serving the connections until the end
        finally:
            self._accepting = False
            readiness.end()
            stopped.set()

    async def _serve_connection(self, stream: SocketStream) -> None:
        state, gate, readiness = self._state, self._gate, self._readiness
        if not self._accepting or state is None or gate is None or readiness is None:
            await stream.aclose()
            return
        try:
            admitted = await readiness.admit()
        except BaseException:  # the broker ended while the connection waited: reset it
            with anyio.CancelScope(shield=True):
                await _reset(stream)
            raise
        if not admitted:
            log.info("a connection came before the broker was ready: dropped")
            await stream.aclose()
            return
        _set_nodelay(stream)
        try:
            engine = server_engine(self.engine_config)
        except Exception:  # e.g. unreadable TLS files: refuse this socket, keep serving
            log.exception("cannot set up a connection")
            await stream.aclose()
            return
        connection = BrokerConnection(state, engine, next(self._connection_ids))
        gated = GatedStream(stream, gate)
        connection.hold = gated.hold
        driver = Driver(engine, gated, connection.handle)
        connection.driver = driver
        state.add(connection)
        self._sockets[connection.id] = stream
        try:
            await driver.run()
        except Exception:  # a broker bug must not take the other connections down
            log.exception("connection %d failed", connection.id)
        finally:
            self._sockets.pop(connection.id, None)
            try:
                connection.cleanup()
            except Exception:
                log.exception("cleaning up connection %d failed", connection.id)

    async def stop(self, timeout: float = 2.0) -> None:
        """Close every connection with a Close frame, then stop listening. Idempotent."""
        if not self.running:
            return
        self._accepting = False
        state = self.state
        closing = ErrorCondition("amqp:connection:forced", "the broker is shutting down")
        for connection in list(state.connections.values()):
            connection.close(closing)
        with anyio.move_on_after(timeout):
            for connection in list(state.connections.values()):
                await connection.wait_ended()
        await self._end()
        log.info("broker on port %d stopped", self._port)

    async def kill(self) -> None:
        """Die abruptly: reset every socket, send nothing, forget the in-memory state."""
        if not self.running:
            return
        self._accepting = False
        self.state.alive = False
        for stream in self._sockets.values():
            raw = stream.extra(SocketAttribute.raw_socket)
            with contextlib.suppress(OSError):
                raw.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        await self._end()
        log.info("broker on port %d killed", self._port)

    async def drop_connections(self) -> int:
        """Reset every client connection, as a network blip would: nothing is said, and the
        broker keeps its state and goes on listening. Returns how many were dropped."""
        streams = list(self._sockets.values())
        for stream in streams:
            raw = stream.extra(SocketAttribute.raw_socket)
            with contextlib.suppress(OSError):
                raw.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            await stream.aclose()
        if streams:
            log.info("broker on port %d dropped %d connections", self._port, len(streams))
        return len(streams)

    async def _end(self) -> None:
        if self._gate is not None:
            self._gate.resume()  # a paused stream must not hold up the end
        assert self._scope is not None and self._stopped is not None
        if self._acceptor is not None:
            await self._acceptor.stop()  # never a cancelled accept: see ``Acceptor``
        self._scope.cancel()
        await self._stopped.wait()
        # Until it starts again, nothing else is given its port (``PortHold``): clients that
        # retry it meet a refusal, never another server.
        self._port_hold = PortHold(self._addresses)
        self.persistence.close()
        if self._store_lock is not None:
            # After close: a store is never written without its lock. In-process the OS
            # cannot release it for us as it would for a crashed process.
            self._store_lock.release()

    async def restart(self, *, graceful: bool = False) -> None:
        """``kill()`` (or ``stop()`` when ``graceful``), then ``start()`` on the same port."""
        if graceful:
            await self.stop()
        else:
            await self.kill()
        await self.start()

    def pause(self) -> None:
        """Stop reading and writing on every connection (a silent broker)."""
        if self._gate is not None:
            self._gate.pause()

    def resume(self) -> None:
        """Read and write again after ``pause()``."""
        if self._gate is not None:
            self._gate.resume()

    # Inspection (see BrokerState) --------------------------------------------------------------

    def queue_depth(self, address: str) -> int:
        """Messages waiting in a node. Raises KeyError if there is none."""
        return self.state.queue_depth(address)

    def unacked_count(self, address: str) -> int:
        """Messages delivered from a node and not settled (or committed) yet."""
        return self.state.unacked_count(address)

    def consumer_count(self, address: str) -> int:
        """Consumers attached to a node."""
        return self.state.consumer_count(address)

    def node_info(self, address: str) -> NodeInfo:
        """A snapshot of one node."""
        return self.state.node_info(address)

    def nodes(self) -> list[NodeInfo]:
        """Snapshots of every node."""
        return self.state.nodes()

    def connections(self) -> list[str | None]:
        """Container ids of the open client connections."""
        return self.state.connection_container_ids()

    def open_transactions(self) -> list[bytes]:
        """Ids of the declared, not yet discharged transactions."""
        return self.state.open_transactions()

    def purge(self, address: str) -> int:
        """Drop a node's waiting messages; return how many."""
        return self.state.purge(address)

    def add_token(self, token: str, user: str) -> None:
        """Accept an OAuth token as ``user``'s (XOAUTH2) from the next login on.

        Raises:
            ValueError: an empty token or user.
        """
        self.accounts.add_token(token, user)

    def revoke_token(self, token: str) -> bool:
        """Refuse an OAuth token from the next login on (open connections stay); False if it
        was not accepted."""
        return self.accounts.revoke_token(token)

    def delete_node(self, address: str) -> bool:
        """Delete a node; False if there was none."""
        return self.state.delete_node(address)


def _idle_timeout(seconds: float | None, mode: BrokerMode) -> float | None:
    """The idle timeout asked for, or the mode's (None, or 0 asked for: none)."""
    if seconds is None:
        return ACTIVEMQ_IDLE_TIMEOUT if mode is BrokerMode.ACTIVEMQ else None
    return seconds or None


def _readiness_delay(delay: ReadinessDelay | float | None, mode: BrokerMode) -> ReadinessDelay:
    """The readiness delay asked for, or the mode's."""
    if delay is None:
        return ACTIVEMQ_READINESS if mode is BrokerMode.ACTIVEMQ else NO_DELAY
    if isinstance(delay, ReadinessDelay):
        return delay
    return ReadinessDelay(float(delay), float(delay))


async def _reset(stream: SocketStream) -> None:
    """Close ``stream`` with a reset (SO_LINGER 0), as a dying broker's sockets end."""
    raw = stream.extra(SocketAttribute.raw_socket)
    with contextlib.suppress(OSError):
        raw.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    await stream.aclose()


def _not_ready(not_ready: NotReady | str | None, mode: BrokerMode) -> NotReady:
    """What an early connection meets, as asked or the mode's."""
    if not_ready is not None:
        return NotReady(not_ready)
    return NotReady.EITHER if mode is BrokerMode.ACTIVEMQ else NotReady.WAIT


def _set_nodelay(stream: SocketStream) -> None:
    """Turn Nagle off on an accepted socket (small frames must not wait for ACKs)."""
    try:
        raw = stream.extra(SocketAttribute.raw_socket)
        raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    except (OSError, anyio.TypedAttributeLookupError):
        pass
