"""The watch of a refused port: how a failover learns, within milliseconds and for little CPU,
that a broker whose port refused connections listens again.

How this works: a failover's fast phase (``failover.policy``, F5) tries the list every 25-50 ms
while no broker listens (a standby not yet taken over, a broker restarting): the attempt that
finds the new master's port open comes 0-50 ms after it opened. A full attempt costs the client
~0.2-0.4 ms of CPU (the connector, its error, the log, the plan), so trying every millisecond
or two instead would cost 10-20 % of a CPU while nothing listens. A TCP connect on which
nothing listens is refused by the host at once: that alone costs ~15-30 us. So while the plan
waits before the next attempt on a broker whose last attempt was refused at the TCP level
(``tcp_refused``: a ``ConnectionRefusedError`` in the failure's causes), ``watch`` probes that
broker's port every ``PortWatch.interval`` and ends the wait as soon as the port accepts (the
probe's connection is closed at once, before a byte; the attempt follows); otherwise the wait
ends when it would have. The plan decides which waits are watched (``failover.schedule``);
nothing else changes.

Where the probes run: a ``TcpProbe`` given the loop's ``wait_readable`` (the supervisor's is)
hands the wait to ``PortWatcher``: one thread of the process that probes every watched port on
a grid of the interval, once per tick whatever the number of connections waiting on it. When a
port accepts, the thread rings the *bell* of each wait on it, once, with one byte (``b"1"``;
``failover.bell``: a socket pair the probe makes at its first wait and keeps for the next ones,
one at a time, until ``close``; on asyncio the loop reads it in a reader callback kept as
long; the thread rings a wait's bell only until ``PortWatcher.remove`` returned). The thread
keeps no wait's time: each wait ends by its own timer on the event loop when no ring came, and
then asks ``refused_lately``: ``Watched.REFUSED`` when a probe within the interval of its end
saw the port refuse (the walk lets the wait stand in for the attempt, ``failover.walk``),
``Watched.RAN_OUT`` otherwise (no probe that recent: the thread fell behind, the safe side).
So what the thread does per tick, and what a wait costs it (an ``add`` and a ``remove``, each
a few dictionary operations under its lock), does not grow with the number of waits: a
thousand connections failing over together cost it what one does. A wait may also name ports
to probe without a bell (the brokers its pass tries at once after it): those are probed at the
wait's last tick only, for ``refused_lately``. What crosses to the thread is a snapshot (the
address, the deadline, the bell); the event loop sleeps until the ring or its timer, one wake
per wait as for an unwatched wait, instead of one per probe. The thread keeps one socket per
watched port and connects it again after each refusal (a refused socket connects again on
Linux; where it does not, a new one is made for each probe); on the local host the connect is
a blocking one (one system call that returns the refusal, bounded by ``SO_SNDTIMEO``). It
stops after a second with nothing to watch; a forked child starts its own. Measured on 2-CPU
VMs (bench/README.md): a thread that only wakes every 5 ms costs 0.4-0.8 % of a CPU there,
and with one probe after each wake (the kernel's SYN and reset, on cold caches) 1.2-1.4 %:
that is most of what a watched port costs. The thread reads the host's monotonic clock, as
asyncio's timers do: a test on a virtual clock gives the manager a probe of its own (or none).

A probe answers at once on the local host (the refusal is known when ``connect`` returns); to a
remote host its connection completes later, and is looked at again at the next probe. A host
name is resolved once per ``TcpProbe`` (one per failover) with the resolver it is given (the
supervisor gives anyio's); without one, only IP addresses are probed, and a name's wait is
only slept.

Nothing here knows of AMQP: a probe is a TCP connection opened and closed.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import enum
import errno
import ipaddress
import itertools
import math
import os
import select
import socket
import struct
import threading
import time
import weakref
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any

from failover.bell import Bell, WaitReadable
from failover.url import BrokerURL

__all__ = [
    "PortProbe",
    "PortWatch",
    "PortWatcher",
    "TcpProbe",
    "Watched",
    "tcp_refused",
    "watch",
    "watch_port",
]

#: Polls one broker's port once: True once it accepted a TCP connection.
PortProbe = Callable[[BrokerURL], Awaitable[bool]]
#: Resolves a host name as ``getaddrinfo`` does (``anyio.getaddrinfo``'s signature, for TCP).
Resolver = Callable[[str, int], Awaitable[list[tuple[Any, Any, Any, Any, Any]]]]
#: A TCP address to probe: the socket family and ``(host, port)``.
Address = tuple[int, tuple[str, int]]

_ACCEPTED = b"1"  # a bell's ring: the port accepted
_IDLE = 1.0  # seconds the thread waits with nothing to watch before it ends
_MIN_STEP = 0.001  # seconds: the shortest tick, whatever interval a wait asks
_PROBE_SLACK = 0.001  # seconds: a tick's own time, a late wake (a refusal older: not "fresh")
_SEND_TIMEOUT = struct.pack("ll", 0, 1000)  # 1 ms: how long a local connect may block


class Watched(enum.Enum):
    """How a watched wait ended."""

    ACCEPTED = "accepted"  # the port accepted a probe: the attempt goes now
    RAN_OUT = "ran out"  # the wait ran its course; whether the port refused at its end is unknown
    REFUSED = "refused"  # ran its course, the port refusing a probe within an interval of its end


@dataclass(frozen=True, slots=True)
class PortWatch:
    """How often a refused port is probed while the plan waits (seconds)."""

    interval: float = 0.005


def tcp_refused(failure: BaseException | None) -> bool:
    """Whether ``failure`` is, or was caused by, a refused TCP connection (nothing listened on
    the broker's port)."""
    seen: set[int] = set()
    while failure is not None and id(failure) not in seen:
        if isinstance(failure, ConnectionRefusedError):
            return True
        seen.add(id(failure))
        failure = failure.__cause__ or failure.__context__
    return False


async def watch(
    probe: PortProbe,
    broker: BrokerURL,
    wait: float,
    *,
    interval: float,
    clock: Callable[[], float],
    sleep: Callable[[float], Awaitable[None]],
) -> bool:
    """Wait ``wait`` seconds, probing ``broker``'s port every ``interval``; return early, True,
    once it accepts (False: the wait ran out). See ``watch_port``."""
    got = await watch_port(probe, broker, wait, interval=interval, clock=clock, sleep=sleep)
    return got is Watched.ACCEPTED


async def watch_port(
    probe: PortProbe,
    broker: BrokerURL,
    wait: float,
    *,
    interval: float,
    clock: Callable[[], float],
    sleep: Callable[[float], Awaitable[None]],
    also: Iterable[BrokerURL] = (),
) -> Watched:
    """Wait ``wait`` seconds, probing ``broker``'s port every ``interval``; return early,
    ``ACCEPTED``, once it accepts. A ``TcpProbe`` that can hand the wait to the port watcher's
    thread does (see the module docstring); its wait that runs out is ``REFUSED`` when the
    thread saw the port refuse a probe within ``interval`` of the wait's end, else ``RAN_OUT``;
    the thread probes the ports of ``also`` meanwhile (``TcpProbe.refused_lately``).
    Any other probe is called every ``interval`` of ``clock``, slept with ``sleep``; its wait
    that runs out is ``RAN_OUT`` (its False does not tell a refusal from no answer yet)."""
    if isinstance(probe, TcpProbe) and probe.watches:
        return await probe.watch(broker, wait, interval=interval, sleep=sleep, also=also)
    deadline = clock() + wait
    while True:
        left = deadline - clock()
        if left <= 0:
            return Watched.RAN_OUT
        await sleep(min(interval, left))
        if await probe(broker):
            return Watched.ACCEPTED


@dataclass(frozen=True, slots=True)
class _Wait:
    """One watched wait, as the thread sees it: a snapshot."""

    address: Address
    deadline: float  # time.monotonic(): a port only probed is probed at its last tick before
    interval: float
    bell: socket.socket | None  # the thread's end: rung once, _ACCEPTED, if the port accepts


class PortWatcher:
    """One thread that probes the ports of every watched wait of the process, each port once per
    interval (the shortest its waits ask), and rings the bell of each wait on a port that
    accepted, once. It keeps no wait's time: a wait ends by its own timer (``TcpProbe.watch``)
    and asks ``refused_lately`` then. ``add`` and ``remove`` are safe from any thread and cost
    the same whatever the number of waits; once ``remove`` returned, the thread no longer
    touches that wait's bell."""

    def __init__(self, slack: float = _PROBE_SLACK) -> None:
        """``slack``: how much older than a wait's interval a refusal may be and still count
        as the port's latest word (a late wake of the thread on a busy machine makes it older;
        then the wait ends as run out and the attempt is made for real, the safe side)."""
        self.slack = slack
        self._reset()
        os.register_at_fork(after_in_child=self._reset)

    def _reset(self) -> None:
        self._lock = threading.Lock()
        # address -> when the thread's latest probe of it saw it refuse (none: it accepted)
        self._refused_at: dict[Address, float] = {}
        self._waits: dict[int, _Wait] = {}
        # the same waits by port: those with a bell (probed at every tick), and the others
        # (probed at their last tick before their end), by key
        self._bells: dict[Address, dict[int, socket.socket]] = {}
        self._ends: dict[Address, dict[int, float]] = {}
        self._intervals: collections.Counter[float] = collections.Counter()
        self._keys = itertools.count()
        self._running = False

    def add(
        self, address: Address, wait: float, interval: float, bell: socket.socket | None
    ) -> int:
        """Watch ``address`` for ``wait`` seconds from now (until ``remove``); returns the key
        ``remove`` takes. Its first probe comes within ``interval`` (the thread's next tick).
        Without a ``bell`` the port is only probed, at the last tick before the wait's end, for
        ``refused_lately``."""
        entry = _Wait(address, time.monotonic() + wait, max(interval, _MIN_STEP), bell)
        with self._lock:
            key = next(self._keys)
            self._waits[key] = entry
            self._intervals[entry.interval] += 1
            if bell is not None:
                self._bells.setdefault(address, {})[key] = bell
            else:
                self._ends.setdefault(address, {})[key] = entry.deadline
            if not self._running:
                self._running = True
                threading.Thread(target=self._run, name="haclient-port-watch", daemon=True).start()
        return key

    def refused_lately(self, address: Address, within: float) -> bool:
        """Whether the thread's latest probe of ``address`` saw it refuse, ``within`` seconds
        (and a tick's slack) of now."""
        seen = self._refused_at.get(address, -math.inf)
        return time.monotonic() - seen <= max(within, _MIN_STEP) + self.slack

    @property
    def running(self) -> bool:
        """Whether its thread runs (it ends after a second with nothing to watch)."""
        return self._running

    def remove(self, key: int) -> None:
        """Stop watching for the wait of ``key`` (nothing when it was rung already)."""
        with self._lock:
            self._forget(key)

    def _forget(self, key: int) -> None:
        """Drop the wait of ``key`` from every map (under the lock)."""
        entry = self._waits.pop(key, None)
        if entry is None:
            return
        self._intervals[entry.interval] -= 1
        if not self._intervals[entry.interval]:
            del self._intervals[entry.interval]
        by_port = self._bells if entry.bell is not None else self._ends
        keyed = by_port.get(entry.address)
        if keyed is not None:
            keyed.pop(key, None)
            if not keyed:
                del by_port[entry.address]

    def _run(self) -> None:
        ports: dict[Address, _Port] = {}
        try:
            self._watch(ports)
        finally:
            for port in ports.values():
                port.close()

    def _watch(self, ports: dict[Address, _Port]) -> None:
        """Tick on a grid of the shortest interval asked, probing the watched ports, and sleep
        between ticks. Between the waits of a failover (an attempt takes about a millisecond)
        the grid goes on, so that the next wait joins it without waking the thread; after
        ``_IDLE`` with no wait the thread ends. A port only probed (no bell:
        ``refused_lately``) is probed at the last tick before its wait's end, not at every
        tick. Kept lean: it runs 200 times a second while a port is watched, and a tick costs
        the same whatever the number of waits on a port."""
        step = PortWatch().interval
        now = time.monotonic()
        idle_since = now
        while True:
            with self._lock:
                step = min(self._intervals, default=step)
                due = list(self._bells)
                for address, ends in self._ends.items():
                    if address not in self._bells and min(ends.values()) - now <= step + self.slack:
                        due.append(address)
                for address in [a for a in ports if a not in self._bells and a not in self._ends]:
                    ports.pop(address).close()
                if self._waits:
                    idle_since = now
                elif now - idle_since >= _IDLE:
                    self._running = False
                    return
            accepted = []
            for address in due:
                port = ports.get(address)
                if port is None:
                    port = ports[address] = _Port(address)
                if port.probe(now):
                    accepted.append(address)
                    self._refused_at.pop(address, None)
                elif port.refused_at == now:
                    self._refused_at[address] = now
            if accepted:
                self._ring(accepted)
            tick = now + step
            now = time.monotonic()
            if tick > now:
                time.sleep(tick - now)
                now = time.monotonic()

    def _ring(self, accepted: list[Address]) -> None:
        """Ring, once, the bell of each wait on a port that ``accepted``; those waits are
        done (their own ``remove`` finds nothing then)."""
        with self._lock:
            for address in accepted:
                for key, bell in list(self._bells.get(address, {}).items()):
                    self._forget(key)
                    with contextlib.suppress(OSError):  # full: rung before, the waiter knows
                        bell.send(_ACCEPTED)


class _Port:
    """The thread's probe of one address, one socket connected again after each refusal (see
    the module docstring)."""

    def __init__(self, address: Address) -> None:
        self._family, self._sockaddr = address
        # On the local host the refusal is known when connect returns: a blocking connect
        # answers in one system call (bounded by SO_SNDTIMEO, should a full backlog hold it).
        self._local = _loopback(self._sockaddr[0])
        self._sock: socket.socket | None = None
        self._reuse = True  # False once connecting a refused socket again failed otherwise
        self.refused_at = -math.inf  # when a probe last saw the port refuse (time.monotonic())

    def probe(self, now: float) -> bool:
        """True once the port accepted a connection (closed at once, before a byte); a
        refusal seen sets ``refused_at`` to ``now``."""
        sock = self._sock
        fresh = sock is None
        if sock is None:
            sock = self._sock = self._socket()
        try:
            code = sock.connect_ex(self._sockaddr)
            if code == errno.ECONNREFUSED:
                self.refused_at = now
                if not self._local:  # the last probe's answer; and the next probe
                    code = sock.connect_ex(self._sockaddr)
        except (OSError, ValueError):
            code = -1
        if code == errno.ECONNREFUSED and self._reuse:
            return False
        if code in (errno.EINPROGRESS, errno.EALREADY, errno.EAGAIN):
            if not self._local:  # a remote host's answer: at the next probe
                return False
            code = 0  # the host's own SYN not refused: a listener whose backlog is full
        self.close()
        if code not in (0, errno.EISCONN, errno.ECONNREFUSED) and not fresh:
            self._reuse = False  # this system does not connect a refused socket again
        return code in (0, errno.EISCONN)

    def _socket(self) -> socket.socket:
        sock = socket.socket(self._family, socket.SOCK_STREAM)
        if self._local:
            sock.settimeout(None)  # blocking, whatever socket.setdefaulttimeout() says
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, _SEND_TIMEOUT)
        else:
            sock.setblocking(False)
        return sock

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
        self._sock = None


