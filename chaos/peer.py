"""A scripted AMQP 1.0 peer in the server role, programmed step by step (Qpid JMS's TestAmqpPeer).

How this works: a test writes a script of expectations, each matching one event of a server-role
``Engine`` (open, begin, attach, transfer, declare, discharge, disposition, flow, detach, end,
close), with what to do then: answer, refuse, send a message, drop the socket, or nothing::

    peer = ScriptedPeer()
    peer.expect_open().respond()
    peer.expect_begin().respond()
    peer.expect_attach(coordinator=True).respond(credit=10)
    peer.expect_declare().respond_declared(b"tx1")
    peer.expect_discharge(fail=False).drop_connection()  # a TCP reset as soon as it arrives
    async with peer.serving() as port:
        ...  # drive a client at 127.0.0.1:port
        await peer.wait_script_done(timeout=5)

``expect_connection()`` starts the steps of the next connection (reconnect tests). The listener
(127.0.0.1, a free port) closes once every scripted connection has arrived, so a reconnect beyond
the script is refused (unless ``keep_listening=True``).

Rules it keeps:
    Rule 1: each event must match the next step of its connection. Anything else is a violation:
        recorded, and the connection closed with ``amqp:internal-error`` naming the step, so the
        client fails at once instead of hanging.
    Rule 2: unexpected Flows, heartbeats and answers to the peer's own closes are not judged.
    Rule 3: the peer owns one task group; leaving ``serving()`` cancels every connection (no
        Close frames) and closes the listener.
"""

from __future__ import annotations

import contextlib
import itertools
import socket
import struct
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any, Self, cast

import anyio
from anyio.abc import ByteStream, SocketAttribute, SocketListener, SocketStream, TaskGroup

import haclient.amqp.codec as codec
from chaos.amqp_server import server_engine
from haclient.amqp import Accepted, Declared, ErrorCondition, Outcome, Rejected, Terminus
from haclient.amqp import events as ev
from haclient.amqp.config import EngineConfig, Role
from haclient.amqp.driver import Driver
from haclient.amqp.endpoints import Link, Receiver, Sender
from haclient.errors import MessageFormatError

__all__ = ["Expectation", "PeerConnection", "ScriptedPeer", "describe", "facts"]

Action = Callable[["PeerConnection", Any], None]  # action(connection, event), on the event loop
Payload = bytes | codec.AmqpMessage
NOT_FOUND = ErrorCondition("amqp:not-found", "refused by the scripted peer")


def _address(link: Link) -> str | None:
    """The address the client attached to: its target for a sender, its source for a receiver."""
    return (link.remote_source if link.is_sender else link.remote_target).address


def _request(event: ev.MessageReceived) -> codec.CoordinatorRequest | None:
    """The declare or discharge a transfer to a coordinator carries, else None."""
    if event.delivery.link.is_coordinator:
        with contextlib.suppress(MessageFormatError):
            return codec.decode_coordinator_request(event.payload)
    return None


def facts(event: ev.EngineEvent) -> tuple[str, dict[str, Any]]:
    """What a server-side event is in terms of the client's frames: a name and fields to match."""
    match event:
        case ev.ConnectionRemoteOpen(container_id=container_id):
            return "open", {"container_id": container_id}
        case ev.SessionRemoteOpen():
            return "begin", {}
        case ev.LinkRemoteOpen(link=link):
            sender, address, coordinator = not link.is_sender, _address(link), link.is_coordinator
            return "attach", {"sender": sender, "address": address, "coordinator": coordinator}
        case ev.MessageReceived(delivery=delivery, payload=payload):
            request = _request(event)
            if isinstance(request, codec.Declare):
                return "declare", {}
            if isinstance(request, codec.Discharge):
                return "discharge", {"fail": request.fail, "txn_id": request.txn_id}
            return "transfer", {"address": _address(delivery.link), "size": len(payload)}
        case ev.DeliveryUpdated(outcome=outcome, settled=settled):
            return "disposition", {"outcome": outcome, "settled": settled}
        case ev.LinkRemoteClose(link=link, error=error, closed=closed):
            return "detach", {"address": _address(link), "closed": closed, "error": error}
        case ev.SessionRemoteClose(error=error):
            return "end", {"error": error}
        case ev.ConnectionRemoteClose(error=error):
            return "close", {"error": error}
        case ev.LinkFlow(link=link):
            return "flow", {"address": _address(link), "credit": link.credit}
    return type(event).__name__, {}


