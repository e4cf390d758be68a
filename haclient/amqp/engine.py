"""The sans-IO AMQP 1.0 engine: one physical connection, bytes in, events and bytes out.

How this works: an ``Engine`` owns proton's ``Connection``, ``Transport`` and ``Collector``.
The driver hands it whatever the socket produced (``receive_data``), asks for what to write
(``data_to_send``) and calls ``tick(now)`` when the deadline it returned last time is reached.
Everything the peer did comes out of ``events()`` as the plain dataclasses of
``haclient.amqp.events``. Nothing here does I/O, sleeps or reads a clock, so two engines can be
joined in memory and time can be faked.

Invariants:
    Rule 1: proton objects never leave this package; events carry our wrappers and values.
    Rule 2: the peer's Close, End and Detach are answered automatically (the protocol requires
        an answer; the caller learns of them through the events).
    Rule 3: ``TransportClosed`` is the last event; after it the engine produces no more bytes.

Thread-safety: none; an engine belongs to one event-loop thread.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any, Final, Protocol

import cproton
import proton
from proton import Collector, Connection, Event, Transport

from haclient.amqp import _convert
from haclient.amqp.config import EngineConfig, Role, TlsClientOptions, TlsServerOptions
from haclient.amqp.endpoints import Delivery, Link, Receiver, Session, drop_wrapper_in, wrapper_in
from haclient.amqp.events import (
    ConnectionRemoteClose,
    ConnectionRemoteOpen,
    DeliveryUpdated,
    EngineEvent,
    LinkFlow,
    LinkRemoteClose,
    LinkRemoteOpen,
    MessageReceived,
    SessionRemoteClose,
    SessionRemoteOpen,
    TransportClosed,
)
from haclient.amqp.sasl import SaslClientLayer
from haclient.amqp.tls import TlsClientLayer
from haclient.amqp.types import CONNECTION_LOST, ErrorCondition
from haerrors import ConfigurationError

__all__ = ["ByteLayer", "Engine"]

log = logging.getLogger("haclient.amqp")
#: Every AMQP frame, when ``EngineConfig.trace_frames`` asks (``amqp.traceFrames``).
frames_log = logging.getLogger("haclient.frames")

_LOCAL_CLOSED = proton.Endpoint.LOCAL_CLOSED
PN_EOS: Final = cproton.PN_EOS


class ByteLayer(Protocol):
    """A byte layer below proton's AMQP transport, such as a server's TLS or SASL exchange.

    ``receive`` turns bytes from the socket side (``b""``: EOF) into bytes for the layer above;
    ``send`` turns bytes from above into bytes for the socket side. The client role makes its
    own TLS and SASL layers (``haclient.amqp.tls``, ``haclient.amqp.sasl``); the reference
    broker's (``chaos.amqp_server``) are given to its engines.
    """

    error: ErrorCondition | None
    """Set when the layer refused the stream (a failed handshake or login): it must end."""
    eof: bool
    """True once the peer ended the stream at this layer."""
    user: str | None
    """The identity the layer authenticated, if any."""

    @property
    def passes_through(self) -> bool:
        """True once the layer hands every byte on unchanged, both ways, for the rest of the
        stream (a SASL layer after a successful login): the engine then leaves it out."""
        ...

    def receive(self, data: bytes) -> bytes: ...

    def send(self, data: bytes) -> bytes: ...

    @property
    def has_output(self) -> bool:
        """True when ``send(b"")`` would return bytes."""
        ...


class Engine:
    """One AMQP connection's protocol state, in the client or the server role.

    Args:
        config: Identity, limits, SASL and TLS settings (validated when built).
        layers: Byte layers below the AMQP transport, the socket's side first. The server
            role's SASL (``server_auth``) and TLS (``TlsServerOptions``) run in such layers;
            without them a server engine speaks bare AMQP (no SASL). The client role makes its
            own: TLS (``TlsClientOptions``) nearest the socket, then SASL (``config.auth``).

    Raises:
        ConfigurationError: A server's ``server_auth`` or TLS was configured without layers, or
            the client's TLS cannot start (an unreadable file, a context that allows nothing).

    A client calls ``open()`` at once; a server calls it when ``ConnectionRemoteOpen`` arrives
    (or ``close(error)`` to refuse).
    """

    def __init__(self, config: EngineConfig, layers: Sequence[ByteLayer] = ()) -> None:
        if not layers and (config.server_auth or isinstance(config.tls, TlsServerOptions)):
            raise ConfigurationError(
                "a server engine's server_auth and TLS run in byte layers: pass them as layers="
            )
        self.config = config
        self._layers = tuple(layers)
        self._events: list[EngineEvent] = []
        self._finished = False
        self.unsettled: dict[Any, Delivery] = {}
        """Our deliveries not yet settled here, by proton's C delivery (how an event finds its
        ``Delivery``; cffi's pointers hash and compare by the address they hold)."""
        self._backlog = b""  # input proton had no room for yet
        self.head = b""
        """The first 8 bytes of the peer's protocol stream (its protocol header: the SASL one
        when the client logs in), fewer until they came."""
        self._eof_pending = False  # the peer's EOF, delivered once the backlog is in
        self._layer_error: ErrorCondition | None = None  # a byte layer's verdict, as it gave it
        self._connection = Connection()
        self._connection.container = config.container_id
        if config.hostname:
            self._connection.hostname = config.hostname
        if config.properties:
            self._connection.properties = _convert.symbol_keys(config.properties)
        if config.offered_capabilities:
            self._connection.offered_capabilities = _convert.symbol_array(
                config.offered_capabilities
            )
        if config.desired_capabilities:
            self._connection.desired_capabilities = _convert.symbol_array(
                config.desired_capabilities
            )
        self._collector = Collector()
        self._connection.collect(self._collector)
        self._head_at = len(self._layers)  # the layer whose input is the protocol stream
        if config.role is Role.SERVER:
            self._transport = Transport(Transport.SERVER)
        else:
            self._transport = Transport()
            self._setup_client_security()
        if config.idle_timeout:
            # proton advertises half its local timeout and declares the peer dead after a full
            # one without input: with 2 x idle_timeout a silent peer is found after ~2 timeouts.
            self._transport.idle_timeout = 2 * config.idle_timeout
        if config.max_frame_size:
            self._transport.max_frame_size = config.max_frame_size
        if config.trace_frames:
            self._transport.tracer = _log_frame
            self._transport.trace(Transport.TRACE_FRM)
        self._transport.bind(self._connection)
        self._pn_transport = self._transport._impl  # proton's C transport: the hot paths call
        # the C binding directly, without proton's Python wrapper around each call
        self._bare = False  # every layer passes bytes through now (see _note_layers)

    # Set-up ------------------------------------------------------------------------------------

    def _setup_client_security(self) -> None:
        config = self.config
        auth = config.auth
        tls = config.tls
        if isinstance(tls, TlsClientOptions):  # TLS is the layer nearest the socket
            layer = TlsClientLayer(tls.ssl_context(), tls.peer_name or config.hostname)
            self._layers = (layer, *self._layers)
        self._head_at = len(self._layers)  # the protocol stream starts above TLS
        if auth is not None:  # our SASL layer (proton's, without Cyrus, lacks SCRAM)
            sasl = SaslClientLayer(auth, secure=tls is not None, hostname=config.hostname)
            self._layers = (*self._layers, sasl)

    # The connection ----------------------------------------------------------------------------

    def open(self, properties: dict[str, Any] | None = None) -> None:
        """Send our Open frame (client: start; server: accept the peer's Open).

        Args:
            properties: Open properties to send instead of the configured ones (a server that
                refuses says so in its Open, e.g. ``amqp:connection-establishment-failed``).
        """
        if properties is not None:
            self._connection.properties = _convert.symbol_keys(properties)
        self._connection.open()

    def close(self, error: ErrorCondition | None = None) -> None:
        """Close the connection, optionally with an error condition. Idempotent."""
        if self._connection.state & _LOCAL_CLOSED:
            return
        if error is not None:
            self._connection.condition = _convert.condition_to_pn(error)
        self._connection.close()

    def abort(self, error: ErrorCondition) -> None:
        """Give up on the connection without a Close frame (the socket is gone or useless)."""
        self._transport.condition = _convert.condition_to_pn(error)
        self._transport.close_tail()
        self._transport.close_head()
        self._process()

    def open_session(self) -> Session:
        """Begin a new session; ``SessionRemoteOpen`` follows when the peer answers."""
        session = Session(self, self._connection.session())
        session.open()
        return session

    @property
    def is_finished(self) -> bool:
        """True once ``TransportClosed`` was reported: nothing more comes in or goes out."""
        return self._finished

    @property
    def remote_properties(self) -> dict[str, Any]:
        """The peer's connection properties (from its Open)."""
        return _convert.plain_keys(self._connection.remote_properties)

    @property
    def remote_offered_capabilities(self) -> tuple[str, ...]:
        """The capabilities the peer offered in its Open."""
        return _convert.symbols(self._connection.remote_offered_capabilities)

    @property
    def remote_idle_timeout(self) -> float:
        """The idle timeout the peer advertised, in seconds (0: none)."""
        return float(self._transport.remote_idle_timeout)

    @property
    def awaits_tls_handshake(self) -> bool:
        """True while the client's TLS handshake is not done (False without TLS)."""
        return any(
            isinstance(layer, TlsClientLayer) and not layer.is_handshaken for layer in self._layers
        )

    @property
    def user(self) -> str | None:
        """The user a layer authenticated (the server role's SASL), if any."""
        return next((layer.user for layer in self._layers if layer.user), None)

    # Bytes -------------------------------------------------------------------------------------

    def receive_data(self, data: bytes) -> None:
        """Feed bytes read from the socket; ``b""`` means the peer closed its end (EOF)."""
        eof = not data
        if not self._bare:
            for index, layer in enumerate(self._layers):
                if index == self._head_at:
                    self._note_head(data)
                data = layer.receive(data)
                if layer.error is not None:
                    self._fail_layer(layer.error)
                    return
                eof = eof or layer.eof
            if self._head_at == len(self._layers):
                self._note_head(data)
            self._note_layers()
        self._push(data)
        if eof or self._eof_pending:
            self._eof_pending = True
            self._close_tail_when_drained()
        self._process()

    def _note_head(self, data: bytes) -> None:
        if len(self.head) < 8:
            self.head += data[: 8 - len(self.head)]

    def _note_layers(self) -> None:
        """Once the protocol header came and every layer passes bytes through unchanged for
        good (no TLS, a SASL login done), bytes skip the layers: fewer calls per frame."""
        if len(self.head) >= 8 and all(layer.passes_through for layer in self._layers):
            self._bare = True

    def _close_tail_when_drained(self) -> None:
        if self._eof_pending and not self._backlog and self._capacity() >= 0:
            self._transport.close_tail()

    # proton's Transport methods without their Python wrapper (per frame, several times): the
    # same results and errors.

    def _checked(self, code: int) -> int:
        """``code`` (a count, or ``PN_EOS``), or the transport's error raised as proton's
        Python binding raises it."""
        if code < PN_EOS:
            self._transport._check(code)
        return code

    def _capacity(self) -> int:
        capacity: int = cproton.pn_transport_capacity(self._pn_transport)
        return capacity if capacity >= PN_EOS else self._checked(capacity)

    def _pending(self) -> int:
        pending: int = cproton.pn_transport_pending(self._pn_transport)
        return pending if pending >= PN_EOS else self._checked(pending)

    def _push(self, data: bytes) -> None:
        """Push input in slices of at most ``capacity()`` (proton raises past it).

        What does not fit stays in a backlog, retried after output was taken (proton frees
        input space as it processes); nothing is dropped while the transport still reads.
        """
        if self._backlog:
            data, self._backlog = self._backlog + data, b""
        pn_transport = self._pn_transport
        rest: bytes | memoryview = data
        while rest:
            capacity = self._capacity()
            if capacity < 0:  # the transport stopped reading (error or closed): input is moot
                return
            if capacity == 0:
                self._backlog = bytes(rest)
                return
            if capacity < len(rest) and type(rest) is bytes:
                rest = memoryview(rest)  # slices of more than fits, without copying the rest
            chunk = rest[:capacity]  # all of it (the same object) when it fits: the usual case
            pushed = cproton.pn_transport_push(pn_transport, chunk)
            if pushed != len(chunk):
                self._checked(pushed)  # raises when it is an error
                raise OverflowError(f"unable to process all bytes: {pushed}, {len(chunk)}")
            rest = rest[len(chunk) :]
            if rest:
                self._process()

    def _fail_layer(self, error: ErrorCondition) -> None:
        log.info("connection refused below AMQP: %s", error)
        self._layer_error = error  # proton's copy of it would lose ``local``
        self._transport.condition = _convert.condition_to_pn(error)
        self._transport.close_tail()
        self._transport.close_head()
        self._process()

    def data_to_send(self) -> bytes:
        """Everything ready to be written to the socket now (possibly ``b""``)."""
        pn_transport = self._pn_transport
        pending = self._pending()
        out = b""
        if pending > 0:
            code, peeked = cproton.pn_transport_peek(pn_transport, pending)
            if code != PN_EOS:
                if code < PN_EOS:
                    self._checked(code)  # raises
                out = bytes(peeked)
            cproton.pn_transport_pop(pn_transport, pending)
        if not self._bare:
            for layer in reversed(self._layers):
                out = layer.send(out)
            self._note_layers()
        if self._backlog:
            self._push(b"")
            self._close_tail_when_drained()
        if pending < 0 or self._backlog:
            self._process()
        return out

    @property
    def has_events(self) -> bool:
        """True when ``events()`` has something to report that was already processed."""
        return bool(self._events)

    @property
    def wants_write(self) -> bool:
        """True when ``data_to_send`` has something (or must run: the transport ended or input
        waits for room). Cheap: asks proton how much output is pending."""
        if self._pending() != 0 or self._backlog:
            return True
        return not self._bare and any(layer.has_output for layer in self._layers)

    def tick(self, now: float) -> float | None:
        """Run heartbeat and idle-timeout logic at time ``now`` (seconds, monotonic).

        Returns:
            The time at which ``tick`` must be called next, or None if no timer is needed.
        """
        deadline = cproton.pn_transport_tick(self._pn_transport, int(now * 1000))
        self._process()
        return deadline / 1000 if deadline else None

    def release(self) -> None:
        """The connection is over: take our wrappers off proton's sessions and links, and forget
        the unsettled deliveries. Each session or link wrapper holds its proton object and
        proton's C record holds the wrapper, a cycle Python's collector cannot see: without
        this, every connection's objects (some 37 KB) stayed for the process's life, one more
        per failover."""
        self.unsettled.clear()
        conn = self._connection._impl
        session = cproton.pn_session_head(conn, 0)
        while not cproton.isnull(session):
            drop_wrapper_in(cproton.pn_session_attachments(session))
            session = cproton.pn_session_next(session, 0)
        link = cproton.pn_link_head(conn, 0)
        while not cproton.isnull(link):
            drop_wrapper_in(cproton.pn_link_attachments(link))
            link = cproton.pn_link_next(link, 0)

    # Events ------------------------------------------------------------------------------------

    def events(self) -> list[EngineEvent]:
        """Return and forget the events that happened since the last call."""
        self._process()
        events, self._events = self._events, []
        return events

    def _process(self) -> None:
        # The hot path reads events through proton's C binding: ``Collector.peek()`` builds a
        # Python wrapper for the event's delivery, link, session, connection and transport each
        # time, which the profile showed to be a third of the engine's cost. Deliveries wrap only
        # what they need; the rarer events still go through proton's ``Event``.
        impl = self._collector._impl
        handlers = _HANDLERS
        while True:
            raw = cproton.pn_collector_peek(impl)
            if not raw:  # a cffi pointer is false when NULL (``cproton.isnull``, inline)
                return
            number = cproton.pn_event_type(raw)
            if number == _PN_DELIVERY:
                self._on_delivery(cproton.pn_event_delivery(raw))
            elif number == _PN_LINK_FLOW:  # a flow per transfer, on some brokers
                self._events.append(LinkFlow(self._link_of(cproton.pn_event_link(raw))))
            elif number == _PN_LINK_REMOTE_OPEN:  # thousands at once when failover restores
                self._events.append(LinkRemoteOpen(self._link_of(cproton.pn_event_link(raw))))
            else:
                handler = handlers.get(number)
                if handler is not None:
                    handler(self, Event.wrap(raw))
            cproton.pn_collector_pop(impl)

    def _on_connection_remote_open(self, event: Event) -> None:
        conn = self._connection
        self._events.append(
            ConnectionRemoteOpen(
                container_id=conn.remote_container,
                hostname=conn.remote_hostname,
                properties=_convert.plain_keys(conn.remote_properties),
                offered_capabilities=_convert.symbols(conn.remote_offered_capabilities),
                desired_capabilities=_convert.symbols(conn.remote_desired_capabilities),
                idle_timeout=float(self._transport.remote_idle_timeout),
                user=self.user,
            )
        )

    def _on_connection_remote_close(self, event: Event) -> None:
        self._events.append(
            ConnectionRemoteClose(_convert.condition_from_pn(self._connection.remote_condition))
        )
        if not self._connection.state & _LOCAL_CLOSED:
            self._connection.close()

    def _on_session_remote_open(self, event: Event) -> None:
        self._events.append(SessionRemoteOpen(Session._of(self, _pn(event.session))))

    def _on_session_remote_close(self, event: Event) -> None:
        pn_session: Any = event.session
        session = Session._of(self, pn_session)
        self._events.append(SessionRemoteClose(session, session.remote_error))
        if not pn_session.state & _LOCAL_CLOSED:
            pn_session.close()

    def _on_link_remote_close(self, event: Event) -> None:
        pn_link: Any = event.link
        link = Link._of(self, pn_link)
        closed = event.type == Event.LINK_REMOTE_CLOSE
        link.closed_by_peer = not link.is_closed
        self._events.append(LinkRemoteClose(link, link.remote_error, closed))
        if link.closed_by_peer:
            if closed:
                link.close()
            else:
                link.detach()

    def _link_of(self, raw_link: Any) -> Link:
        """Our wrapper of proton's C link, read from its record (built on first sight)."""
        link = wrapper_in(cproton.pn_link_attachments(raw_link))
        return link if link is not None else Link._of(self, proton.Link.wrap(raw_link))

    def _on_delivery(self, raw_delivery: Any) -> None:
        delivery = self.unsettled.get(raw_delivery)
        if delivery is None:  # first sight of an incoming delivery
            link = self._link_of(cproton.pn_delivery_link(raw_delivery))
            delivery = Delivery(link, raw_delivery)
        link = delivery.link
        if isinstance(link, Receiver) and not delivery.received:
            if cproton.pn_delivery_aborted(raw_delivery):
                delivery.settle()
                return
            if cproton.pn_delivery_partial(raw_delivery) or not cproton.pn_delivery_readable(
                raw_delivery
            ):
                return  # the rest of the message is still to come
            pn_link = link._pn
            payload = pn_link.recv(cproton.pn_delivery_pending(raw_delivery)) or b""
            pn_link.advance()
            delivery.received = True
            self._events.append(MessageReceived(delivery, payload))
            return
        settled = bool(cproton.pn_delivery_settled(raw_delivery))
        if settled or cproton.pn_delivery_updated(raw_delivery):
            self._events.append(DeliveryUpdated(delivery, delivery.remote_outcome, settled))

    def _on_transport_error(self, event: Event) -> None:
        # The transport gave up (refused login, framing error, idle timeout): stop reading too,
        # or a peer that keeps its socket open (RabbitMQ after a failed login) would keep the
        # connection half-alive forever. TransportClosed follows once the output is flushed.
        if self._capacity() >= 0:
            self._transport.close_tail()

    def _on_transport_closed(self, event: Event) -> None:
        if self._finished:
            return
        self._finished = True
        error = self._layer_error or _convert.condition_from_pn(self._transport.condition)
        remote_closed = bool(self._connection.state & proton.Endpoint.REMOTE_CLOSED)
        ending = _other_protocol(self.head) or _ending_condition(error, remote_closed)
        self._events.append(TransportClosed(ending))


