"""A blocking facade over ``Broker``: the broker runs on its own event loop in its own thread.

How this works: ``start()`` opens an anyio blocking portal (a thread running an event loop) and
enters ``async with Broker`` through it; every other method is one ``portal.call``. ``close()``
(or leaving the ``with`` block) stops the broker and ends the thread. Methods must not be called
from the broker's own loop thread (the portal refuses).
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import AbstractContextManager
from typing import Any

from anyio.from_thread import BlockingPortal, start_blocking_portal

from chaos.broker.server import Broker
from chaos.broker.state import NodeInfo
from haclient.amqp.config import TlsServerOptions

__all__ = ["BrokerThread"]


class BrokerThread:
    """Runs a ``Broker`` in a background thread; takes the same arguments as ``Broker``."""

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        users: Mapping[str, str] | None = None,
        tls: TlsServerOptions | None = None,
        idle_timeout: float | None = None,
        **options: Any,
    ) -> None:
        self.broker = Broker(host, port, users=users, tls=tls, idle_timeout=idle_timeout, **options)
        self._portal_cm: AbstractContextManager[BlockingPortal] | None = None
        self._portal: BlockingPortal | None = None
        self._broker_cm: AbstractContextManager[Broker] | None = None

    def __enter__(self) -> BrokerThread:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def portal(self) -> BlockingPortal:
        """The portal into the broker's event loop.

        Raises:
            RuntimeError: not started.
        """
        if self._portal is None:
            raise RuntimeError("the broker thread is not running: call start()")
        return self._portal

    @property
    def port(self) -> int:
        """The port served."""
        return self.broker.port

    @property
    def url(self) -> str:
        """``amqp://host:port``."""
        return self.broker.url

    def start(self) -> None:
        """Start the thread and the broker (or the broker again after ``stop``/``kill``)."""
        if self._portal is not None:
            self.portal.call(self.broker.start)
            return
        self._portal_cm = start_blocking_portal()
        self._portal = self._portal_cm.__enter__()
        try:
            self._broker_cm = self._portal.wrap_async_context_manager(self.broker)
            self._broker_cm.__enter__()
        except BaseException:
            self._portal = None
            self._portal_cm.__exit__(None, None, None)
            self._portal_cm = None
            raise

    def close(self) -> None:
        """Stop the broker and end its thread. Idempotent."""
        broker_cm, self._broker_cm = self._broker_cm, None
        portal_cm, self._portal_cm = self._portal_cm, None
        self._portal = None
        try:
            if broker_cm is not None:
                broker_cm.__exit__(None, None, None)
        finally:
            if portal_cm is not None:
                portal_cm.__exit__(None, None, None)

    def stop(self) -> None:
        """Graceful stop (Close frames); ``start()`` serves again."""
        self.portal.call(self.broker.stop)

    def kill(self) -> None:
        """Abrupt stop: sockets reset, in-memory state lost."""
        self.portal.call(self.broker.kill)

    def drop_connections(self) -> int:
        """Reset every client connection; the broker keeps its state and listening socket."""
        return self.portal.call(self.broker.drop_connections)

    def restart(self, *, graceful: bool = False) -> None:
        """Kill (or stop) and start again on the same port."""
        self.portal.call(lambda: self.broker.restart(graceful=graceful))

    def redirect(self, url: str | None, *, open_too: bool = False) -> int:
        """``Broker.redirect``: answer new Opens (and, ``open_too``, close the open
        connections) with a redirect to ``url``; None: serve again."""
        return self.portal.call(lambda: self.broker.redirect(url, open_too=open_too))

    def pause(self) -> None:
        """Stop reading and writing on every connection."""
        self.portal.call(self.broker.pause)

    def resume(self) -> None:
        """Undo ``pause()``."""
        self.portal.call(self.broker.resume)

    def queue_depth(self, address: str) -> int:
        """Messages waiting in a node."""
        return self.portal.call(self.broker.queue_depth, address)

    def unacked_count(self, address: str) -> int:
        """Messages delivered and not settled."""
        return self.portal.call(self.broker.unacked_count, address)

    def consumer_count(self, address: str) -> int:
        """Consumers of a node."""
        return self.portal.call(self.broker.consumer_count, address)

    def node_info(self, address: str) -> NodeInfo:
        """A snapshot of one node."""
        return self.portal.call(self.broker.node_info, address)

    def nodes(self) -> list[NodeInfo]:
        """Snapshots of every node."""
        return self.portal.call(self.broker.nodes)

    def connections(self) -> list[str | None]:
        """Container ids of the open connections."""
        return self.portal.call(self.broker.connections)

    def open_transactions(self) -> list[bytes]:
        """Ids of the open transactions."""
        return self.portal.call(self.broker.open_transactions)

    def purge(self, address: str) -> int:
        """Drop a node's waiting messages."""
        return self.portal.call(self.broker.purge, address)

    def delete_node(self, address: str) -> bool:
        """Delete a node."""
        return self.portal.call(self.broker.delete_node, address)

    def add_token(self, token: str, user: str) -> None:
        """Accept an OAuth token as ``user``'s from the next login on."""
        self.portal.call(self.broker.add_token, token, user)

    def revoke_token(self, token: str) -> bool:
        """Refuse an OAuth token from the next login on."""
        return self.portal.call(self.broker.revoke_token, token)
