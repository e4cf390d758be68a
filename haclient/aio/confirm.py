"""How a session proves that the broker processed its acknowledgements when the broker does not
grant receiver settle mode ``second`` (A6).

How this works: the dispositions go out settled. ``Confirmer.confirm`` then cuts the output (what
is queued later is written after them, see ``AmqpConnection.cut``) and makes one exchange on the
same session that the broker answers: a broker processes a session's frames in order, so its
answer proves that it processed the dispositions written before. The candidates, cheapest first:

- ``LINK_FLOW``: one more credit on the session's idle probe receiver (a topic nobody publishes
  to). RabbitMQ answers every flow on a link it sends on with its own, after the backing channel
  processed what came before. One frame each way. Only RabbitMQ is known to answer: the
  specification's way to demand an answer, a flow with ``echo=true``, cannot be written through
  proton's engine (and RabbitMQ 3.10 ignores it on a session flow).
- ``DRAIN``: a drain of one credit on the session's idle probe receiver, whose source is a
  temporary queue (a dynamic node); the specification makes the sender answer a drain with a
  flow. One frame each way. Brokers with dynamic nodes (ActiveMQ, the reference broker). Never
  RabbitMQ: it ends the session on a dynamic source, and on a drain of a classic queue.
- ``ROUND_TRIP``: a probe sender link attached (and detached) after the dispositions; the
  broker's attach answers. Works everywhere, and costs the broker a link set-up per
  confirmation: the last resort.

``fallback_for`` picks per broker (``LINK_FLOW`` on RabbitMQ, ``DRAIN`` elsewhere) unless the
application chose one (``ack_confirmation=``). A broker that refuses the probe receiver, or
leaves its exchange unanswered for ``timeout``, gets ``ROUND_TRIP`` from then on, on that
session, and the session says so (``on_downgrade``). Once a probe has been answered, the later
exchanges on it wait without a timer (a timer costs about as much as the rest of the exchange
on the client): that broker answers there, and one that stops answering altogether is found by
the idle timeout (F13) like any silent broker.

Thread-safety: none; everything runs on the connection's event loop.
"""

from __future__ import annotations

import itertools
import logging
import uuid
from collections.abc import Callable

import anyio

from haclient.amqp.connection import AmqpConnection
from haclient.amqp.endpoints import Receiver, Session
from haclient.amqp.types import Terminus
from haclient.errors import AttachTimeoutError, ConnectionLostError, HAClientError
from haclient.modes import AckConfirmation

__all__ = ["FALLBACKS", "Confirmer", "fallback_for", "round_trip_on"]

log = logging.getLogger("haclient.session")

_probe_names = itertools.count(1)

FALLBACKS = (AckConfirmation.LINK_FLOW, AckConfirmation.DRAIN, AckConfirmation.ROUND_TRIP)
"""The confirmations for a broker without mode ``second``, cheapest first."""

_AT_ONCE = frozenset({AckConfirmation.LINK_FLOW, AckConfirmation.DRAIN})
"""The exchanges ``confirm_then`` makes without a task (the broker's answer calls back)."""


def fallback_for(product: str | None, chosen: str = "auto") -> AckConfirmation:
    """The confirmation to use where mode ``second`` is not granted.

    Args:
        product: The broker's ``product`` Open property.
        chosen: The ``ack_confirmation`` option: ``auto`` or one of ``FALLBACKS``' names
            (``settle-second`` counts as ``auto`` here: it was asked for and not granted).
            ``drain`` on RabbitMQ gives ``ROUND_TRIP``: RabbitMQ 3.10 ends the session on a
            dynamic source ("Dynamic sources not supported") and on a drain of a classic queue.
    """
    rabbitmq = product == "RabbitMQ"
    if chosen == AckConfirmation.DRAIN.value and rabbitmq:
        return AckConfirmation.ROUND_TRIP  # RabbitMQ ends the session on the probe's attach
    if chosen not in ("auto", AckConfirmation.SETTLE_SECOND.value):
        return AckConfirmation(chosen)
    return AckConfirmation.LINK_FLOW if rabbitmq else AckConfirmation.DRAIN


