"""The audit judged on hand-made ledgers: one that keeps every promise, and one per promise that
breaks it (each must be caught, and only that one)."""

from __future__ import annotations

from pathlib import Path

import pytest

from chaos.audit import PROMISES, Event, Ledger, audit


class Book:
    """A hand-made ledger of one stream, with a clock that advances 0.1 s per event."""

    def __init__(self, mode: str = "AUTO", stream: str = "s") -> None:
        self.mode = mode
        self.stream = stream
        self.events: list[Event] = []
        self.now = 100.0

    def add(self, kind: str, actor: str, *ids: str, **fields: object) -> Book:
        self.now += 0.1
        mode = "AUTO" if actor in ("producer", "requester", "server") else self.mode
        if actor == "producer" and self.mode == "TRANSACTED":
            mode = "TRANSACTED"
        fields.setdefault("t", self.now)
        self.events.append(Event(kind, self.stream, actor, mode, tuple(ids), **fields))  # type: ignore[arg-type]
        return self

    def send(self, *ids: str, duration: float = 0.01) -> Book:
        for message_id in ids:
            self.add("sent", "producer", message_id)
            self.add("accepted", "producer", message_id, duration=duration)
        return self

    def receive(self, *ids: str) -> Book:
        for message_id in ids:
            self.add("received", "consumer", message_id)
        return self

    def failover(self, actor: str = "consumer") -> Book:
        return self.add("failover_started", actor).add("failover_completed", actor, duration=0.1)

    def broken(self) -> dict[str, int]:
        return {p: n for p, n in audit(self.events).by_promise().items() if n}


def test_a_ledger_that_keeps_every_promise_passes() -> None:
    auto = Book("AUTO", "auto").send("a1", "a2").failover().receive("a1", "a2")
    client = Book("CLIENT", "client").send("c1", "c2").receive("c1")
    client.failover().add("ack_failed", "consumer", "c1").receive("c1", "c2")
    client.add("acknowledged", "consumer", "c1", "c2")
    tx = Book("TRANSACTED", "tx")
    tx.add("sent", "producer", "t1").add("rolled_back", "producer", "t1")
    tx.add("sent", "producer", "t2").add("committed", "producer", "t2")
    tx.receive("t2").add("rolled_back", "consumer", "t2").receive("t2")
    tx.add("committed", "consumer", "t2")
    no_ack = Book("NO_ACK", "noack").send("n1", "n2").receive("n1")  # A5 may lose n2
    dups = Book("DUPS_OK", "dups").send("d1").receive("d1", "d1")  # A3 allows it
    rr = Book("AUTO", "rr")
    rr.add("sent", "requester", "q1").add("accepted", "requester", "q1")
    rr.add("received", "server", "q1").add("reply", "requester", "q1")
    events = [e for b in (auto, client, tx, no_ack, dups, rr) for e in b.events]
    result = audit(events)
    assert result.ok, result.violations
    assert {s.stream: s.lost_allowed for s in result.streams}["noack"] == 1


def test_F11_an_accepted_message_never_received_is_lost() -> None:
    assert Book().send("m1", "m2").receive("m1").broken() == {"lost": 1}


def test_A2_a_client_message_received_but_never_acknowledged_is_lost() -> None:
    book = Book("CLIENT").send("m1").receive("m1").add("ack_failed", "consumer", "m1")
    assert book.broken() == {"lost": 1}


def test_A2_an_in_doubt_acknowledge_counts_as_consumed() -> None:
    book = Book("CLIENT").send("m1").receive("m1")
    book.add("ack_failed", "consumer", "m1", in_doubt=True)
    assert book.broken() == {}


def test_F7_a_committed_message_never_consumed_is_lost() -> None:
    book = Book("TRANSACTED").add("sent", "producer", "t1").add("committed", "producer", "t1")
    book.receive("t1").add("rolled_back", "consumer", "t1")
    assert book.broken() == {"lost": 1}


def test_A1_a_message_consumed_twice_is_a_duplicate() -> None:
    assert Book().send("m1").receive("m1", "m1").broken() == {"duplicate": 1}


def test_F11_a_duplicate_of_a_send_cut_by_failover_is_allowed() -> None:
    book = Book().add("sent", "producer", "m1").failover("producer")
    book.add("accepted", "producer", "m1", duration=0.5).receive("m1", "m1")
    assert book.broken() == {}