def describe(name: str, fields: dict[str, Any]) -> str:
    """``attach(sender=True, address='q')``: what ``facts`` returned, for messages."""
    shown = {k: getattr(v, "__name__", None) or repr(v) for k, v in fields.items() if v is not None}
    return f"{name}({', '.join(f'{k}={v}' for k, v in shown.items())})"


def _reset_on_close(stream: SocketStream) -> None:
    """Make closing ``stream`` send a TCP reset (SO_LINGER 0) where the socket allows it."""
    with contextlib.suppress(OSError, LookupError):  # no raw socket: a plain close, then
        raw = stream.extra(SocketAttribute.raw_socket)
        raw.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))


class PeerConnection(ByteStream):
    """One accepted connection: its server engine, its driver and its place in the script.

    It is also the byte stream its driver runs on, so that a drop can first write what the script
    answered before the drop point (proton may still hold it), then reset the socket.
    """

    def __init__(self, peer: ScriptedPeer, number: int, stream: SocketStream) -> None:
        self.number = number
        self.engine = server_engine(peer.config)
        self.driver = Driver(self.engine, self, lambda events: peer._handle(self, events))
        self.steps = peer._blocks[number - 1]
        self.position = 0
        self.senders: list[Sender] = []  # links the peer answered as the sending end
        self.closed_by_us: set[object] = set()  # what the peer closed itself: links, sessions, self
        self.dropped = False
        self.broken = False  # after a violation the rest of its events are not judged
        self.arrived: list[str] = []
        self.scope = anyio.CancelScope()
        self._stream = stream

    def next_step(self) -> Expectation | None:
        return self.steps[self.position] if self.position < len(self.steps) else None

    def is_echo(self, event: ev.EngineEvent) -> bool:
        """True for the client's answer to a close the peer made itself."""
        ended = getattr(event, "link", None) or getattr(event, "session", None) or self
        closing = ev.LinkRemoteClose | ev.SessionRemoteClose | ev.ConnectionRemoteClose
        return isinstance(event, closing) and ended in self.closed_by_us

    def sender_for(self, address: str | None) -> Sender:
        """The latest open link the peer sends on (to the client's receiver of ``address``)."""
        for sender in reversed(self.senders):
            if not sender.is_closed and address in (None, _address(sender)):
                return sender
        raise AssertionError(f"no open link to send on (address={address!r})")

    def respond(self, event: Any, credit: int, outcome: Outcome | None) -> None:
        match event:
            case ev.ConnectionRemoteOpen():
                self.engine.open()
            case ev.SessionRemoteOpen(session=session):
                session.open()
            case ev.LinkRemoteOpen(link=link):
                link.open()
                if isinstance(link, Receiver) and credit:
                    link.flow(credit)
                elif isinstance(link, Sender):
                    self.senders.append(link)
            case ev.MessageReceived(delivery=delivery):
                delivery.update(outcome or Accepted())
            case ev.DeliveryUpdated(delivery=delivery):
                delivery.settle()

    def refuse(self, event: Any, error: ErrorCondition) -> None:
        match event:
            case ev.ConnectionRemoteOpen():
                self.engine.open()
                self.close(error)
            case ev.SessionRemoteOpen(session=session):
                self.closed_by_us.add(session)
                session.open()
                session.close(error)
            case ev.LinkRemoteOpen(link=link):
                refused = Terminus.null()  # for the client's receiver its source, else its target
                link.open(*((refused, None) if link.is_sender else (None, refused)))
                self.closed_by_us.add(link)
                link.close(error)
            case ev.MessageReceived(delivery=delivery):
                delivery.update(Rejected(error))
            case _:
                raise AssertionError(f"{describe(*facts(event))} cannot be refused")

    def close(self, error: ErrorCondition | None = None) -> None:
        """Close the connection with Close frames."""
        self.closed_by_us.add(self)
        self.engine.close(error)
        self.driver.wakeup()

    def drop(self) -> None:
        """Drop the connection now: no more answers, no Close frame, a TCP reset."""
        self.dropped = True
        self.scope.cancel()  # the driver's run() is cancelled and calls aclose()

    async def receive(self, max_bytes: int = 65536) -> bytes:
        return await self._stream.receive(max_bytes)

    async def send(self, item: bytes) -> None:
        with anyio.move_on_after(5, shield=True):  # a drop must not cut an earlier answer
            await self._stream.send(item)

    async def send_eof(self) -> None:
        await self._stream.send_eof()

    async def aclose(self) -> None:
        if self.dropped:
            with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
                await self.send(self.engine.data_to_send())
            _reset_on_close(self._stream)
        await self._stream.aclose()


