"""The shared-store HA lock: which of two brokers given the same store is the master.

ActiveMQ's shared file system master/slave, in small: every broker of the pair is given the same
store; the one that holds the store's lock opens it and listens, the others wait for the lock and
the first to get it takes over. The lock is an exclusive ``flock(2)`` on a sidecar file
``<store>.lock`` (created if missing, never deleted), so the kernel releases it the moment the
holding process dies, however it dies (``SIGKILL`` included).

Interface
---------
``StoreLock(store_path)``
    A lock on ``<store_path>.lock``; nothing is acquired yet.
``try_acquire() -> bool``
    Take the lock if it is free, without blocking; ``True`` if this object holds it now.
``await wait_acquire(poll_interval=0.5)``
    Poll until the lock is taken: a waiting broker takes over within about ``poll_interval`` of
    the holder's death or :meth:`StoreLock.release`. Cancellable (anyio).
``release()``
    Give it up (idempotent). ``held`` says whether this object holds it.

Why ``flock`` and not ``fcntl``/``lockf``: POSIX record locks belong to the *process* (a second
lock request from the same process always succeeds, and closing *any* descriptor of the file drops
all of them), so they cannot tell apart a master and a slave running in one test process. ``flock``
locks belong to the open file description: two ``open()``\\s of the same file in one process
exclude each other (``tests/broker_store`` checks this on the running kernel). An in-process
registry keyed by the lock file's device and inode backs this up on file systems where ``flock``
is emulated with POSIX locks (NFS), but across machines on NFS the guarantee is only as good as
the NFS server's locking.

A broker that is *killed* in-process (``Broker.kill()`` in tests) must do what the kernel does
for a dead process: close its :class:`~chaos.broker.store.Store` (which commits nothing that was
not already committed) and *then* :meth:`release` the lock; the next holder opens the store afresh.
Descriptors are opened close-on-exec, so a child process the broker starts does not inherit the
lock.
"""

from __future__ import annotations

import fcntl
import os
import threading
from pathlib import Path

import anyio

__all__ = ["StoreLock"]

# (st_dev, st_ino) of every lock file some StoreLock in this process holds.
_held_in_process: set[tuple[int, int]] = set()
_registry_guard = threading.Lock()


class StoreLock:
    """The exclusive lock that makes a broker the master of a shared store."""

    def __init__(self, store_path: str | Path) -> None:
        """Prepare a lock on ``<store_path>.lock``; call :meth:`try_acquire` to take it."""
        self.path = Path(f"{os.fspath(store_path)}.lock")
        self._fd: int | None = None
        self._key: tuple[int, int] | None = None

    @property
    def held(self) -> bool:
        """Whether this object holds the lock."""
        return self._fd is not None

    def try_acquire(self) -> bool:
        """Take the lock if nobody holds it; never blocks. ``True`` if this object holds it."""
        if self._fd is not None:
            return True
        with _registry_guard:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            try:
                info = os.fstat(fd)
                key = (info.st_dev, info.st_ino)
                if key in _held_in_process:
                    os.close(fd)
                    return False
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    os.close(fd)
                    return False
                # A lock file unlinked (and maybe recreated) between open() and flock() would
                # give a lock nobody else contends for: only the file at the path counts.
                try:
                    current = os.stat(self.path)
                except FileNotFoundError:
                    current = None
                if current is None or (current.st_dev, current.st_ino) != key:
                    os.close(fd)
                    return False
            except BaseException:
                os.close(fd)
                raise
            _held_in_process.add(key)
            self._fd, self._key = fd, key
        self._write_owner(fd)
        return True

    async def wait_acquire(self, poll_interval: float = 0.5) -> None:
        """Wait until this object holds the lock, trying every ``poll_interval`` seconds."""
        if poll_interval <= 0:
            raise ValueError("poll_interval must be positive")
        while not self.try_acquire():
            await anyio.sleep(poll_interval)

    def release(self) -> None:
        """Give up the lock (no-op if not held). Waiting brokers see it within their interval."""
        with _registry_guard:
            fd, key = self._fd, self._key
            if fd is None:
                return
            self._fd = self._key = None
            if key is not None:
                _held_in_process.discard(key)
            os.close(fd)  # closing the only descriptor of the description drops the flock

    def __enter__(self) -> StoreLock:
        if not self.try_acquire():
            raise BlockingIOError(f"{self.path} is held by another broker")
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.release()

    def __repr__(self) -> str:
        return f"StoreLock({os.fspath(self.path)!r}, held={self.held})"

    @staticmethod
    def _write_owner(fd: int) -> None:
        """Leave the holder's pid in the lock file, for people reading it; the lock ignores it."""
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        except OSError:
            pass
