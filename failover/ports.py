"""The watch of a refused port: how a failover learns, within milliseconds and for little CPU,
that a broker whose port refused connections listens again.

How this works: a failover's fast phase (``failover.policy``, F5) tries the list every 25-50 ms
while no broker listens (a standby not yet taken over, a broker restarting): the attempt that
finds the new master's port open comes 0-50 ms after it opened. A full attempt costs the client
~0.2-0.4 ms of CPU (the connector, its error, the log, the plan), so trying every millisecond
or two instead would cost 10-20 % of a CPU while nothing listens. A TCP connect on which
nothing listens is refused by the host at once: that alone, a non-blocking ``connect`` on a
socket closed right after (``TcpProbe``), costs ~15 us. So while the plan waits before the next
attempt on a broker whose last attempt was refused at the TCP level (``tcp_refused``: a
``ConnectionRefusedError`` in the failure's causes), ``watch`` probes that broker's port every
``PortWatch.interval`` and ends the wait as soon as the port accepts (the probe's connection is
closed at once, before a byte; the attempt follows); otherwise the wait ends when it would have.
The plan decides which waits are watched (``failover.schedule``); nothing else changes.

A probe answers at once on the local host (the refusal is known when ``connect`` returns); to a
remote host its connection completes later, and is looked at again at the next probe. A host
name is resolved once per ``TcpProbe`` (one per failover) with the resolver it is given (the
supervisor gives anyio's); without one, only IP addresses are probed.

Nothing here knows of AMQP: a probe is a TCP connection opened and closed.
"""

from __future__ import annotations

import errno
import ipaddress
import select
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from failover.url import BrokerURL

__all__ = ["PortProbe", "PortWatch", "TcpProbe", "tcp_refused", "watch"]

#: Polls one broker's port once: True once it accepted a TCP connection.
PortProbe = Callable[[BrokerURL], Awaitable[bool]]
#: Resolves a host name as ``getaddrinfo`` does (``anyio.getaddrinfo``'s signature, for TCP).
Resolver = Callable[[str, int], Awaitable[list[tuple[Any, Any, Any, Any, Any]]]]


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
    """Wait ``wait`` seconds of ``clock``, probing ``broker``'s port every ``interval``; return
    early, True, once it accepts (False: the wait ran out)."""
    deadline = clock() + wait
    while True:
        left = deadline - clock()
        if left <= 0:
            return False
        await sleep(min(interval, left))
        if await probe(broker):
            return True


class TcpProbe:
    """Probes brokers' ports with non-blocking TCP connects, each closed once it is known
    whether it was accepted (see the module docstring). One per failover: a host name is
    resolved once, with ``resolve`` (None: a name is not probed; the wait runs its course).
    ``close()`` drops a connect still under way."""

    def __init__(self, resolve: Resolver | None = None) -> None:
        self._resolve = resolve
        self._addresses: dict[tuple[str, int], tuple[int, tuple[str, int]] | None] = {}
        self._pending: dict[tuple[str, int], socket.socket] = {}

    async def __call__(self, broker: BrokerURL) -> bool:
        key = (broker.host, broker.port or 0)
        if key not in self._addresses:
            self._addresses[key] = await _resolve(*key, self._resolve)
        address = self._addresses[key]
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
        except OSError:
            sock.close()
            return False
        if code is None:  # a remote host: known at the next probe
            self._pending[key] = sock
            return False
        sock.close()
        return code == 0

    def close(self) -> None:
        """Drop the connects still under way."""
        for sock in self._pending.values():
            sock.close()
        self._pending.clear()


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


async def _resolve(
    host: str, port: int, resolve: Resolver | None
) -> tuple[int, tuple[str, int]] | None:
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