class Expectation:
    """One step: what must arrive next, and what to do then (``event`` once it arrived).

    The builder methods add actions, run in the order given, and return the step so calls chain.
    A step without actions sends nothing: the client's request is never answered.
    """

    def __init__(self, number: int, name: str, fields: dict[str, Any]) -> None:
        self.number = number
        self.name = name
        self.fields = {key: value for key, value in fields.items() if value is not None}
        self.event: Any = None
        self._tests: list[Callable[[Any], bool]] = []
        self._actions: list[Action] = []

    def __str__(self) -> str:
        return f"step {self.number} expect_{describe(self.name, self.fields)}"

    @property
    def matched(self) -> bool:
        return self.event is not None

    def matches(self, event: ev.EngineEvent) -> bool:
        name, fields = facts(event)
        fits = [
            isinstance(fields.get(k), v) if isinstance(v, type) else fields.get(k) == v
            for k, v in self.fields.items()
        ]
        return name == self.name and all(fits) and all(test(event) for test in self._tests)

    def where(self, predicate: Callable[[Any], bool]) -> Self:
        """Also require ``predicate(event)``, e.g. on a transfer's decoded body."""
        self._tests.append(predicate)
        return self

    def then(self, action: Action) -> Self:
        """Run ``action(connection, event)`` when the step matches."""
        self._actions.append(action)
        return self

    def no_answer(self) -> Self:
        """Send nothing: the client waits for an answer that never comes (also the default)."""
        return self

    def respond(self, *, credit: int = 100, outcome: Outcome | None = None) -> Self:
        """Answer as a broker would: an Open or Begin with ours; an attach with the termini asked
        for, granting ``credit`` on a link the client sends on; a transfer, declare or discharge
        by settling it with ``outcome`` (default accepted); a disposition by settling our side."""
        return self.then(lambda conn, event: conn.respond(event, credit, outcome))

    def refuse(self, error: ErrorCondition = NOT_FOUND) -> Self:
        """Refuse with ``error``: an Open or Begin is answered and closed at once; an attach is
        answered with a null terminus and its link closed; a transfer is rejected."""
        return self.then(lambda conn, event: conn.refuse(event, error))

    def respond_declared(self, txn_id: bytes = b"txn-1") -> Self:
        """Answer a declare with ``Declared(txn_id)``."""
        return self.respond(outcome=Declared(txn_id))

    def send(self, message: Payload, *, address: str | None = None, settled: bool = False) -> Self:
        """Send a message on the link this event is about, else on the latest link the peer
        sends on (to ``address``). It goes out as soon as the client gives credit."""
        payload = message if isinstance(message, bytes) else codec.encode_message(message)

        def action(conn: PeerConnection, event: Any) -> None:
            link = getattr(event, "link", None)
            if not isinstance(link, Sender) or link.is_closed or address is not None:
                link = conn.sender_for(address)
            link.send(payload, settled=settled)

        return self.then(action)

    def close_connection(self, error: ErrorCondition | None = None) -> Self:
        """Close the connection with Close frames (carrying ``error``, if given)."""
        return self.then(lambda conn, event: conn.close(error))

    def drop_connection(self) -> Self:
        """Drop the connection at this exact point: answers given so far are still written, then
        a TCP reset; nothing for this event or after it, no Close frame."""
        return self.then(lambda conn, event: conn.drop())


