"""The walk of a reconnect plan: attempt after attempt until a connection is in use.

How this works: a ``Walker`` serves one supervisor. For each connect (the first one, and each
failover) the supervisor gives it a ``ReconnectPlan`` (``failover.schedule``: which broker
next, how long to wait, when to give up), the ready connection the failover may take first
(the preferred broker's that started a return, or the warm spare: ``failover.standby``), and
``use``, which makes a connection the one in use (and, on a failover, restores on it). The
walk tries the ready connection first, then asks the plan for an attempt, tells the gate which
attempt is under way, sleeps the attempt's delay, calls the connector, and hands what it opened
to ``use``; a connection lost during its restore is the next attempt's failure. It keeps the
record of the attempts: how many were made, the last failure, and each broker's last failure
in the last walk.

Rules it keeps (``failover.states``' invariants, whose decisions it applies):

- 6: after a failed attempt, or a loss during a restore, ``retriable`` decides whether the walk
  goes on (a refusal of trust aside): False ends it, attempts left or not.
- 10 (F15): a refusal of trust is one broker's answer: logged as a warning (each broker's first
  in a walk), the next broker tried at once; every broker of a pass refusing at its last
  attempt ends the walk with ``refusal_error``.
- 11 (F16, F17): a ready connection is taken before any attempt of the plan and counts as none.
- ``warn_after_attempts``: every that many failed attempts, a warning; the attempts a broker
  starting up dropped (``BrokerNotReadyError``) while the plan retries it quickly
  (``ReconnectPlan.starting_up``) are not counted, so a failover that waits out a new
  master's first milliseconds logs no warning.
- 13 (F18): after a failure that redirects, of an attempt or of the connection in use (the
  loss the walk starts from), ``redirect_next`` names the next attempt's broker, tried at
  once and outside the plan (it counts among ``attempts``, not among the plan's).
- F4: when the plan runs out, the walk ends; ``failure`` says what failed last.
- F5: a wait the plan watches (``ReconnectPlan.watched``: a broker whose port refused, in the
  fast phase) probes that broker's port (``failover.ports``) and ends as soon as it accepts.
"""

from __future__ import annotations

import logging
import traceback
from collections.abc import Awaitable, Callable
from typing import Generic

from failover.errors import ConnectionLostError
from failover.gate import ConnectionGate
from failover.policy import Attempt
from failover.ports import PortProbe, watch
from failover.protocols import Connector, P
from failover.schedule import ReconnectPlan
from failover.standby import close_quietly
from failover.states import (
    ConnectionState,
    is_refusal,
    redirect_next,
    redirect_of,
    refusal_error,
    refused_everywhere,
)
from failover.url import BrokerURL

__all__ = ["Use", "Walker"]

_log = logging.getLogger("haclient.failover")

_REDIRECTED = -1  # the broker_index of an attempt that follows a redirect, outside the plan

#: Makes a connection to a broker the one in use (and restores on it after a loss): False when
#: it was lost meanwhile, closed, its cause recorded in the walker's ``failure``.
Use = Callable[[P, BrokerURL], Awaitable[bool]]


