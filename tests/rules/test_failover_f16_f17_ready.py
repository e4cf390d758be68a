"""F16 (return to the preferred broker) and F17 (warm backup), on reference brokers, through
both APIs: independent brokers where the preferred one is killed and started again, and a
shared-store pair where it comes back as a standby that does not listen."""

from __future__ import annotations

import time

import anyio
import pytest
from apikit import Api
from failoverkit import (
    TIMEOUT,
    HaPair,
    Recorder,
    brokers,
    connected,
    failover_url,
    port_of,
    take_all,
    text_of,
)

from haclient.destination import Queue
from haclient.errors import (
    AcknowledgeFailedError,
    PreferredBrokerAvailable,
    TransactionRolledBackError,
)
from haclient.message import TextMessage
from haclient.metrics import _samples
from haclient.modes import AckMode

pytestmark = pytest.mark.anyio

# Short intervals: the probe and the spare's back-off are quick here; timing is bench's.
RETURN = {"priorityBackup": "true", "priorityBackupInterval": 50}


async def _eventually(condition: object, timeout: float = TIMEOUT) -> None:
    with anyio.fail_after(timeout):
        while not await condition():  # type: ignore[operator]
            await anyio.sleep(0.02)


async def test_F16_the_connection_returns_to_the_restarted_preferred_broker(api: Api) -> None:
    with brokers(2) as (first, second):
        recorder = Recorder()
        url = failover_url(first, second, **RETURN)
        async with await connected(api, url, recorder) as connection:
            session = await connection.create_session(AckMode.AUTO)
            producer = await session.create_producer(Queue("f16"))
            consumer = await session.create_consumer(Queue("f16"))
            transacted = await connection.create_session(AckMode.TRANSACTED)
            tx_producer = await transacted.create_producer(Queue("f16-tx"))
            first.kill()
            await recorder.wait_for("completed")
            assert port_of(recorder.named("completed")[0]) == second.port
            sent: list[str] = []
            received: list[str] = []
            for n in range(3):  # running on the second broker
                sent.append(f"b{n}")
                await producer.send(TextMessage(sent[-1]))
                received.append(text_of(await consumer.receive(TIMEOUT)) or "")
            await tx_producer.send(TextMessage("dirty"))  # open when the return comes
            client = await connection.create_session(AckMode.CLIENT)
            pending = await client.create_consumer(Queue("f16-ack"))
            to_client = await session.create_producer(Queue("f16-ack"))
            await to_client.send(TextMessage("unacknowledged"))
            unacknowledged = await pending.receive(TIMEOUT)
            assert unacknowledged is not None
            first.start()
            for n in range(40):  # sends and receives go on through the return
                sent.append(f"r{n}")
                await producer.send(TextMessage(sent[-1]))
                message = await consumer.receive(0.2)
                if message is not None:
                    received.append(text_of(message) or "")
                if len(recorder.named("completed")) == 2 and n >= 5:
                    break
                await anyio.sleep(0.02)
            await recorder.wait_for("completed", 2)
            cause = recorder.named("started")[1]
            assert isinstance(cause, PreferredBrokerAvailable)
            assert port_of(recorder.named("completed")[1]) == first.port
            with pytest.raises(TransactionRolledBackError):  # F7, as after any loss
                await transacted.commit()
            with pytest.raises(AcknowledgeFailedError):  # F8, as after any loss
                await api.acknowledge(unacknowledged)
            while (message := await consumer.receive(0.3)) is not None:
                received.append(text_of(message) or "")
            statistics = await connection.statistics()
            assert statistics.failovers_returned == 1 and statistics.failovers == 2
            samples = {(name, labels): value for name, labels, value in _samples(statistics)}
            assert samples[("failovers", ("returned",))] == 1  # the metrics tell them apart
            assert samples[("failovers", ("completed",))] == 1
            assert statistics.broker_address == f"127.0.0.1:{first.port}"
        left_on_second = await take_all(second.url, "f16")  # given back when it left
        assert set(sent) <= set(received) | set(left_on_second)  # nothing lost


async def test_F16_on_a_shared_store_pair_the_probe_waits_for_a_standby(
    api: Api, pair: HaPair
) -> None:
    recorder = Recorder()
    preferred, other = pair.members
    url = failover_url(preferred, other, **RETURN)
    async with await connected(api, url, recorder) as connection:
        session = await connection.create_session(AckMode.AUTO)
        producer = await session.create_producer(Queue("f16-ha"))
        pair.kill_master()  # the preferred broker; it comes back as the standby
        await recorder.wait_for("completed")
        await producer.send(TextMessage("on the new master"))
        before = await connection.statistics()
        await anyio.sleep(0.5)  # ten probes of a standby that does not listen
        after = await connection.statistics()
        assert recorder.named("started") and len(recorder.named("started")) == 1
        assert len(recorder.named("completed")) == 1  # no listener heard the probes
        assert after.connection_attempts == before.connection_attempts  # nor statistics
        assert after.broker_address == f"127.0.0.1:{other.port}"
        assert pair.master is other
    assert pair.queue_depth("f16-ha") == 1


async def test_F17_a_failover_takes_the_warm_spare_and_a_new_one_follows(api: Api) -> None:
    with brokers(2) as (first, second):
        recorder = Recorder()
        url = failover_url(first, second, backup="true")
        async with await connected(api, url, recorder) as connection:
            session = await connection.create_session(AckMode.AUTO)
            producer = await session.create_producer(Queue("f17"))
            consumer = await session.create_consumer(Queue("f17"))

            async def spare_at(port: int) -> bool:
                standby = (await connection.statistics()).standby_broker
                return standby is not None and port_of(standby) == port

            await _eventually(lambda: spare_at(second.port))
            container = (await connection.statistics()).container_id
            assert second.connections() == [container]  # the spare: open, no session
            attempts = (await connection.statistics()).connection_attempts
            first.kill()
            started = time.monotonic()
            await recorder.wait_for("completed")
            assert time.monotonic() - started < TIMEOUT
            statistics = await connection.statistics()
            assert statistics.connection_attempts == attempts  # no attempt: the spare itself
            assert statistics.broker_address == f"127.0.0.1:{second.port}"
            await producer.send(TextMessage("after"))
            assert text_of(await consumer.receive(TIMEOUT)) == "after"
            first.start()
            await _eventually(lambda: spare_at(first.port))  # the next spare, quietly
            assert len(recorder.named("started")) == 1
