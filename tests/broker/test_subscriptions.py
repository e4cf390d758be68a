"""Topic subscriptions, one test per row of the shared-subscriptions seed's attach table.

Seed ``001_b5d064097db53382`` (QPIDJMS-220): the source's ``shared`` and ``global`` capabilities
and its durability decide the subscription's name, namespace, lifetime and exclusivity; a null
source looks a durable subscription up (a JMS unsubscribe). Rows are named
``row_<source>_<shared>_<global>_<durable>``.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from brokerkit import TIMEOUT, body_of, connect, message, receive, receiver, sender, sync, wake

from chaos.broker import Broker
from chaos.broker.store import SqlitePersistence
from chaos.broker.subscriptions import SubscriptionInfo
from haclient.amqp.connection import AmqpConnection
from haclient.amqp.endpoints import Receiver
from haclient.amqp.types import Accepted, Durability, ExpiryPolicy, Terminus
from haclient.errors import HAClientError

pytestmark = pytest.mark.anyio

TOPIC = "topic://news"


def source(
    *capabilities: str,
    durable: bool = False,
    address: str = "news",
    selector: str | None = None,
) -> Terminus:
    """A topic source as Qpid JMS builds it."""
    from haclient.amqp.types import AmqpDescribed, Symbol

    filters = None
    if selector is not None:
        key = "apache.org:selector-filter:string"
        filters = {key: AmqpDescribed(Symbol(key), selector)}
    return Terminus(
        address=address,
        capabilities=("topic", *capabilities),
        durable=Durability.UNSETTLED_STATE if durable else Durability.NONE,
        expiry_policy=ExpiryPolicy.NEVER if durable else ExpiryPolicy.LINK_DETACH,
        filter=filters,
    )


async def publish(conn: AmqpConnection, *bodies: str, address: str = TOPIC) -> None:
    link = await sender(conn, address)
    for body in bodies:
        assert await conn.send(link, message(body)) == Accepted()


async def refused(conn: AmqpConnection, terminus: Terminus, name: str) -> str | None:
    """Attach a receiver that must be refused; the condition."""
    with pytest.raises(HAClientError) as caught:
        await receiver(conn, terminus, name=name)
    return caught.value.condition


def subs(broker: Broker) -> list[SubscriptionInfo]:
    return broker.state.subscriptions()


async def detach(conn: AmqpConnection, link: Receiver, *, closed: bool) -> None:
    if closed:
        link.close()
    else:
        link.detach()
    wake(conn)
    await sync(conn)


# Rows with a source ----------------------------------------------------------------------------


async def test_row_source_not_shared_not_global_not_durable_own_volatile_queue(
    broker: Broker,
) -> None:
    with anyio.fail_after(TIMEOUT):
        async with connect(broker, "c1") as conn:
            link = await receiver(conn, source(), name="sub")
            assert link.remote_source.capabilities == ("topic",)
            assert link.remote_source.durable is Durability.NONE
            other = await receiver(conn, source(), name="sub2")
            await publish(conn, "m")
            assert body_of(await receive(conn, link)) == "m"
            assert body_of(await receive(conn, other)) == "m"  # each link: a queue of its own
            assert subs(broker) == []  # no named subscription
            assert "SHARED-SUBS" in conn.engine.remote_offered_capabilities
            await detach(conn, link, closed=False)
            assert broker.consumer_count("news") == 1  # its queue died with the link


async def test_row_source_not_shared_not_global_durable_named_in_container_namespace(
    broker: Broker,
) -> None:
    with anyio.fail_after(TIMEOUT):
        async with connect(broker, "c1") as conn:
            link = await receiver(conn, source(durable=True), name="sub")
            answer = link.remote_source
            assert answer.capabilities == ("topic",)
            assert answer.durable is Durability.UNSETTLED_STATE
            assert answer.expiry_policy is ExpiryPolicy.NEVER
            [info] = subs(broker)
            assert (info.namespace, info.name, info.durable, info.shared) == (
                "c1",
                "sub",
                True,
                False,
            )
            # exclusivity "link": a second link while it is in use is refused
            async with connect(broker, "c1") as other:
                condition = await refused(other, source(durable=True), "sub")
                assert condition == "amqp:resource-locked"
            # another container id is another namespace
            async with connect(broker, "c2") as other:
                await receiver(other, source(durable=True), name="sub")
                assert len(subs(broker)) == 2


async def test_row_source_not_shared_global_not_durable_same_as_not_global(
    broker: Broker,
) -> None:
    with anyio.fail_after(TIMEOUT):
        async with connect(broker, "c1") as conn:
            link = await receiver(conn, source("global"), name="sub")
            assert link.remote_source.capabilities == ("topic",)
            await receiver(conn, source("global"), name="sub2")
            assert subs(broker) == []
            assert broker.consumer_count("news") == 2


async def test_row_source_not_shared_global_durable_named_in_global_namespace(
    broker: Broker,
) -> None:
    with anyio.fail_after(TIMEOUT):
        async with connect(broker, "c1") as conn:
            link = await receiver(conn, source("global", durable=True), name="sub")
            assert link.remote_source.capabilities == ("topic", "global")
            [info] = subs(broker)
            assert (info.namespace, info.name, info.durable, info.shared) == (
                None,
                "sub",
                True,
                False,
            )
            async with connect(broker, "c2") as other:  # same global name: in use
                condition = await refused(other, source("global", durable=True), "sub")
                assert condition == "amqp:resource-locked"


async def test_row_source_shared_not_global_not_durable_shared_volatile(broker: Broker) -> None:
    with anyio.fail_after(TIMEOUT):
        async with connect(broker, "c1") as conn:
            one = await receiver(conn, source("shared"), name="sub", credit=1)
            two = await receiver(conn, source("shared"), name="sub|2", credit=1)
            assert one.remote_source.capabilities == ("topic", "shared")
            [info] = subs(broker)
            assert (info.namespace, info.name, info.durable, info.consumers) == (
                "c1",
                "sub",
                False,
                2,
            )
            await publish(conn, "a", "b")
            got = {body_of(await receive(conn, one)), body_of(await receive(conn, two))}
            assert got == {"a", "b"}  # competing consumers of one queue
            # different filters while consumers are attached: resource-locked
            condition = await refused(conn, source("shared", selector="x = 1"), "sub|3")
            assert condition == "amqp:resource-locked"
            await detach(conn, one, closed=False)
            await detach(conn, two, closed=False)
            assert subs(broker) == []  # a volatile shared subscription dies with its last link


async def test_row_source_shared_not_global_durable_shared_durable(broker: Broker) -> None:
    with anyio.fail_after(TIMEOUT):
        async with connect(broker, "c1") as conn:
            one = await receiver(conn, source("shared", durable=True), name="sub")
            assert one.remote_source.capabilities == ("topic", "shared")
            assert one.remote_source.durable is Durability.UNSETTLED_STATE
            two = await receiver(conn, source("shared", durable=True), name="sub|2")
            [info] = subs(broker)
            assert (info.namespace, info.name, info.durable, info.consumers) == (
                "c1",
                "sub",
                True,
                2,
            )
            # a non-shared durable attach for the same name: exclusivity differs
            condition = await refused(conn, source(durable=True), "sub")
            assert condition == "amqp:resource-locked"
            await detach(conn, one, closed=False)
            await detach(conn, two, closed=False)
            await publish(conn, "kept")
            [info] = subs(broker)
            assert info.depth == 1  # durable: it stays and keeps accumulating


async def test_row_source_shared_global_not_durable_global_shared_volatile(
    broker: Broker,
) -> None:
    with anyio.fail_after(TIMEOUT):
        async with connect(broker, "c1") as conn, connect(broker, "c2") as conn2:
            one = await receiver(conn, source("shared", "global"), name="sub|global-volatile1")
            two = await receiver(conn2, source("shared", "global"), name="sub|global-volatile1")
            assert one.remote_source.capabilities == ("topic", "shared", "global")
            assert two.remote_source.capabilities == ("topic", "shared", "global")
            [info] = subs(broker)  # one subscription across container ids
            assert (info.namespace, info.name, info.durable, info.consumers) == (
                None,
                "sub",
                False,
                2,
            )


async def test_row_source_shared_global_durable_global_shared_durable(broker: Broker) -> None:
    with anyio.fail_after(TIMEOUT):
        async with connect(broker, "c1") as conn, connect(broker, "c2") as conn2:
            one = await receiver(conn, source("shared", "global", durable=True), name="sub|global")
            await receiver(conn2, source("shared", "global", durable=True), name="sub|global")
            assert one.remote_source.capabilities == ("topic", "shared", "global")
            [info] = subs(broker)
            assert (info.namespace, info.name, info.durable, info.consumers) == (
                None,
                "sub",
                True,
                2,
            )


# Rows with a null source (lookup with durability true) -----------------------------------------


async def _durable_then_lookup(
    broker: Broker, capabilities: tuple[str, ...], create_name: str, lookup_name: str
) -> None:
    async with connect(broker, "c1") as conn:
        link = await receiver(conn, source(*capabilities, durable=True), name=create_name)
        # in use: a lookup is refused
        condition = await refused(conn, Terminus.null(), lookup_name)
        assert condition == "amqp:resource-locked"
        await detach(conn, link, closed=False)
        await publish(conn, "waiting")
    async with connect(broker, "c1") as conn:
        found = await receiver(conn, Terminus.null(), name=lookup_name, credit=0)
        answer = found.remote_source
        assert answer.address == "news"
        assert answer.durable is Durability.UNSETTLED_STATE
        assert answer.capabilities == ("topic", *capabilities)
        await detach(conn, found, closed=True)  # the JMS unsubscribe
        assert subs(broker) == []
        assert await refused(conn, Terminus.null(), lookup_name) == "amqp:not-found"


async def test_row_null_source_not_shared_not_global_lookup_in_container_namespace(
    broker: Broker,
) -> None:
    with anyio.fail_after(TIMEOUT):
        await _durable_then_lookup(broker, (), "sub", "sub")
        async with connect(broker, "c1") as conn:
            assert await refused(conn, Terminus.null(), "nothing") == "amqp:not-found"


async def test_row_null_source_not_shared_global_lookup_in_global_namespace(
    broker: Broker,
) -> None:
    with anyio.fail_after(TIMEOUT):
        await _durable_then_lookup(broker, ("global",), "sub", "sub")


async def test_row_null_source_shared_not_global_lookup_by_name_up_to_bar(
    broker: Broker,
) -> None:
    with anyio.fail_after(TIMEOUT):
        await _durable_then_lookup(broker, ("shared",), "sub", "sub|2")


async def test_row_null_source_shared_global_lookup_by_name_up_to_bar_globally(
    broker: Broker,
) -> None:
    with anyio.fail_after(TIMEOUT):
        await _durable_then_lookup(broker, ("shared", "global"), "sub|global", "sub|global")


# Detach, re-attach, rebind, persistence --------------------------------------------------------


async def test_detach_closed_false_keeps_durable_subscription_accumulating(
    broker: Broker,
) -> None:
    with anyio.fail_after(TIMEOUT):
        async with connect(broker, "c1") as conn:
            link = await receiver(conn, source(durable=True), name="sub")
            await detach(conn, link, closed=False)
            await publish(conn, "one", "two")
            again = await receiver(conn, source(durable=True), name="sub")  # re-attach
            assert body_of(await receive(conn, again)) == "one"
            assert body_of(await receive(conn, again)) == "two"


async def test_detach_closed_true_of_a_sourced_link_keeps_durable_subscription(
    broker: Broker,
) -> None:
    with anyio.fail_after(TIMEOUT):
        async with connect(broker, "c1") as conn:
            link = await receiver(conn, source(durable=True), name="sub")
            await detach(conn, link, closed=True)
            assert len(subs(broker)) == 1


async def test_unsubscribe_refused_while_another_consumer_remains(broker: Broker) -> None:
    with anyio.fail_after(TIMEOUT):
        async with connect(broker, "c1") as conn:
            link = await receiver(conn, source("shared", durable=True), name="sub")
            await detach(conn, link, closed=False)
            lookup = await receiver(conn, Terminus.null(), name="sub", credit=0)
            shared = await receiver(conn, source("shared", durable=True), name="sub|2")
            await detach(conn, lookup, closed=True)
            [info] = subs(broker)  # another consumer: not removed
            assert info.consumers == 1
            assert shared.remote_source.capabilities == ("topic", "shared")


async def test_idle_subscription_with_other_filter_or_topic_is_rebound(broker: Broker) -> None:
    with anyio.fail_after(TIMEOUT):
        async with connect(broker, "c1") as conn:
            link = await receiver(conn, source(durable=True), name="sub")
            await detach(conn, link, closed=False)
            await publish(conn, "old")
            link = await receiver(conn, source(durable=True, selector="n = 1"), name="sub")
            [info] = subs(broker)
            assert info.selector == "n = 1" and info.depth == 0  # rebound: dropped what waited
            assert link.remote_source.filter is not None
            await detach(conn, link, closed=False)
            link = await receiver(conn, source(durable=True, address="sport"), name="sub")
            [info] = subs(broker)
            assert info.topic == "sport" and info.selector is None
            await publish(conn, "goal", address="topic://sport")
            assert body_of(await receive(conn, link)) == "goal"


async def test_durable_subscription_and_its_durable_messages_survive_a_restart(
    tmp_path: Path,
) -> None:
    with anyio.fail_after(TIMEOUT * 2):
        async with Broker(store=tmp_path / "store.db") as broker:
            async with connect(broker, "c1") as conn:
                link = await receiver(
                    conn, source("shared", durable=True, selector="n > 1"), name="sub"
                )
                await detach(conn, link, closed=False)
                out = await sender(conn, TOPIC)
                for n in (1, 2):
                    body = message(f"m{n}", durable=True, application_properties={"n": n})
                    assert await conn.send(out, body) == Accepted()
            await broker.restart()
            assert isinstance(broker.persistence, SqlitePersistence)
            store = broker.persistence.store
            [record] = [node for node in store.nodes() if node.kind == "subscription"]
            assert record.properties["name"] == "sub" and record.properties["topic"] == "news"
            [info] = subs(broker)
            assert (info.name, info.depth, info.selector, info.shared) == (
                "sub",
                1,
                "n > 1",
                True,
            )
            async with connect(broker, "c1") as conn:
                link = await receiver(
                    conn, source("shared", durable=True, selector="n > 1"), name="sub"
                )
                assert body_of(await receive(conn, link)) == "m2"
                await detach(conn, link, closed=False)
                lookup = await receiver(conn, Terminus.null(), name="sub", credit=0)
                await detach(conn, lookup, closed=True)
            await broker.restart()
            assert subs(broker) == []


async def test_null_source_answer_carries_the_subscription_filters_and_shared_is_locked(
    broker: Broker,
) -> None:
    with anyio.fail_after(TIMEOUT):
        async with connect(broker, "c1") as conn:
            link = await receiver(conn, source(durable=True, selector="n = 1"), name="sub")
            # the subscription is "link"-exclusive: a shared attach for its name is refused
            condition = await refused(conn, source("shared", durable=True), "sub|2")
            assert condition == "amqp:resource-locked"
            await detach(conn, link, closed=False)
            found = await receiver(conn, Terminus.null(), name="sub", credit=0)
            assert "apache.org:selector-filter:string" in (found.remote_source.filter or {})


async def test_one_durable_message_rejected_by_two_durable_subscriptions_dead_letters_twice(
    tmp_path: Path,
) -> None:
    """Each subscription's copy of the message reaches the DLQ (a fresh message id each, so the
    stored copies do not collide) and both survive a restart."""
    from haclient.amqp.types import Rejected

    with anyio.fail_after(TIMEOUT * 2):
        async with Broker(store=tmp_path / "store.db") as broker:
            async with connect(broker, "c1") as conn:
                links = [
                    await receiver(conn, source(durable=True), name=name) for name in ("a", "b")
                ]
                out = await sender(conn, TOPIC)
                assert await conn.send(out, message("poison", durable=True)) == Accepted()
                for link in links:
                    got = await receive(conn, link)
                    assert body_of(got) == "poison"
                    conn.settle(got, Rejected())
                await sync(conn)
                assert [info.depth + info.unacked for info in subs(broker)] == [0, 0]
                assert broker.queue_depth("DLQ") == 2
            await broker.restart()
            assert broker.queue_depth("DLQ") == 2
            assert [info.depth for info in subs(broker)] == [0, 0]
            async with connect(broker, "c2") as conn:
                dead = await receiver(conn, "DLQ")
                assert [body_of(await receive(conn, dead)) for _ in range(2)] == ["poison"] * 2