class Confirmer:
    """The confirmation exchanges of one session, and its probe receiver (one per AMQP session:
    a failover's new session attaches a new one).

    Args:
        on_downgrade: Called with ``ROUND_TRIP`` when the broker failed the cheaper exchange.
    """

    def __init__(self, on_downgrade: Callable[[AckConfirmation], None]) -> None:
        self._on_downgrade = on_downgrade
        self._session: Session | None = None
        self._probe: Receiver | None = None
        self._answered = False  # the probe's broker answered an exchange on it
        self._failed: set[tuple[Session, AckConfirmation]] = set()

    def effective(self, session: Session, kind: AckConfirmation) -> AckConfirmation:
        """``kind``, or ``ROUND_TRIP`` if the broker already failed ``kind`` on ``session``."""
        return AckConfirmation.ROUND_TRIP if (session, kind) in self._failed else kind

    async def confirm(
        self,
        amqp: AmqpConnection,
        session: Session,
        kind: AckConfirmation,
        *,
        address: str | None,
        topic_prefix: str,
        timeout: float,
    ) -> None:
        """Return once the broker processed every frame queued so far on ``session``.

        Raises:
            ConnectionLostError (and the like): the connection ended first.
        """
        amqp.cut()
        kind = self.effective(session, kind)
        if kind is not AckConfirmation.ROUND_TRIP:
            try:
                probe = self._probe
                if self._answered and self._session is session and probe and not probe.is_closed:
                    await self._exchange(amqp, probe, kind)  # it answered here before: no timer
                    return
                with anyio.fail_after(timeout):
                    probe = await self._receiver(amqp, session, kind, topic_prefix, timeout)
                    await self._exchange(amqp, probe, kind)
                self._answered = True
                return
            except (TimeoutError, AttachTimeoutError, HAClientError) as exc:
                if not amqp.is_open:
                    raise ConnectionLostError(
                        "the connection ended before the confirmation"
                    ) from exc
                log.info("%s confirmation failed (%s): using round-trip on this session", kind, exc)
                self._failed.add((session, kind))
                self._on_downgrade(AckConfirmation.ROUND_TRIP)
        await round_trip_on(amqp, session, address, timeout=timeout)

    async def _exchange(self, amqp: AmqpConnection, probe: Receiver, kind: AckConfirmation) -> None:
        """One exchange of ``kind`` (``DRAIN`` or ``LINK_FLOW``) on ``probe``. One whose wait
        ends without the answer (cancelled, timed out, failed) leaves the probe behind: its
        answer may still come, and the next exchange on it would take that for its own
        (confirming what the broker has not seen yet); the next exchange attaches a new probe."""
        try:
            if kind is AckConfirmation.DRAIN:
                await amqp.drain(probe, 1)
            else:
                await _flow_answered(amqp, probe)
        except BaseException:
            if probe is self._probe:
                self._probe, self._answered = None, False
            if amqp.is_open and not probe.is_closed:
                amqp.detach(probe)
            raise

    def confirms_at_once(self, session: Session, kind: AckConfirmation) -> bool:
        """Whether ``confirm_then`` can confirm on ``session`` now: the exchange is a drain or
        a link flow on the session's probe, which the broker answered before (so ``confirm``
        would wait for it without a timer too), and no drain of it is under way."""
        probe = self._probe
        return (
            self.effective(session, kind) in _AT_ONCE
            and self._answered
            and self._session is session
            and probe is not None
            and not probe.is_closed
            and not probe.draining
        )

    def confirm_then(
        self,
        amqp: AmqpConnection,
        kind: AckConfirmation,
        then: Callable[[BaseException | None], None],
    ) -> None:
        """``confirm`` without a task, where ``confirms_at_once(session, kind)``: the output is
        cut and the probe drained (``DRAIN``) or given a credit more (``LINK_FLOW``);
        ``then(None)`` is called from the event-loop turn that brings the broker's answer,
        ``then(error)`` once the probe or the connection ended first (then ``confirm`` is the
        way to go on: it falls back as it does for a failed exchange).

        Raises:
            ClosedError, or the peer's reason: the probe or the connection is gone.
        """
        assert self._probe is not None and self._session is not None
        amqp.cut()
        if self.effective(self._session, kind) is AckConfirmation.DRAIN:
            amqp.drain_then(self._probe, 1, then)
        else:
            amqp.flow_then(self._probe, 1, then)

    async def _receiver(
        self,
        amqp: AmqpConnection,
        session: Session,
        kind: AckConfirmation,
        topic_prefix: str,
        timeout: float,
    ) -> Receiver:
        """The session's probe receiver, attached on first use (with no credit: idle)."""
        probe = self._probe
        if self._session is session and probe is not None and not probe.is_closed:
            return probe
        if kind is AckConfirmation.DRAIN:
            source = Terminus(dynamic=True)  # a temporary queue: nobody sends to it
        else:
            source = Terminus(address=f"{topic_prefix}haclient.ack-probe.{uuid.uuid4().hex}")
        name = f"{amqp.engine.config.container_id}:ack-probe-receiver:{next(_probe_names)}"
        probe = await amqp.open_receiver(
            source, session=session, name=name, credit=0, timeout=timeout
        )
        self._session, self._probe, self._answered = session, probe, False
        if kind is AckConfirmation.LINK_FLOW:
            await _flow_answered(amqp, probe)  # shows that the broker answers flows at all
        return probe


async def _flow_answered(amqp: AmqpConnection, probe: Receiver) -> None:
    """Write a flow on ``probe`` (a new credit value, so proton writes one) and wait for the
    broker's answering flow."""
    seen = amqp.flows_received(probe)
    amqp.flow(probe, 1, wake_writer=False)
    await amqp.wait_flow(probe, seen)


async def round_trip_on(
    amqp: AmqpConnection, session: Session, address: str | None, *, timeout: float
) -> None:
    """Prove that the broker processed every frame written so far on ``session``: attach a probe
    sender (after a cut: proton writes an attach before pending dispositions) and detach it."""
    amqp.cut()
    probe = await amqp.open_sender(
        Terminus(address=address),
        session=session,
        name=f"{amqp.engine.config.container_id}:ack-probe:{next(_probe_names)}",
        timeout=timeout,
    )
    amqp.detach(probe)