FRAMING_ERROR: Final = "amqp:connection:framing-error"
_AMQP_1_0_HEADERS: Final = tuple(b"AMQP%c\x01\x00\x00" % protocol for protocol in (0, 2, 3))
_AMQP_0_9_1_HINT: Final = (
    "the broker speaks AMQP 0-9-1, not AMQP 1.0: enable its AMQP 1.0 plugin "
    "(rabbitmq-plugins enable rabbitmq_amqp1_0)"
)


def _log_frame(transport: Transport, frame: str) -> None:
    """Proton's trace of one frame (``FRAME: 0 -> @open(16) [...]``), at DEBUG."""
    frames_log.debug("%s", frame)


def _other_protocol(head: bytes) -> ErrorCondition | None:
    """The ending when the peer answered with another AMQP version's header (RabbitMQ without
    its AMQP 1.0 plugin answers ``AMQP 0-0-9-1``), where proton says only "Unknown protocol"."""
    if len(head) < 8 or not head.startswith(b"AMQP") or head in _AMQP_1_0_HEADERS:
        return None
    if head[5:8] == b"\x00\x09\x01":
        return ErrorCondition(FRAMING_ERROR, _AMQP_0_9_1_HINT)
    version = ".".join(str(b) for b in head[5:8])
    return ErrorCondition(FRAMING_ERROR, f"the broker speaks AMQP {version}, not AMQP 1.0")