class Walker(Generic[P]):
    """Walks the reconnect plans of one supervisor (see the module docstring).

    Args:
        gate: Told the attempt under way; its state says whether the connection was closed.
        connector: Opens one physical connection, counted as an attempt.
        retriable: Whether a failure is one a reconnect can fix.
        clock: The monotonic clock the plans read.
        sleep: Sleeps an attempt's delay.
        warn_after_attempts: Every how many failed attempts the log says so as a warning.
        port_probe: Makes the probe of the ports a walk watches (one per walk; None: waits are
            only slept).
    """

    def __init__(
        self,
        gate: ConnectionGate[P],
        connector: Connector[P],
        *,
        retriable: Callable[[BaseException], bool],
        clock: Callable[[], float],
        sleep: Callable[[float], Awaitable[None]],
        warn_after_attempts: int,
        port_probe: Callable[[], PortProbe] | None = None,
    ) -> None:
        self._gate = gate
        self._port_probe = port_probe
        self._probe: PortProbe | None = None  # this walk's, made at its first watched wait
        self._connector = connector
        self._retriable = retriable
        self._clock = clock
        self._sleep = sleep
        self._warn_after_attempts = warn_after_attempts
        self.attempts = 0  # connection attempts made, in every walk
        #: The last failure: of an attempt, or the loss the supervisor noted (F4's cause).
        self.failure: BaseException | None = None
        self.failures: dict[str, BaseException] = {}  # broker -> its last, in the last walk

    def cause(self) -> BaseException:
        """The last failure, or an error saying that no attempt was made."""
        return self.failure or ConnectionLostError("no connection attempt was made")

    async def walk(
        self, plan: ReconnectPlan, ready: tuple[P, BrokerURL] | None, use: Use[P]
    ) -> bool:
        """Connect following ``plan``, ``ready`` first when given; True once ``use`` took a
        connection. False when the plan ended (it ran out, the budget was spent) or a failure
        no reconnect can fix came up; ``failure`` says what failed last."""
        self.failures = {}
        try:
            return await self._walk(plan, ready, use)
        finally:
            self._gate.attempting(None)
            probe, self._probe = self._probe, None
            close = getattr(probe, "close", None)
            if close is not None:
                close()

    async def _walk(
        self, plan: ReconnectPlan, ready: tuple[P, BrokerURL] | None, use: Use[P]
    ) -> bool:
        failed: BaseException | None = None
        refused = False  # the last attempt was a refusal of trust
        failures = 0
        counted = 0  # the failures warn_after_attempts counts
        # broker -> its refusal, for each broker whose last attempt was one (invariant 10)
        refusals: dict[str, BaseException] = {}
        if ready is not None:  # the handover of a return, or the warm spare: restore at once
            if await self._use(use, *ready):
                return True
            failed = self.cause()
            if not self._retriable(failed):
                return False
        hops = 0  # redirects followed in a row (invariant 13)
        last = self.failure  # the loss the walk starts from: its redirect is followed first
        while (attempt := self._next(plan, failed, refused, last, hops)) is not None:
            hops = hops + 1 if attempt.broker_index == _REDIRECTED else 0
            self._gate.attempting(attempt)
            if attempt.delay > 0:
                await self._wait(plan, attempt)
            connection = await self._try(attempt)
            if connection is None:
                failed = last = self.cause()
                failures += 1
                due = False  # a warning every warn_after_attempts counted failures
                if not plan.starting_up(self._clock(), failed):
                    counted += 1
                    every = self._warn_after_attempts
                    due = every > 0 and counted % every == 0
                refused = self._note_refusal(attempt, failed, refusals, failures, due)
                if refused and refused_everywhere(refusals, plan.brokers_of_a_pass):
                    self.failure = refusal_error(refusals, plan.brokers_of_a_pass, failed)
                    return False
                if not refused and not self._retriable(failed):
                    return False
                continue
            if self._gate.state is ConnectionState.CLOSED:  # closed while the connector ran
                await close_quietly(connection)
                return False
            if await self._use(use, connection, attempt.broker):
                return True
            failed = last = self.cause()
            refused = False  # it accepted the connection
            refusals.pop(str(attempt.broker), None)
            if not self._retriable(failed):
                return False
        _log.info("the reconnect schedule ends after %d attempts", plan.made)
        return False

    def _next(
        self,
        plan: ReconnectPlan,
        failed: BaseException | None,
        refused: bool,
        last: BaseException | None,
        hops: int,
    ) -> Attempt[BrokerURL] | None:
        """The next attempt: to the broker the ``last`` failure redirects to, at once
        (invariant 13), else the plan's (None: the plan ended)."""
        target = redirect_next(last, hops)
        if target is not None:
            _log.info("following the redirect to %s", target)
            return Attempt(_REDIRECTED, target, 0.0, plan.made)
        if redirect_of(last) is not None:
            _log.warning(
                "not following the redirect to %s: %d redirects in a row",
                redirect_of(last),
                hops,
            )
        return plan.next(self._clock(), failed, refused=refused)

    async def _wait(self, plan: ReconnectPlan, attempt: Attempt[BrokerURL]) -> None:
        """Wait ``attempt``'s delay; a wait the plan watches ends once the port accepts."""
        port_watch = plan.watched(attempt)
        if port_watch is None or self._port_probe is None:
            await self._sleep(attempt.delay)
            return
        if self._probe is None:
            self._probe = self._port_probe()
        if await watch(
            self._probe,
            attempt.broker,
            attempt.delay,
            interval=port_watch.interval,
            clock=self._clock,
            sleep=self._sleep,
        ):
            _log.debug(
                "the port of %s accepts: attempt %d goes now", attempt.broker, attempt.number
            )

    async def _use(self, use: Use[P], connection: P, broker: BrokerURL) -> bool:
        if await use(connection, broker):
            return True
        self.failures[str(broker)] = self.cause()
        return False

    async def _try(self, attempt: Attempt[BrokerURL]) -> P | None:
        self.attempts += 1
        _log.debug("connecting to %s (attempt %d)", attempt.broker, attempt.number)
        try:
            return await self._connector(attempt.broker)
        except Exception as exc:  # the connector's failure is the cause F4 reports
            # where it came from, for whoever debugs it (the cause F4 reports keeps its words)
            _log.debug("attempt %d to %s raised", attempt.number, attempt.broker, exc_info=exc)
            _drop_locals(exc)
            self.failure = self.failures[str(attempt.broker)] = exc
            return None

    def _note_refusal(
        self,
        attempt: Attempt[BrokerURL],
        failed: BaseException,
        refusals: dict[str, BaseException],
        failures: int,
        due: bool,
    ) -> bool:
        """Log the failed ``attempt`` and keep ``refusals`` (broker -> its refusal, for each
        broker whose last attempt was one) up to date; True when ``failed`` is a refusal of
        trust (invariant 10 of ``failover.states``). A broker's first refusal is a warning
        that says which broker and why."""
        key = str(attempt.broker)
        refused = is_refusal(failed, retriable=self._retriable(failed))
        self._log_failure(attempt, failures, warn=due or (refused and key not in refusals))
        if refused:
            refusals[key] = failed
        else:
            refusals.pop(key, None)
        return refused

    def _log_failure(self, attempt: Attempt[BrokerURL], failures: int, *, warn: bool) -> None:
        """Log a failed attempt: a warning when ``warn`` (a broker's first refusal of trust in
        a walk: which broker, and why; or ``warn_after_attempts`` more counted failures)."""
        _log.log(
            logging.WARNING if warn else logging.INFO,
            "attempt %d to connect to %s failed (%d failed so far): %s",
            attempt.number,
            attempt.broker,
            failures,
            self.failure,
        )


def _drop_locals(error: BaseException) -> None:
    """Clear the local variables of the finished frames in the tracebacks of ``error`` and of
    the errors it was raised from, keeping the tracebacks themselves (file, line, function).

    A failed attempt is kept as the cause F4 reports, and its frames held what the attempt
    built (its socket, task groups, events): kept until the next failure replaces it, those were
    the most numerous objects a failover left behind, and the collector walked them again and
    again while a thousand connections failed over together.
    """
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        traceback.clear_frames(current.__traceback__)
        current = current.__cause__ or current.__context__