class ScriptedPeer:
    """A server-role AMQP peer that walks a script (see the module docstring).

    Args:
        config: The server-role engine's settings (container id, idle timeout, SASL, TLS ...).
        keep_listening: Keep accepting after the scripted connections; each further one is a
            violation and is reset. By default the listener closes, so reconnects are refused.
    """

    def __init__(self, config: EngineConfig | None = None, *, keep_listening: bool = False) -> None:
        self.config = config or EngineConfig("scripted-peer", Role.SERVER)
        if self.config.role is not Role.SERVER:
            raise ValueError("a ScriptedPeer needs a server-role EngineConfig")
        self.keep_listening = keep_listening
        self.port: int | None = None  # while serving
        self.connections: list[PeerConnection] = []
        self.failures: list[str] = []
        self._blocks: list[list[Expectation]] = [[]]
        self._numbers = itertools.count(1)
        self._changed: anyio.Event | None = None

    def expect_connection(self) -> Self:
        """Start the steps of the next connection (the first call may be left out)."""
        if len(self._blocks) > 1 or self._blocks[0]:
            self._blocks.append([])
        return self

    def _add(self, name: str, **fields: Any) -> Expectation:
        step = Expectation(next(self._numbers), name, fields)
        self._blocks[-1].append(step)
        return step

    def expect_open(self, *, container_id: str | None = None) -> Expectation:
        return self._add("open", container_id=container_id)

    def expect_begin(self) -> Expectation:
        return self._add("begin")

    def expect_attach(
        self,
        *,
        sender: bool | None = None,
        address: str | None = None,
        coordinator: bool | None = None,
    ) -> Expectation:
        """Expect an attach: ``sender=True`` a link the client sends on, False one it receives
        on; ``coordinator=True`` a transaction coordinator; ``address`` the node. None: any."""
        return self._add("attach", sender=sender, address=address, coordinator=coordinator)

    def expect_transfer(self, *, address: str | None = None) -> Expectation:
        """Expect a message from the client (not a declare or discharge)."""
        return self._add("transfer", address=address)

    def expect_declare(self) -> Expectation:
        return self._add("declare")

    def expect_discharge(
        self, *, fail: bool | None = None, txn_id: bytes | None = None
    ) -> Expectation:
        """Expect a discharge: ``fail=False`` a commit, ``fail=True`` a rollback, None either."""
        return self._add("discharge", fail=fail, txn_id=txn_id)

    def expect_disposition(
        self, *, outcome: Outcome | type | None = None, settled: bool | None = None
    ) -> Expectation:
        """Expect the client's disposition of a message the peer sent; ``outcome`` may be an
        outcome or an outcome class."""
        return self._add("disposition", outcome=outcome, settled=settled)

    def expect_flow(self, *, address: str | None = None) -> Expectation:
        return self._add("flow", address=address)

    def expect_detach(self, *, closed: bool | None = None) -> Expectation:
        return self._add("detach", closed=closed)

    def expect_end(self) -> Expectation:
        return self._add("end")

    def expect_close(self) -> Expectation:
        return self._add("close")

    @asynccontextmanager
    async def serving(self) -> AsyncIterator[int]:
        """Listen on 127.0.0.1 (a free port) and walk the script; yields the port.

        Leaving the block cancels every connection (no Close frames) and closes the listener.
        """
        if self.port is not None:
            raise RuntimeError("this ScriptedPeer is already serving")
        self._changed = anyio.Event()
        multi = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
        listener = cast(SocketListener, multi.listeners[0])
        self.port = int(listener.extra(SocketAttribute.local_port))
        failure: Exception | None = None
        try:
            async with listener, anyio.create_task_group() as tg:
                tg.start_soon(self._accept, listener, tg)
                try:
                    yield self.port
                except Exception as exc:  # re-raised below, not wrapped in an ExceptionGroup
                    failure = exc
                finally:
                    tg.cancel_scope.cancel()
        finally:
            self.port = None
        if failure is not None:
            raise failure

    async def _accept(self, listener: SocketListener, tg: TaskGroup) -> None:
        for number in itertools.count(1):
            stream = await listener.accept()
            if number <= len(self._blocks):
                tg.start_soon(self._run_connection, number, stream)
            else:
                self._fail(f"connection {number} was not in the script ({len(self._blocks)} are)")
                _reset_on_close(stream)
                await stream.aclose()
            if number >= len(self._blocks) and not self.keep_listening:
                await listener.aclose()  # a reconnect beyond the script is refused
                return

    async def _run_connection(self, number: int, stream: SocketStream) -> None:
        conn = PeerConnection(self, number, stream)
        self.connections.append(conn)
        with conn.scope:
            error = await conn.driver.run()
            step = conn.next_step()
            if step is not None and not conn.broken:
                ending = f"ended ({error})" if error else "was closed"
                self._fail(f"{step} was never met: connection {number} {ending} before it")

    def _handle(self, conn: PeerConnection, events: list[ev.EngineEvent]) -> None:
        """The driver's event handler: match each event against the next step, then act."""
        for event in events:
            if conn.dropped or conn.broken:
                break
            if isinstance(event, ev.TransportClosed) or conn.is_echo(event):
                continue
            step = conn.next_step()
            if step is not None and step.matches(event):
                conn.arrived.append(f"{describe(*facts(event))} -> step {step.number}")
                conn.position += 1
                step.event = event
                self._act(conn, step, event)
            elif not isinstance(event, ev.LinkFlow):
                conn.arrived.append(f"{describe(*facts(event))} -> UNEXPECTED")
                waiting = f"while waiting for {step}" if step else "after its last step"
                self._violation(conn, f"unexpected {describe(*facts(event))} {waiting}")
        conn.driver.wakeup()
        self._notify()

    def _act(self, conn: PeerConnection, step: Expectation, event: ev.EngineEvent) -> None:
        for action in step._actions:
            try:
                action(conn, event)
            except Exception as exc:  # a mistake in the script: report it, keep the peer up
                self._violation(conn, f"{step}: its action failed: {exc!r}")
                return
            if conn.dropped:
                return

    def _violation(self, conn: PeerConnection, text: str) -> None:
        message = f"connection {conn.number}: {text}"
        self._fail(message)
        conn.broken = True
        conn.close(ErrorCondition("amqp:internal-error", f"scripted peer: {message}"))

    def _fail(self, message: str) -> None:
        self.failures.append(message)
        self._notify()

    def _notify(self) -> None:
        if self._changed is not None:
            self._changed.set()
            self._changed = anyio.Event()

    def assert_script_done(self) -> None:
        """Raise ``AssertionError`` naming the first violation, else the first unmet step."""
        log = "; ".join(f"connection {c.number}: {c.arrived}" for c in self.connections)
        arrived = f"arrived: {log or 'nothing'}"
        if self.failures:
            raise AssertionError(f"scripted peer: {self.failures[0]} ({arrived})")
        for number, block in enumerate(self._blocks, 1):
            for step in (step for step in block if not step.matched):
                state = "is waiting" if number <= len(self.connections) else "never came"
                raise AssertionError(
                    f"scripted peer: {step} was never met (connection {number} {state}; {arrived})"
                )

    async def wait_script_done(self, timeout: float = 5.0) -> None:
        """Wait until every step matched or something went wrong, then ``assert_script_done()``.

        Raises:
            AssertionError: a violation happened, or a step is still unmet after ``timeout``.
        """
        with anyio.move_on_after(timeout):
            while not self.failures and not all(s.matched for b in self._blocks for s in b):
                self._changed = self._changed or anyio.Event()
                await self._changed.wait()
        self.assert_script_done()
