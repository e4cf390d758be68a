"""Pytest fixtures for your own failover tests: a broker, an HA pair, a bed, a proxy with faults.

Installed with the test bed (the ``haclient-chaos`` distribution, entry point ``pytest11``:
``haclient_chaos``), so the fixtures are there in any project that installs it;
``-p no:haclient_chaos`` turns them off. The plugin itself imports only pytest: a fixture imports
the bed (and what it needs: toxiproxy-python, requests ...) when a test uses it, so the plugin
never changes a test run that does not. Everything runs on loopback, on free ports, and is
stopped at the end of the test.

- ``chaos_broker``: a reference broker (``chaos.broker.BrokerThread``); ``.url`` to connect,
  ``.kill()``, ``.restart()``, ``.pause()``, ``.queue_depth(name)`` ...
- ``chaos_ha_pair``: a ``chaos.bed.Bed`` running a shared-store HA pair behind proxies:
  ``.url()`` is a ``failover:`` URL over both; ``.kill()`` kills the master (the standby takes
  over), and every network fault of the bed (``.blackhole(s)``, ``.latency(s, ms)`` ...).
- ``chaos_bed``: the same with two independent brokers.
- ``chaos_toxiproxy``: a ``ToxiproxyClient`` for ``$TOXIPROXY_URL`` or an embedded server.
- ``chaos_proxy``: a factory, ``chaos_proxy("127.0.0.1:5672")`` -> a ``Proxied`` with ``.url``
  and faults as context managers (``with proxied.toxic("latency", latency=300): ...``,
  ``with proxied.down(): ...``); deleted after the test.

Example::

    def test_my_app_survives_a_kill(chaos_ha_pair):
        with haclient.connect(chaos_ha_pair.url()) as conn:
            ...
            chaos_ha_pair.kill()
            ...
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, suppress
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:  # imported by the fixtures that use them, when a test asks for one
    from chaos.bed import Bed
    from chaos.broker import BrokerThread
    from chaos.toxiproxy.client import ToxiproxyClient

__all__ = ["Proxied"]


@dataclass
class Proxied:
    """A proxy in front of one upstream, made by the ``chaos_proxy`` fixture."""

    client: ToxiproxyClient
    name: str
    listen: str

    @property
    def url(self) -> str:
        """``amqp://`` through the proxy."""
        return f"amqp://{self.listen}"

    def toxic(self, type: str, **options: Any) -> AbstractContextManager[Any]:
        """A toxic for the ``with`` block (``ToxiproxyClient.add_toxic``'s arguments)."""
        return self.client.toxic(self.name, type, **options)

    def down(self) -> AbstractContextManager[None]:
        """The proxy disabled (connections dropped, new ones refused) for the ``with`` block."""
        return self.client.down(self.name)


@pytest.fixture
def chaos_broker() -> Iterator[BrokerThread]:
    """A reference AMQP 1.0 broker on a free loopback port, stopped after the test."""
    from chaos.broker import BrokerThread

    with BrokerThread() as broker:
        yield broker


@pytest.fixture
def chaos_ha_pair() -> Iterator[Bed]:
    """A shared-store HA pair of reference brokers behind proxies (a ``chaos.bed.Bed``)."""
    from chaos.bed import Bed

    with Bed(ha=True) as bed:
        yield bed


@pytest.fixture
def chaos_bed() -> Iterator[Bed]:
    """Two independent reference brokers behind proxies (a ``chaos.bed.Bed``)."""
    from chaos.bed import Bed

    with Bed(brokers=2, ha=False) as bed:
        yield bed


@pytest.fixture(scope="session")
def chaos_toxiproxy() -> Iterator[ToxiproxyClient]:
    """A Toxiproxy client: ``$TOXIPROXY_URL`` when set, else an embedded server."""
    from chaos.toxiproxy.client import open_toxiproxy

    with open_toxiproxy() as client:
        yield client


@pytest.fixture
def chaos_proxy(chaos_toxiproxy: ToxiproxyClient) -> Iterator[Callable[[str], Proxied]]:
    """A factory of proxies: ``chaos_proxy("host:port")``; each is deleted after the test."""
    from chaos.toxiproxy.client import ToxiproxyNotFound

    made: list[str] = []

    def make(upstream: str) -> Proxied:
        name = f"test-{uuid.uuid4().hex[:8]}"
        proxy = chaos_toxiproxy.create_proxy(name, upstream)
        made.append(name)
        return Proxied(chaos_toxiproxy, name, proxy.listen)

    yield make
    for name in made:
        with suppress(ToxiproxyNotFound):
            chaos_toxiproxy.delete_proxy(name)
