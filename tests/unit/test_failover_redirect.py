"""F18's decision, pure (``failover.states.redirect_next``): which broker a failure that
redirects sends the next attempt to, and where a chain of redirects stops."""

from __future__ import annotations

from failover.errors import ConnectionLostError
from failover.states import MAX_REDIRECTS, redirect_next, redirect_of
from failover.url import BrokerURL


def _redirected(target: object) -> ConnectionLostError:
    error = ConnectionLostError("redirected")
    error.redirect_to = target  # type: ignore[attr-defined]
    return error


def test_F18_only_an_error_naming_a_broker_url_redirects() -> None:
    target = BrokerURL("amqp", "b.test", 5673)
    assert redirect_of(_redirected(target)) == target
    assert redirect_of(_redirected("amqp://b.test:5673")) is None  # not a BrokerURL
    assert redirect_of(_redirected(None)) is None
    assert redirect_of(ConnectionLostError("lost")) is None
    assert redirect_of(None) is None


def test_F18_a_chain_of_redirects_stops_after_max_redirects_in_a_row() -> None:
    target = BrokerURL("amqp", "b.test")
    failure = _redirected(target)
    assert [redirect_next(failure, n) for n in range(MAX_REDIRECTS)] == [target] * MAX_REDIRECTS
    assert redirect_next(failure, MAX_REDIRECTS) is None  # the plan's next attempt instead
    assert redirect_next(ConnectionLostError("lost"), 0) is None
