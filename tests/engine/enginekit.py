"""Two engines joined in memory: the fastest tier of protocol tests (no sockets, fake time).

Imported by name (``from enginekit import ...``); ``conftest`` is ambiguous across test folders.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from chaos.amqp_server import server_engine
from haclient.amqp import ClientAuth, Engine, EngineConfig, EngineEvent, Role


@dataclass
class Pair:
    """A client and a server engine and the events each has reported so far."""

    client: Engine
    server: Engine
    client_events: list[EngineEvent] = field(default_factory=list)
    server_events: list[EngineEvent] = field(default_factory=list)
    on_server_event: Callable[[EngineEvent], None] | None = None
    on_client_event: Callable[[EngineEvent], None] | None = None

    def pump(self, *, max_rounds: int = 1000) -> None:
        """Move bytes both ways and collect events until both engines are quiet."""
        for _ in range(max_rounds):
            moved = False
            for src, dst in ((self.client, self.server), (self.server, self.client)):
                data = src.data_to_send()
                if data:
                    dst.receive_data(data)
                    moved = True
            for engine, sink, hook in (
                (self.client, self.client_events, self.on_client_event),
                (self.server, self.server_events, self.on_server_event),
            ):
                for event in engine.events():
                    sink.append(event)
                    if hook is not None:
                        hook(event)
                        moved = True
            if not moved:
                return
        raise AssertionError("engines did not go quiet: a ping-pong loop?")

    def of_type(self, side: str, kind: type) -> list:
        events = self.client_events if side == "client" else self.server_events
        return [e for e in events if isinstance(e, kind)]


def make_pair(
    client_config: EngineConfig | None = None, server_config: EngineConfig | None = None
) -> Pair:
    client = Engine(client_config or EngineConfig(container_id="client", auth=ClientAuth()))
    server = server_engine(server_config or EngineConfig(container_id="server", role=Role.SERVER))
    return Pair(client, server)


class AcceptAll:
    """A minimal server-role handler: accepts the connection, sessions and links.

    Receiving links get ``credit``; messages are recorded and, when ``outcome`` is set, settled
    with it.
    """

    def __init__(self, pair: Pair, *, credit: int = 100, outcome: object = None) -> None:
        from haclient.amqp import Accepted

        self.pair = pair
        self.credit = credit
        self.outcome = Accepted() if outcome is None else outcome
        self.settle = True
        self.received: list[tuple[object, bytes]] = []
        pair.on_server_event = self

    def __call__(self, event: EngineEvent) -> None:
        from haclient.amqp import (
            ConnectionRemoteOpen,
            LinkRemoteOpen,
            MessageReceived,
            Receiver,
            SessionRemoteOpen,
        )

        server = self.pair.server
        if isinstance(event, ConnectionRemoteOpen):
            server.open()
        elif isinstance(event, SessionRemoteOpen):
            event.session.open()
        elif isinstance(event, LinkRemoteOpen) and not event.link.locally_opened:
            event.link.open()
            if isinstance(event.link, Receiver) and self.credit:
                event.link.flow(self.credit)
        elif isinstance(event, MessageReceived):
            self.received.append((event.delivery, event.payload))
            if self.outcome is not False:
                event.delivery.update(self.outcome, settle=self.settle)  # type: ignore[arg-type]
