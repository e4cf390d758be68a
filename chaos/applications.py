"""Application processes a chaos run kills: each started again after its kill, by its pid.

How this works: a workload that runs applications in processes of their own (the
``outbox_inbox`` workload: a producer with an outbox, a consumer with an inbox) starts them as
``AppProcess`` objects and lists them in the bed's ``Applications`` while they may be killed;
the ``app_kill`` fault (``chaos.faults``) picks one of them, waits until it said it is at work,
SIGKILLs it after a random moment and starts it again. A run without such a workload has none
listed, and the fault kills nothing (it says so).
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

__all__ = ["AppProcess", "Applications"]


class AppProcess:
    """One application process (``python -m chaos.scenarios.apps ROLE ...``), its output in
    ``log``; started again after each kill, stopped by its pid."""

    def __init__(self, role: str, args: list[str], log: Path) -> None:
        self.role = role
        self.args = [sys.executable, "-m", "chaos.scenarios.apps", role, *args]
        self.log = log
        self.proc: subprocess.Popen[bytes] | None = None
        self.readies = 0
        self.kills = 0

    def start(self) -> None:
        """Start it (again)."""
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(self.args, stdout=out, stderr=out)

    def wait_ready(self, timeout: float = 30.0) -> None:
        """Wait until this start said ``ready`` (connected, at work), so that a kill lands
        in the work, not in the interpreter's start-up."""
        deadline = time.monotonic() + timeout
        said = self.log.read_bytes().count(b"ready\n") if self.log.exists() else 0
        while time.monotonic() < deadline and self.proc is not None and self.proc.poll() is None:
            if self.log.read_bytes().count(b"ready\n") > self.readies:
                self.readies += 1
                return
            time.sleep(0.02)
        self.readies = said

    def kill(self) -> int | None:
        """SIGKILL it if it runs; return its pid then (None: it did not run)."""
        if self.proc is not None and self.proc.poll() is None:
            pid = self.proc.pid
            os.kill(pid, signal.SIGKILL)
            self.proc.wait()
            return pid
        return None

    def finished(self) -> bool:
        """Whether it ended on its own with status 0."""
        return self.proc is not None and self.proc.poll() == 0

    def died(self) -> bool:
        """Whether it ended on its own with another status (say, failover gave up)."""
        return self.proc is not None and self.proc.poll() not in (None, 0)


class Applications:
    """The application processes a run may kill now; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._apps: list[AppProcess] = []

    def add(self, *apps: AppProcess) -> None:
        """List ``apps`` as killable."""
        with self._lock:
            self._apps.extend(apps)

    def remove(self, *apps: AppProcess) -> None:
        """Stop listing ``apps`` (a kill in progress still ends, and starts its app again)."""
        with self._lock:
            self._apps = [app for app in self._apps if app not in apps]

    def kill_one(self, rng: random.Random, *, within: float = 0.4) -> str:
        """SIGKILL one listed application, chosen with ``rng``, 0 to ``within`` seconds after
        it said it is at work, and start it again; say what was done."""
        with self._lock:
            apps = [app for app in self._apps if app.proc is not None]
        if not apps:
            return "no application running: nothing killed"
        app = rng.choice(apps)
        app.wait_ready()
        time.sleep(rng.uniform(0.0, within))
        pid = app.kill()
        app.start()
        if pid is None:
            return f"{app.role} had ended: started again"
        app.kills += 1
        return f"{app.role} (pid {pid}) killed with SIGKILL and started again"
