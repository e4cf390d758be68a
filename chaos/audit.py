"""The ledger of a chaos run and the audit that judges it (Jepsen style: record, then check).

Workloads write ``Event`` records to a ``Ledger`` as they go: what was sent, accepted, committed,
received, acknowledged, every exception with its time and the call's duration, and the failover
listener's calls. ``audit(events)`` then decides, per stream (one queue and its workload),
whether every promise of ``docs/semantics.md`` held:

=================  =====  ==================================================================
promise            rule   broken when
=================  =====  ==================================================================
lost               F11,A* an accepted (or committed) message was never consumed: received in
                          AUTO, DUPS_OK and NO_ACK, acknowledged in CLIENT and INDIVIDUAL,
                          committed in TRANSACTED (an in-doubt acknowledge or commit counts).
                          NO_ACK may lose prefetched messages (A5): counted, not a failure.
duplicate          A1-A4  a message consumed again after it was consumed, unless DUPS_OK (A3),
                   F11    its send was cut off by a failover and re-sent (F11), or one of the
                          consumptions was in doubt (F7, F8). A copy left on the queue at the
                          end of the run (``left``) counts as one more consumption.
phantom            F11    a message received that nobody sent (or a reply to no request).
rolled_back_seen   F7     a message of a transaction reported rolled back was received.
in_doubt_partial   F7     an in-doubt transaction was applied in part.
ack_after_failover F8     a CLIENT/INDIVIDUAL acknowledge succeeded although a failover came
                          between a delivery it covered and the call.
old_broker         F9     a receive handed out a message while its connection was failing
                          over (the gate closed: it can only have come from the old link).
blocked            F2,F4  a call took longer than its deadline.
unexpected_error   F3     a call raised what its rule does not allow (only AcknowledgeFailedError
                          from acknowledge/recover, TransactionRolledBackError from commit and
                          InvalidDestinationError from a reply to a temporary queue a failover
                          took away are expected; a receive timing out returns None).
unanswered         F6     a request got no reply after every retry.
hung               F2     a workload did not finish.
lost_effect        X1-X3  a business change committed in an application's database whose
                          effect the consuming application never applied (``outbox_inbox``:
                          ``changed`` against ``effect`` events, read from their databases).
duplicated_effect  X3     a message's effect applied more than once.
=================  =====  ==================================================================

Times are ``time.time()`` seconds. The failover listener of the async API runs on the event loop
in order with the application's own calls (``failover_completed`` at the very step the gate
opens), so the F8 and F9 checks compare times taken on one loop and cannot race.
"""

from __future__ import annotations

import json
import threading
import time
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["PROMISES", "AuditResult", "Event", "Ledger", "Violation", "audit"]

PROMISES: dict[str, str] = {
    "lost": "F11, A1-A4",
    "duplicate": "A1-A4, F11",
    "phantom": "F11",
    "rolled_back_seen": "F7",
    "in_doubt_partial": "F7",
    "ack_after_failover": "F8",
    "old_broker": "F9",
    "blocked": "F2, F4",
    "unexpected_error": "F3",
    "unanswered": "F6",
    "hung": "F2",
    "lost_effect": "X1-X3",
    "duplicated_effect": "X3",
}

EXPECTED_ERRORS = {
    "acknowledge": {"AcknowledgeFailedError"},
    "recover": {"AcknowledgeFailedError"},
    "commit": {"TransactionRolledBackError"},
    "reply": {"InvalidDestinationError"},  # a reply-to from before a failover is gone (F6)
}
FINAL_BY_RECEIPT = {"AUTO", "DUPS_OK", "NO_ACK"}


