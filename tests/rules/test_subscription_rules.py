"""Rules S1-S4: durable, no-local and shared subscriptions, through both APIs (S5 needs
failover and lives with the failover tests)."""

from __future__ import annotations

import pytest
from apikit import Api, Bed, Proxy
from rulekit import send, started

from haclient.destination import Topic
from haclient.errors import ResourceLockedError
from haclient.message import TextMessage
from haclient.modes import AckMode

pytestmark = pytest.mark.anyio


async def drain(consumer: Proxy, wait: float = 0.5) -> list[object]:
    """Bodies ``consumer`` receives until ``wait`` seconds pass without one."""
    bodies = []
    while (message := await consumer.receive(wait)) is not None:
        bodies.append(message.body)
    return bodies


async def durable(bed: Bed, session: Proxy, topic: Topic, name: str, **kw: object) -> Proxy:
    """A durable consumer, or a skip naming what the broker lacks."""
    await bed.require_durable_subscriptions()
    return await session.create_durable_consumer(topic, name, **kw)


async def test_S1_durable_subscription_keeps_messages_and_is_scoped_to_the_client_id(
    api: Api, bed: Bed
) -> None:
    topic, name = Topic(bed.unique("s1")), "sub"
    cid_a, cid_b = bed.unique("cid-a"), bed.unique("cid-b")
    async with await started(api, bed, client_id=cid_a) as a:
        session_a = await a.create_session(AckMode.AUTO)
        consumer = await durable(bed, session_a, topic, name)
        await consumer.close()
        await send(bed, topic, "kept-1", "kept-2")  # nobody consuming: the subscription keeps
        async with await started(api, bed, client_id=cid_b) as b:
            session_b = await b.create_session(AckMode.AUTO)
            other = await durable(bed, session_b, topic, name)  # same name, other client id
            if bed.admin is not None:
                mine = [s for s in bed.subscriptions() if s.topic.endswith(topic.name)]
                assert sorted(s.namespace for s in mine) == sorted([cid_a, cid_b])
            await send(bed, topic, "both")
            assert await drain(other) == ["both"]  # independent: not the ones before it
            await other.close()
            await session_b.unsubscribe(name)
        consumer = await session_a.create_durable_consumer(topic, name)
        assert await drain(consumer) == ["kept-1", "kept-2", "both"]
        await consumer.close()
        await session_a.unsubscribe(name)


async def test_S2_no_local_durable_subscription_never_adds_own_messages(api: Api, bed: Bed) -> None:
    topic, name = Topic(bed.unique("s2")), "nolocal"
    async with await started(api, bed, client_id=bed.unique("cid")) as own:
        session = await own.create_session(AckMode.AUTO)
        consumer = await durable(bed, session, topic, name, no_local=True)
        producer = await session.create_producer(topic)
        await consumer.close()
        await producer.send(TextMessage("own-while-away"))  # same client id: never added
        await send(bed, topic, "other-while-away")  # another connection: added
        if bed.admin is not None:
            (info,) = [s for s in bed.subscriptions() if s.name == name and s.no_local]
            assert info.depth == 1
        consumer = await session.create_durable_consumer(topic, name, no_local=True)
        await producer.send(TextMessage("own-while-here"))
        await send(bed, topic, "other-while-here")
        received = await drain(consumer)
        assert received == ["other-while-away", "other-while-here"]
        await consumer.close()
        await session.unsubscribe(name)


async def test_S1_S2_without_a_client_id_the_name_is_global_and_no_local_has_no_effect(
    api: Api, bed: Bed
) -> None:
    topic, name = Topic(bed.unique("s1g")), bed.unique("global")
    async with await started(api, bed) as first:
        session = await first.create_session(AckMode.AUTO)
        consumer = await durable(bed, session, topic, name, no_local=True)
        assert consumer.no_local is False  # S2: no client id, no effect
        producer = await session.create_producer(topic)
        await producer.send(TextMessage("own"))
        assert await drain(consumer) == ["own"]
        await consumer.close()
        await send(bed, topic, "kept")
    async with await started(api, bed) as second:  # another connection, no client id either
        session = await second.create_session(AckMode.AUTO)
        consumer = await session.create_durable_consumer(topic, name)
        assert await drain(consumer) == ["kept"]  # the same, global, subscription
        await consumer.close()
        await session.unsubscribe(name)


async def test_S3_shared_subscription_is_shared_between_connections(api: Api, bed: Bed) -> None:
    topic, name = Topic(bed.unique("s3")), bed.unique("shared")
    async with await started(api, bed) as one, await started(api, bed) as two:
        s1 = await one.create_session(AckMode.AUTO)
        s2 = await two.create_session(AckMode.AUTO)
        await bed.require_offered("SHARED-SUBS", "shared subscriptions")
        c1 = await s1.create_shared_consumer(topic, name)
        c2 = await s2.create_shared_consumer(topic, name)
        if bed.admin is not None:
            mine = [s for s in bed.subscriptions() if s.name == name]
            assert len(mine) == 1 and mine[0].shared and not mine[0].durable
        bodies = [f"m{i}" for i in range(10)]
        await send(bed, topic, *bodies)
        got = await drain(c1) + await drain(c2)
        assert sorted(got) == sorted(bodies)  # each message to exactly one of them


async def test_S3_shared_durable_subscription_outlives_its_consumers(api: Api, bed: Bed) -> None:
    topic, name = Topic(bed.unique("s3d")), bed.unique("shared-d")
    async with await started(api, bed, client_id=bed.unique("cid")) as connection:
        session = await connection.create_session(AckMode.AUTO)
        await bed.require_offered("SHARED-SUBS", "shared subscriptions")
        first = await session.create_shared_durable_consumer(topic, name)
        second = await session.create_shared_durable_consumer(topic, name)
        if api.name == "aio":  # Qpid JMS link naming: name, name|2 ...
            assert (first.target._link_name, second.target._link_name) == (name, f"{name}|2")
        if bed.admin is not None:
            (info,) = [s for s in bed.subscriptions() if s.name == name]
            assert info.shared and info.durable
            assert info.consumers == 2
        await first.close()
        await second.close()
        await send(bed, topic, "kept")
        again = await session.create_shared_durable_consumer(topic, name)
        assert await drain(again) == ["kept"]
        await again.close()
        await session.unsubscribe(name)


async def test_S4_unsubscribe_removes_and_is_refused_while_consumed(api: Api, bed: Bed) -> None:
    topic, name = Topic(bed.unique("s4")), "to-remove"
    async with await started(api, bed, client_id=bed.unique("cid")) as connection:
        session = await connection.create_session(AckMode.AUTO)
        consumer = await durable(bed, session, topic, name)
        with pytest.raises(ResourceLockedError):
            await session.unsubscribe(name)
        await consumer.close()
        await send(bed, topic, "before-unsubscribe")
        await session.unsubscribe(name)
        if bed.admin is not None:
            assert [s for s in bed.subscriptions() if s.name == name] == []
        consumer = await session.create_durable_consumer(topic, name)  # a new, empty one
        assert await consumer.receive(0.5) is None
        await consumer.close()
        await session.unsubscribe(name)
