"""Where a failover's time goes: the client's debug log as a timeline, cut into phases.

How this works: ``Timeline`` is a logging handler on the ``haclient.failover`` and
``haclient.amqp`` loggers (at DEBUG while it is installed) that notes ``time.monotonic()`` and
the message of each record it knows: an attempt begins (``connecting to B (attempt n)``), an
attempt failed, the TCP connection is made, the broker's SASL mechanisms arrive (its answer to
the protocol header), the login succeeded, the broker's Open arrived. ``phases`` reads the
entries of one failover onto the standby and, with the times the bench took itself (the
standby's port opening, ``failover_completed``, the first send done), cuts the overhead into:

- ``schedule``: the reconnect schedule's waits from the port opening to the start of the
  attempt that succeeded: until the first attempt after the port opened, and from each attempt
  that failed since (``early``, below) to the next;
- ``dropped``: the time those failed attempts took (the broker accepted them and closed them
  before answering: a broker not ready yet);
- ``tcp``: -> its TCP connection made;
- ``header``: -> the broker's answer to the protocol header (its SASL mechanisms): the wait for
  a broker that is not ready yet;
- ``sasl``: -> the login done;
- ``open``: -> the broker's Open;
- ``restore``: -> ``failover_completed`` (the session and producer restored);
- ``resend``: -> the first send completed on the new connection (the message in flight at the
  kill, sent again, or the next one).

``early`` counts the attempts on the standby begun after its port opened that failed (a
connection dropped before the broker was ready). The phases add up to the overhead.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

__all__ = ["PHASES", "Entry", "Timeline", "phases"]

PHASES = ("schedule", "dropped", "tcp", "header", "sasl", "open", "restore", "resend")
_LOGGERS = ("haclient.failover", "haclient.amqp")

# The debug messages the timeline knows (their format strings), by what they mark.
_MARKS = {
    "connecting to %s (attempt %d)": "attempt",
    "attempt %d to connect to %s failed (%d failed so far): %s": "failed",
    "TCP connection to %s:%d made": "tcp",
    "SASL: the broker offers %s; logging in with %s": "header",
    "SASL: logged in with %s": "sasl",
    "the Open of %s:%d arrived": "open",
}


@dataclass(frozen=True, slots=True)
class Entry:
    """One noted record: when, what it marks, and its message."""

    at: float
    mark: str
    text: str


class Timeline(logging.Handler):
    """Notes the client's connect and failover records (see the module docstring)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.entries: list[Entry] = []

    def emit(self, record: logging.LogRecord) -> None:
        mark = _MARKS.get(str(record.msg))
        if mark is not None:
            self.entries.append(Entry(time.monotonic(), mark, record.getMessage()))
        root = logging.getLogger()
        if record.levelno >= root.getEffectiveLevel():
            root.handle(record)  # what the bench shows anyway (warnings with --verbose)

    def between(self, start: float, end: float) -> list[Entry]:
        """The entries noted from ``start`` to ``end``."""
        return [e for e in self.entries if start <= e.at <= end]

    @classmethod
    @contextmanager
    def installed(cls) -> Iterator[Timeline]:
        """A timeline on the client's loggers (at DEBUG) for the block; the records reach the
        root logger's handlers as before when they pass its level."""
        timeline = cls()
        saved = []
        for name in _LOGGERS:
            logger = logging.getLogger(name)
            saved.append((logger, logger.level, logger.propagate))
            logger.setLevel(logging.DEBUG)
            logger.propagate = False
            logger.addHandler(timeline)
        try:
            yield timeline
        finally:
            for logger, level, propagate in saved:
                logger.removeHandler(timeline)
                logger.setLevel(level)
                logger.propagate = propagate


def phases(
    entries: list[Entry], port: int, opened: float, completed: float | None, first: float
) -> tuple[dict[str, float | None], int]:
    """The phases (seconds; None where a mark is missing) of the failover onto the broker on
    ``port`` whose port opened at ``opened``, and the attempts on it that failed after that."""
    target = f":{port}"
    starts = [e for e in entries if e.mark == "attempt" and f"{target} (attempt" in e.text]
    early = max(0, sum(1 for e in starts if e.at >= opened) - 1)
    last = starts[-1].at if starts else None

    def after(mark: str) -> float | None:
        if last is None:
            return None
        found = [e.at for e in entries if e.mark == mark and e.at >= last and target in e.text]
        if mark in ("header", "sasl"):  # their messages do not name the broker
            found = [e.at for e in entries if e.mark == mark and e.at >= last]
        return found[0] if found else None

    marks = [opened, last, after("tcp"), after("header"), after("sasl"), after("open")]
    marks += [completed, first]
    out: dict[str, float | None] = {}
    spans = ("until", "tcp", "header", "sasl", "open", "restore", "resend")
    for name, begin, end in zip(spans, marks[:-1], marks[1:], strict=True):
        out[name] = None if begin is None or end is None else end - begin
    out["dropped"] = dropped = _dropped(entries, starts, opened, target)
    until = out.pop("until")  # port open -> the attempt that succeeded
    out["schedule"] = None if until is None else until - dropped
    return {name: out[name] for name in PHASES}, early


def _dropped(entries: list[Entry], starts: list[Entry], opened: float, target: str) -> float:
    """How long the attempts on ``target`` begun after ``opened`` that failed took."""
    failed = [e.at for e in entries if e.mark == "failed" and target in e.text]
    took = 0.0
    for begun in (e.at for e in starts[:-1] if e.at >= opened):
        end = next((at for at in failed if at >= begun), None)
        if end is not None:
            took += end - begun
    return took