def _ending_condition(error: ErrorCondition | None, remote_closed: bool) -> ErrorCondition | None:
    """Why a transport ended, in the terms failover needs (proton's names mislead there)."""
    description = (error.description or "") if error is not None else ""
    if error is not None and error.name == CONNECTION_LOST:
        return error  # the driver's own abort: it carries the socket's error
    if not remote_closed and (error is None or "connection aborted" in description):
        # proton calls an EOF before Close a framing error; it is a lost connection.
        return ErrorCondition(CONNECTION_LOST, "the peer closed the socket without a Close")
    if error is not None and "idle-timeout expired" in description:
        # proton calls a silent peer a resource limit; for us it is a lost connection.
        return ErrorCondition(CONNECTION_LOST, "no frames from the peer within the idle timeout")
    return error


def _pn(endpoint: Any) -> Any:
    """An event's endpoint, known to be present for that event type."""
    assert endpoint is not None
    return endpoint


_PN_DELIVERY = Event.DELIVERY.number
_PN_LINK_FLOW = Event.LINK_FLOW.number
_PN_LINK_REMOTE_OPEN = Event.LINK_REMOTE_OPEN.number

_HANDLERS: Mapping[int, Any] = {
    Event.CONNECTION_REMOTE_OPEN.number: Engine._on_connection_remote_open,
    Event.CONNECTION_REMOTE_CLOSE.number: Engine._on_connection_remote_close,
    Event.SESSION_REMOTE_OPEN.number: Engine._on_session_remote_open,
    Event.SESSION_REMOTE_CLOSE.number: Engine._on_session_remote_close,
    Event.LINK_REMOTE_CLOSE.number: Engine._on_link_remote_close,
    Event.LINK_REMOTE_DETACH.number: Engine._on_link_remote_close,
    Event.TRANSPORT_ERROR.number: Engine._on_transport_error,
    Event.TRANSPORT_CLOSED.number: Engine._on_transport_closed,
}
