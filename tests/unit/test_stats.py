"""The statistics structures of ``haclient.aio.stats``: histograms with Prometheus' inclusive
bucket bounds, and the gate's blocked-call measurement."""

from __future__ import annotations

import pytest

from failover.states import ConnectionState
from haclient.aio.stats import DURATION_BUCKETS, BlockedCalls, Counters, Histogram


def test_a_bound_is_inclusive_and_the_last_bucket_is_inf() -> None:
    histogram = Histogram((0.001, 0.01, 1.0))
    for seconds in (0.0005, 0.001, 0.005, 1.0, 42.0):
        histogram.observe(seconds)
    snapshot = histogram.snapshot()
    assert snapshot.counts == (2, 1, 1, 1)
    assert snapshot.count == 5 and snapshot.sum == pytest.approx(43.0065)
    assert snapshot.cumulative() == [("0.001", 2), ("0.01", 3), ("1.0", 4), ("+Inf", 5)]


def test_the_default_buckets_run_from_a_millisecond_to_minutes() -> None:
    assert DURATION_BUCKETS[0] == 0.001 and DURATION_BUCKETS[-1] >= 300
    assert list(DURATION_BUCKETS) == sorted(set(DURATION_BUCKETS))


@pytest.mark.parametrize("bounds", [(), (1.0, 0.5), (0.5, 0.5)])
def test_bounds_must_be_distinct_and_ascending(bounds: tuple[float, ...]) -> None:
    with pytest.raises(ValueError):
        Histogram(bounds)


def test_a_snapshot_does_not_change_afterwards() -> None:
    histogram = Histogram()
    before = histogram.snapshot()
    histogram.observe(0.2)
    assert before.count == 0 and histogram.snapshot().count == 1


def test_a_call_at_an_open_gate_is_not_blocked() -> None:
    calls = BlockedCalls()
    with calls.measure(ConnectionState.CONNECTED):
        assert calls.now == 0
    assert calls.durations.count == 0


def test_a_blocked_call_is_counted_while_it_waits_and_timed_when_it_ends() -> None:
    calls = BlockedCalls()
    with pytest.raises(TimeoutError), calls.measure(ConnectionState.FAILING_OVER):
        assert calls.now == 1
        raise TimeoutError  # a failover timeout ends the wait too
    assert calls.now == 0 and calls.durations.count == 1


def test_counters_report_every_transaction_outcome_and_every_mode() -> None:
    counters = Counters()
    counters.in_doubt += 1
    assert counters.transactions() == {
        "committed": 0,
        "rolled_back": 0,
        "rolled_back_by_failover": 0,
        "in_doubt": 1,
    }
    assert set(counters.acknowledgements()) == {
        "transacted", "auto", "client", "dups_ok", "no_ack", "individual"
    }  # fmt: skip


def test_item18_the_statistics_repr_reads_as_a_summary() -> None:
    from haclient.aio.connection import ConnectionStatistics

    durations = Histogram()
    durations.observe(0.2)
    durations.observe(0.4)
    idle = Histogram().snapshot()
    statistics = ConnectionStatistics(
        state=ConnectionState.CONNECTED,
        broker="amqp://127.0.0.1:5672",
        client_id=None,
        container_id="ID:x",
        epoch=1,
        failovers=1,
        last_downtime=0.25,
        sessions=1,
        producers=1,
        consumers=2,
        messages_sent=10,
        messages_received=9,
        messages_acknowledged=8,
        method="roundrobin",
        broker_address="127.0.0.1:5672",
        connection_attempts={"127.0.0.1:5672": 2},
        failovers_failed=0,
        failover_durations=durations.snapshot(),
        calls_blocked=0,
        blocked_durations=idle,
        acknowledgements={"auto": 8, "client": 0},
        ack_latency={"auto": durations.snapshot(), "client": idle},
        transactions={"committed": 0, "in_doubt": 0},
        messages_resent=1,
        messages_redelivered=0,
        temporaries_restored=0,
        resources_not_restored=0,
        duplicates_suppressed=0,
        connection_attempts_failed={"127.0.0.1:5672": 1},
        name="ID:x",
        last_failover_at=None,
        state_since=0.0,
    )
    shown = repr(statistics)
    assert shown.startswith("ConnectionStatistics(state=CONNECTED, broker='amqp://127.0.0.1:5672'")
    assert "failovers=1 (last 0.250 s)" in shown and "sent=10, received=9" in shown
    assert "failover_durations=2 x 300.0 ms mean" in shown
    assert "acknowledgements={auto: 8}" in shown and "messages_resent=1" in shown
    assert "bounds" not in shown and "counts" not in shown  # no histogram tuples
    assert "transactions" not in shown and "blocked_durations" not in shown  # nothing there
    assert len(shown) < 400, shown