@dataclass
class Event:
    """One line of the ledger.

    ``kind`` is one of: changed (a business change committed with its outbox message), effect
    (one application of a message's effect, read from the consumer's database), outbox, sent,
    accepted, received, acknowledged, ack_failed, committed,
    rolled_back, error, call, failover_started, failover_completed, fault, reply, unanswered,
    hung, stopped (an actor whose connection or consumer closed for good: it stopped for the
    rest of the round), left (taken off the stream's queue by the drain at the end of the
    run). ``actor`` is producer, consumer, requester, server or drain; ``mode`` the session's
    acknowledge mode
    (AUTO, CLIENT, DUPS_OK, NO_ACK, INDIVIDUAL, TRANSACTED). ``t`` is when it ended;
    ``duration`` how long its call took; ``deadline`` the longest it was allowed.
    """

    kind: str
    stream: str = ""
    actor: str = ""
    mode: str = ""
    ids: tuple[str, ...] = ()
    t: float = 0.0
    duration: float = 0.0
    deadline: float | None = None
    call: str = ""
    error: str = ""
    message: str = ""
    in_doubt: bool = False
    trace: str = ""
    """The trace id (32 hex digits) of a sent or received message of a traced run (rule O2:
    its ``traceparent``); empty when the run did not trace."""

    @property
    def start(self) -> float:
        """When its call began."""
        return self.t - self.duration


class Ledger:
    """A thread-safe, append-only list of events."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.events: list[Event] = []

    def add(self, kind: str, **fields: Any) -> Event:
        """Record an event; ``t`` defaults to now, ``ids`` may be any iterable."""
        fields.setdefault("t", time.time())
        fields["ids"] = tuple(fields.get("ids", ()))
        event = Event(kind, **fields)
        with self._lock:
            self.events.append(event)
        return event

    def snapshot(self) -> list[Event]:
        """A copy of the events so far."""
        with self._lock:
            return list(self.events)

    def save(self, path: Path) -> None:
        """Write the events as JSON lines."""
        with path.open("w") as out:
            for event in self.snapshot():
                out.write(json.dumps(asdict(event)) + "\n")

    @staticmethod
    def load(path: Path) -> list[Event]:
        """Read events written by ``save``."""
        events = []
        for line in path.read_text().splitlines():
            fields = json.loads(line)
            fields["ids"] = tuple(fields["ids"])
            events.append(Event(**fields))
        return events


@dataclass
class Violation:
    """One broken promise."""

    stream: str
    promise: str
    detail: str

    @property
    def rule(self) -> str:
        """The rules of docs/semantics.md it breaks."""
        return PROMISES[self.promise]


@dataclass
class StreamSummary:
    """What happened on one stream (``accepted``: sends accepted, or committed by the
    producer)."""

    stream: str
    mode: str
    sent: int = 0
    accepted: int = 0
    consumed: int = 0
    duplicates: int = 0
    lost_allowed: int = 0
    rolled_back: int = 0
    in_doubt: int = 0
    left: int = 0
    """Messages the drain found on the queue at the end of the run."""


@dataclass
class AuditResult:
    """The verdicts: ``ok`` when no promise broke."""

    violations: list[Violation] = field(default_factory=list)
    streams: list[StreamSummary] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when every promise held."""
        return not self.violations

    def lost(self) -> int:
        """Accepted or committed messages never consumed (a broken promise each)."""
        return sum(1 for v in self.violations if v.promise == "lost")

    def by_promise(self) -> dict[str, int]:
        """How many times each promise broke (every promise listed)."""
        counts = dict.fromkeys(PROMISES, 0)
        for violation in self.violations:
            counts[violation.promise] += 1
        return counts


def audit(events: Iterable[Event]) -> AuditResult:
    """Judge a ledger (see the module docstring for the promises)."""
    by_stream: dict[str, list[Event]] = defaultdict(list)
    result = AuditResult()
    for event in events:
        by_stream[event.stream].append(event)
    for stream, stream_events in sorted(by_stream.items()):
        if stream:
            _Stream(stream, sorted(stream_events, key=lambda e: e.t), result).check()
    return result