def test_A2_acknowledged_twice_is_a_duplicate() -> None:
    book = Book("CLIENT").send("m1").receive("m1").add("acknowledged", "consumer", "m1")
    book.receive("m1").add("acknowledged", "consumer", "m1")
    assert book.broken() == {"duplicate": 1}


def test_F11_a_message_nobody_sent_is_a_phantom() -> None:
    assert Book().send("m1").receive("m1", "x").broken() == {"phantom": 1}


def test_F7_a_message_of_a_rolled_back_transaction_seen_breaks_F7() -> None:
    book = Book("TRANSACTED").add("sent", "producer", "t1").add("rolled_back", "producer", "t1")
    book.receive("t1").add("committed", "consumer", "t1")
    assert book.broken() == {"rolled_back_seen": 1}


def test_F7_an_in_doubt_transaction_applied_in_part_breaks_F7() -> None:
    book = Book("TRANSACTED").add("sent", "producer", "t1", "t2")
    book.add("rolled_back", "producer", "t1", "t2", in_doubt=True)
    book.receive("t1").add("committed", "consumer", "t1")
    assert book.broken() == {"in_doubt_partial": 1}


def test_F8_an_acknowledge_across_a_failover_that_succeeds_breaks_F8() -> None:
    book = Book("CLIENT").send("m1").receive("m1").failover()
    book.add("acknowledged", "consumer", "m1")
    assert book.broken() == {"ack_after_failover": 1}


def test_F9_a_message_handed_out_during_a_failover_breaks_F9() -> None:
    book = Book().send("m1").add("failover_started", "consumer").receive("m1")
    book.add("failover_completed", "consumer", duration=0.2)
    assert book.broken() == {"old_broker": 1}


def test_F2_a_call_past_its_deadline_is_blocked() -> None:
    book = Book().send("m1").receive("m1")
    book.add("call", "consumer", call="receive", duration=9.0, deadline=5.5)
    assert book.broken() == {"blocked": 1}


def test_F3_an_error_the_rules_do_not_allow_is_unexpected() -> None:
    book = Book().send("m1").receive("m1")
    book.add("error", "producer", call="send", error="ConnectionFailedError", message="gave up")
    assert book.broken() == {"unexpected_error": 1}


def test_F8_acknowledge_failed_error_is_expected() -> None:
    book = Book("CLIENT").send("m1").receive("m1")
    book.add("error", "consumer", call="acknowledge", error="AcknowledgeFailedError")
    book.receive("m1").add("acknowledged", "consumer", "m1")
    assert book.broken() == {}


def test_F6_a_request_never_answered_is_unanswered() -> None:
    book = Book("AUTO")
    book.add("sent", "requester", "q1").add("accepted", "requester", "q1")
    book.add("received", "server", "q1").add("unanswered", "requester", "q1", message="q 1")
    assert book.broken() == {"unanswered": 1}


def test_F2_a_workload_that_did_not_finish_is_hung() -> None:
    assert Book().send("m1").receive("m1").add("hung", "workload").broken() == {"hung": 1}


def test_X3_a_lost_effect_and_a_duplicated_effect_break_their_promises() -> None:
    ledger = Ledger()
    ledger.add("changed", stream="outbox_inbox-r0", actor="producer", ids=["ID:a", "ID:b"])
    for message_id in ("ID:a", "ID:a"):
        ledger.add("effect", stream="outbox_inbox-r0", actor="consumer", ids=[message_id])
    broken = audit(ledger.snapshot()).by_promise()
    assert (broken["lost_effect"], broken["duplicated_effect"]) == (1, 1)


def test_every_promise_has_a_breaking_ledger_above() -> None:
    names = " ".join(name for name in globals() if name.startswith("test_"))
    caught = {
        "lost",
        "duplicate",
        "phantom",
        "rolled_back_seen",
        "in_doubt_partial",
        "ack_after_failover",
        "old_broker",
        "blocked",
        "unexpected_error",
        "unanswered",
        "hung",
        "lost_effect",
        "duplicated_effect",
    }
    assert caught == set(PROMISES), names


@pytest.mark.parametrize("mode", ["AUTO", "CLIENT"])
def test_a_ledger_survives_saving_and_loading(tmp_path: Path, mode: str) -> None:
    ledger = Ledger()
    ledger.add("accepted", stream="s", actor="producer", mode="AUTO", ids=["m1"])
    ledger.add("received", stream="s", actor="consumer", mode=mode, ids=["m1"])
    ledger.save(tmp_path / "ledger.jsonl")
    assert Ledger.load(tmp_path / "ledger.jsonl") == ledger.snapshot()