_WATCHER = PortWatcher()


class TcpProbe:
    """Probes brokers' ports with non-blocking TCP connects, each closed once it is known
    whether it was accepted (see the module docstring). One per failover: a host name is
    resolved once, with ``resolve`` (None: a name is not probed; the wait runs its course).
    Given ``wait_readable``, ``watch`` hands its waits to ``watcher`` (default: the process's),
    one at a time, on one bell (made at the first, ``failover.bell``; given ``reader_loop``,
    the asyncio loop it runs on, the loop reads the bell's rings in a reader callback, kept
    from the first wait to ``close``). ``close()`` drops a connect still under way and the
    bell; a probe dropped without it closes its bell when collected."""

    def __init__(
        self,
        resolve: Resolver | None = None,
        wait_readable: WaitReadable | None = None,
        watcher: PortWatcher | None = None,
        *,
        reader_loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        self._resolve = resolve
        self._wait_readable = wait_readable
        self._watcher = watcher or _WATCHER
        self._addresses: dict[tuple[str, int], Address | None] = {}
        self._pending: dict[tuple[str, int], socket.socket] = {}
        self._reader_loop = reader_loop
        self._bell: Bell | None = None
        self._bell_closer: weakref.finalize[[], TcpProbe] | None = None

    @property
    def watches(self) -> bool:
        """Whether ``watch`` hands its waits to the port watcher's thread."""
        return self._wait_readable is not None

    async def watch(
        self,
        broker: BrokerURL,
        wait: float,
        *,
        interval: float,
        sleep: Callable[[float], Awaitable[None]],
        also: Iterable[BrokerURL] = (),
    ) -> Watched:
        """Wait ``wait`` seconds while the port watcher probes ``broker``'s port every
        ``interval``: ``ACCEPTED`` once it accepted; when the wait ran out, ``REFUSED`` if a
        probe saw the port refuse within ``interval`` of its end, else ``RAN_OUT`` (a port that
        cannot be probed: ``sleep(wait)``). The ports of ``also`` are probed meanwhile, for
        ``refused_lately``; they do not end the wait."""
        address = await self._address(broker)
        if address is None or self._wait_readable is None or wait <= interval:
            await sleep(wait)  # a wait no longer than a probe's interval is only slept
            return Watched.RAN_OUT
        bell = self._bell
        if bell is None:
            bell = self._bell = Bell(self._wait_readable, self._reader_loop)
            # closed by close(), or with the probe should a walk be dropped without it (the
            # finalizer holds the bell: never collected open, so no ResourceWarning)
            self._bell_closer = weakref.finalize(self, bell.close_soon)
        keys = [self._watcher.add(address, wait, interval, bell.theirs)]
        try:
            for other in also:
                probed = await self._address(other)
                if probed is not None and probed != address:
                    keys.append(self._watcher.add(probed, wait, interval, None))
            # the thread's ring if the port accepts (before remove returned), else the timeout
            rung = await bell.wait(timeout=wait)
        finally:
            for key in keys:
                self._watcher.remove(key)  # then the thread no longer touches the bell
        if _ACCEPTED in rung:
            return Watched.ACCEPTED
        refused = self._watcher.refused_lately(address, interval)
        return Watched.REFUSED if refused else Watched.RAN_OUT

    async def refused_lately(self, broker: BrokerURL, within: float) -> bool:
        """Whether the port watcher's latest probe of ``broker``'s port saw it refuse, within
        ``within`` seconds of now (False: it accepted, was not probed lately, or cannot be)."""
        if self._wait_readable is None:
            return False
        address = await self._address(broker)
        return address is not None and self._watcher.refused_lately(address, within)

    async def __call__(self, broker: BrokerURL) -> bool:
        key = (broker.host, broker.port or 0)
        address = await self._address(broker)
        if address is None:  # unresolvable: never says it accepts; the wait runs out
            return False
        pending = self._pending.pop(key, None)
        if pending is not None:
            result = _finished(pending)
            if result is None:
                self._pending[key] = pending
                return False
            pending.close()
            return result
        family, sockaddr = address
        sock = socket.socket(family, socket.SOCK_STREAM)
        code: int | None
        try:
            sock.setblocking(False)
            code = sock.connect_ex(sockaddr)
            if code in (errno.EINPROGRESS, errno.EAGAIN):
                code = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) or _in_progress(sock)
        except (OSError, ValueError):
            sock.close()
            return False
        if code is None:  # a remote host: known at the next probe
            self._pending[key] = sock
            return False
        sock.close()
        return code == 0

    async def _address(self, broker: BrokerURL) -> Address | None:
        key = (broker.host, broker.port or 0)
        if key not in self._addresses:
            self._addresses[key] = await _resolve(*key, self._resolve)
        return self._addresses[key]

    def close(self) -> None:
        """Drop the connects still under way, and the bell of the waits."""
        for sock in self._pending.values():
            sock.close()
        self._pending.clear()
        bell, closer, self._bell, self._bell_closer = self._bell, self._bell_closer, None, None
        if closer is not None:
            closer.detach()
        if bell is not None:
            bell.close()


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _in_progress(sock: socket.socket) -> int | None:
    """0 when ``sock``'s connect completed already, None while it is under way."""
    _, writable, _ = select.select([], [sock], [], 0)
    if not writable:
        return None
    return sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)


def _finished(sock: socket.socket) -> bool | None:
    """For a connect under way: True (accepted), False (failed) or None (not yet)."""
    try:
        code = _in_progress(sock)
    except (OSError, ValueError):
        return False
    return None if code is None else code == 0


async def _resolve(host: str, port: int, resolve: Resolver | None) -> Address | None:
    """The first TCP address of ``host:port`` (None: it does not resolve, or it is a name and
    there is no ``resolve``)."""
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        pass
    else:
        return (socket.AF_INET6 if ip.version == 6 else socket.AF_INET), (host, port)
    if resolve is None:
        return None
    try:
        found = await resolve(host, port)
    except OSError:
        return None
    for family, _, _, _, sockaddr in found:
        if family in (socket.AF_INET, socket.AF_INET6):
            return int(family), (str(sockaddr[0]), int(sockaddr[1]))
    return None
