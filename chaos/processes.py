"""Stopping a process group, and finding processes that left it, through ``/proc`` (Linux).

A process that calls setsid leaves its group, so signalling the group misses it; such
processes are found instead by markers in their environment (``KEY=value`` entries that the
starter put there and children inherit). Zombies are dead already and never reported.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Final

__all__ = ["find_processes", "signal_all", "stop_group", "wait_gone"]

_HELPERS_TIMEOUT: Final = 5.0


def stop_group(proc: subprocess.Popen[bytes], timeout: float = 30.0) -> None:
    """SIGTERM the process group led by ``proc``, wait up to ``timeout`` seconds, then SIGKILL
    it; reap ``proc``. ``proc`` must have been started with ``start_new_session=True``."""
    pgid = proc.pid  # start_new_session=True made it the leader of its own group
    _killpg(pgid, signal.SIGTERM)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        _killpg(pgid, signal.SIGKILL)
        proc.wait()
    # The leader is gone, but other members of its group may still be exiting.
    deadline = time.monotonic() + _HELPERS_TIMEOUT
    while find_processes(frozenset(), pgid) and time.monotonic() < deadline:
        time.sleep(0.05)
    _killpg(pgid, signal.SIGKILL)


def _killpg(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, sig)


def signal_all(pids: Iterable[int], sig: signal.Signals) -> None:
    """Send ``sig`` to each of ``pids`` that still exists."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


def wait_gone(markers: frozenset[bytes], timeout: float) -> bool:
    """Wait until no live process carries one of ``markers``; return whether that happened
    within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while find_processes(markers):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    return True


def find_processes(markers: frozenset[bytes], pgid: int | None = None) -> set[int]:
    """Live processes in group ``pgid`` or whose environment holds one of ``markers``.

    Zombies are dead already (only not yet reaped by their parent) and are not reported.
    """
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and _belongs(entry, markers, pgid):
            found.add(int(entry.name))
    return found


def _belongs(proc_dir: Path, markers: frozenset[bytes], pgid: int | None) -> bool:
    try:
        stat = (proc_dir / "stat").read_bytes()
        # Format: "pid (comm) state ppid pgrp ..."; comm may contain spaces and parentheses.
        state, _ppid, group = stat[stat.rindex(b")") + 2 :].split(b" ", 3)[:3]
        if state == b"Z":
            return False
        if pgid is not None and int(group) == pgid:
            return True
        return bool(markers) and not markers.isdisjoint(
            (proc_dir / "environ").read_bytes().split(b"\0")
        )
    except (OSError, ValueError):
        return False  # it exited meanwhile, or it is not ours to read