class _Stream:
    """The checks of one stream."""

    def __init__(self, name: str, events: list[Event], result: AuditResult) -> None:
        self.name = name
        self.events = events
        self.result = result
        consumers = [e.mode for e in events if e.actor in ("consumer", "server") and e.mode]
        self.mode = consumers[0] if consumers else ""
        self.summary = StreamSummary(name, self.mode)
        result.streams.append(self.summary)

    def _of(self, kind: str, actor: str | None = None) -> list[Event]:
        return [e for e in self.events if e.kind == kind and (actor is None or e.actor == actor)]

    def fail(self, promise: str, detail: str) -> None:
        self.result.violations.append(Violation(self.name, promise, detail))

    def check(self) -> None:
        self._check_calls()
        producer_side = ("producer", "requester")
        sent = {i for e in self._of("sent") if e.actor in producer_side for i in e.ids}
        self.summary.sent = len(sent)
        expected = {i for e in self._of("accepted") for i in e.ids}
        for event in self._of("committed"):
            if event.actor in producer_side:
                expected.update(event.ids)
        self.summary.accepted = len(expected)  # accepted, or committed by the producer
        received = self._receptions()
        left = self._left()
        self.summary.left = sum(left.values())
        self._check_phantoms(received.keys() | left.keys(), sent)
        self._check_transactions(received)
        consumptions = self._consumptions()
        self.summary.consumed = len(consumptions)
        missing = sorted(expected - set(consumptions))
        if self.mode == "NO_ACK":  # what was left on the queue is not lost
            self.summary.lost_allowed = len([i for i in missing if i not in left])
        else:
            for message_id in missing:
                where = ", left on the queue" if message_id in left else ""
                self.fail("lost", f"{message_id} accepted, never consumed ({self.mode}{where})")
        self._check_duplicates(consumptions, left)
        self._check_failover_windows(received)
        self._check_replies()
        self._check_effects()

    def _check_effects(self) -> None:
        """X1-X3: every committed change applied exactly once (``changed`` and ``effect``
        events, which only the ``outbox_inbox`` workload writes)."""
        changed = {i for e in self._of("changed") for i in e.ids}
        if not changed:
            return
        applied: dict[str, int] = defaultdict(int)
        for event in self._of("effect"):
            for message_id in event.ids:
                applied[message_id] += 1
        self.summary.accepted = len(changed)
        self.summary.consumed = len(applied)
        self.summary.duplicates = sum(1 for n in applied.values() if n > 1)
        for message_id in sorted(changed - applied.keys()):
            self.fail("lost_effect", f"{message_id} committed, its effect never applied")
        for message_id, times in sorted(applied.items()):
            if times > 1:
                self.fail("duplicated_effect", f"{message_id} applied {times} times")
        for message_id in sorted(applied.keys() - changed):
            self.fail("phantom", f"{message_id} applied, no committed change wrote it")

    def _receptions(self) -> dict[str, list[float]]:
        times: dict[str, list[float]] = defaultdict(list)
        for event in self._of("received"):
            if event.actor in ("consumer", "server"):
                for message_id in event.ids:
                    times[message_id].append(event.t)
        return times

    def _left(self) -> dict[str, int]:
        """How many copies of each id the drain took off the queue at the end."""
        copies: dict[str, int] = defaultdict(int)
        for event in self._of("left"):
            for message_id in event.ids:
                copies[message_id] += 1
        return copies

    def _consumptions(self) -> dict[str, list[Event]]:
        """Each consumed id and the events that consumed it, by the stream's mode."""
        if self.mode in FINAL_BY_RECEIPT:
            events = [e for e in self._of("received") if e.actor in ("consumer", "server")]
        elif self.mode == "TRANSACTED":
            events = [
                e
                for e in self._of("committed", "consumer") + self._of("rolled_back", "consumer")
                if e.kind == "committed" or e.in_doubt
            ]
        else:
            events = self._of("acknowledged") + [e for e in self._of("ack_failed") if e.in_doubt]
        found: dict[str, list[Event]] = defaultdict(list)
        for event in events:
            for message_id in event.ids:
                found[message_id].append(event)
        return found

    def _check_calls(self) -> None:
        for event in self.events:
            if event.deadline is not None and event.duration > event.deadline:
                self.fail(
                    "blocked",
                    f"{event.actor} {event.call or event.kind} took {event.duration:.2f} s "
                    f"(deadline {event.deadline:.2f} s)",
                )
            if event.kind == "error" and event.error not in EXPECTED_ERRORS.get(event.call, ()):
                self.fail(
                    "unexpected_error",
                    f"{event.actor} {event.call}: {event.error}: {event.message}",
                )
            if event.kind == "hung":
                self.fail("hung", f"{event.actor} did not finish: {event.message}")

    def _check_phantoms(self, received: Iterable[str], sent: set[str]) -> None:
        for message_id in sorted(set(received) - sent):
            self.fail("phantom", f"{message_id} received, never sent")

    def _check_transactions(self, received: dict[str, list[float]]) -> None:
        for event in self._of("rolled_back", "producer"):
            seen = [i for i in event.ids if i in received]
            if event.in_doubt:
                self.summary.in_doubt += 1
                if seen and len(seen) != len(event.ids):
                    detail = f"{len(seen)} of {len(event.ids)} messages of an in-doubt commit"
                    self.fail("in_doubt_partial", detail)
            else:
                self.summary.rolled_back += 1
                for message_id in seen:
                    self.fail("rolled_back_seen", f"{message_id} of a rolled-back transaction")

    def _resent(self, message_id: str) -> bool:
        """True when the send of ``message_id`` spanned a loss of the producer's connection."""
        for event in self._of("accepted"):
            if message_id in event.ids:
                starts = [e.t for e in self._of("failover_started", event.actor)]
                if any(event.start <= s <= event.t for s in starts):
                    return True
        return False

    def _check_duplicates(self, consumptions: dict[str, list[Event]], left: dict[str, int]) -> None:
        """A message consumed twice, or consumed with a copy left on the queue at the end."""
        for message_id, events in consumptions.items():
            copies = len(events) + left.get(message_id, 0)
            if copies < 2:
                continue
            self.summary.duplicates += 1
            in_doubt = any(e.in_doubt for e in events)
            if self.mode == "DUPS_OK" or in_doubt or self._resent(message_id):
                continue
            where = f", {left[message_id]} left on the queue" if message_id in left else ""
            self.fail("duplicate", f"{message_id} consumed {copies} times ({self.mode}{where})")

    def _windows(self, actor: str) -> list[tuple[float, float]]:
        windows = []
        start: float | None = None
        for event in self.events:
            if event.actor != actor:
                continue
            if event.kind == "failover_started" and start is None:
                start = event.t
            elif event.kind == "failover_completed" and start is not None:
                windows.append((start, event.t))
                start = None
        if start is not None:
            windows.append((start, float("inf")))
        return windows

    def _check_failover_windows(self, received: dict[str, list[float]]) -> None:
        windows = self._windows("consumer") + self._windows("server")
        for message_id, times in received.items():
            for t in times:
                if any(a <= t < b for a, b in windows):
                    self.fail("old_broker", f"{message_id} handed out during a failover")
        if self.mode not in ("CLIENT", "INDIVIDUAL"):
            return
        starts = [a for a, _ in self._windows("consumer")]
        for ack in self._of("acknowledged", "consumer"):
            for message_id in ack.ids:
                before = [t for t in received.get(message_id, []) if t <= ack.start]
                if before and any(max(before) < s <= ack.start for s in starts):
                    self.fail("ack_after_failover", f"{message_id} acknowledged across a failover")

    def _check_replies(self) -> None:
        asked = {i for e in self._of("sent", "requester") for i in e.ids}
        for event in self._of("reply", "requester"):
            for message_id in event.ids:
                if message_id not in asked:
                    self.fail("phantom", f"a reply to {message_id}, which nobody asked")
        for event in self._of("unanswered", "requester"):
            self.fail("unanswered", f"{event.message} after {len(event.ids)} requests")
