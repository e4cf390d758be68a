"""A chaos run names its queues after a run id (a second run never finds the
first's leftovers), drains every queue it used at the end, and the audit accounts for what was
left: a copy of a consumed message is a duplicate to report, not silence."""

from __future__ import annotations

import anyio
import pytest

import haclient
from chaos.audit import Event, Ledger, audit
from chaos.bed import Bed
from chaos.scenarios.drain import drain
from chaos.scenarios.runner import Schedule, run_matrix
from haclient import Queue, TextMessage

pytestmark = pytest.mark.timeout(120)


def _ledger(*events: tuple[str, str, str, tuple[str, ...]]) -> list[Event]:
    """Events of stream ``auto-r0`` (AUTO), 0.1 s apart."""
    return [
        Event(kind, "auto-r0", actor, "AUTO" if actor != "drain" else "", ids, t=100 + i / 10)
        for i, (kind, actor, _, ids) in enumerate(events)
    ]


SENT_CONSUMED = (
    ("sent", "producer", "", ("m1",)),
    ("accepted", "producer", "", ("m1",)),
    ("received", "consumer", "", ("m1",)),
)


def test_item20_a_copy_left_on_the_queue_of_a_consumed_message_is_a_duplicate() -> None:
    result = audit(_ledger(*SENT_CONSUMED, ("left", "drain", "", ("m1",))))
    [summary] = result.streams
    assert (summary.left, summary.duplicates) == (1, 1)
    assert [(v.promise, v.detail) for v in result.violations] == [
        ("duplicate", "m1 consumed 2 times (AUTO, 1 left on the queue)")
    ]


def test_item20_a_left_copy_of_a_send_re_sent_across_a_failover_is_counted_and_allowed() -> None:
    events = [
        Event("sent", "auto-r0", "producer", "AUTO", ("m1",), t=100.0),
        Event("failover_started", "auto-r0", "producer", "", (), t=100.1),
        Event("accepted", "auto-r0", "producer", "AUTO", ("m1",), t=100.3, duration=0.3),
        Event("received", "auto-r0", "consumer", "AUTO", ("m1",), t=100.4),
        Event("left", "auto-r0", "drain", "", ("m1",), t=101.0),
    ]
    result = audit(events)
    assert result.ok
    assert (result.streams[0].left, result.streams[0].duplicates) == (1, 1)


def test_item20_what_was_left_is_accounted_for_lost_phantom_or_no_ack() -> None:
    never_consumed = audit(
        _ledger(
            ("sent", "producer", "", ("m1", "m2")),
            ("accepted", "producer", "", ("m1", "m2")),
            ("received", "consumer", "", ("m2",)),
            ("left", "drain", "", ("m1",)),
        )
    )
    assert [v.detail for v in never_consumed.violations] == [
        "m1 accepted, never consumed (AUTO, left on the queue)"
    ]
    stranger = audit(_ledger(*SENT_CONSUMED, ("left", "drain", "", ("x9",))))
    assert [v.detail for v in stranger.violations] == ["x9 received, never sent"]
    no_ack = [
        Event("sent", "n", "producer", "AUTO", ("n1", "n2"), t=100.0),
        Event("accepted", "n", "producer", "AUTO", ("n1", "n2"), t=100.1),
        Event("received", "n", "consumer", "NO_ACK", ("n1",), t=100.2),
        Event("left", "n", "drain", "", ("n2",), t=100.3),
    ]
    result = audit(no_ack)
    assert result.ok and (result.streams[0].lost_allowed, result.streams[0].left) == (0, 1)


def test_item20_the_drain_takes_every_message_off_and_writes_it_down() -> None:
    ledger = Ledger()
    with Bed() as bed:
        with haclient.connect(bed.url()) as conn, conn.create_session() as session:
            producer = session.create_producer(Queue("chaos-x-auto-r0"))
            sent = [TextMessage(str(n)) for n in range(3)]
            for message in sent:
                producer.send(message)
        anyio.run(drain, bed.url(), {"chaos-x-auto-r0": "auto-r0"}, ledger)
        assert bed.queue_depth("chaos-x-auto-r0") == 0
    left = [e for e in ledger.snapshot() if e.kind == "left"]
    assert [(e.stream, e.actor) for e in left] == [("auto-r0", "drain")] * 3
    assert sorted(i for e in left for i in e.ids) == sorted(str(m.message_id) for m in sent)


@pytest.mark.slow
def test_item20_two_runs_on_the_same_brokers_use_their_own_queues_and_leave_them_empty() -> None:
    schedule = Schedule(["latency"], count=1, drain=2.0)
    with Bed() as bed:
        with haclient.connect(bed.url()) as conn, conn.create_session() as session:
            # What the old naming would have found: a message a run before left on auto-r0.
            session.create_producer(Queue("auto-r0")).send(TextMessage("a leftover"))
        runs = [run_matrix(bed, schedule, workloads=["auto"]) for _ in range(2)]
        for run in runs:
            assert list(run.queues) == [f"chaos-{run.run_id}-auto-r0"]
            assert all(bed.queue_depth(queue) == 0 for queue in run.queues)
            assert audit(run.ledger.snapshot()).ok
        assert runs[0].run_id != runs[1].run_id
        assert bed.queue_depth("auto-r0") == 1  # not this run's: neither taken nor judged
