"""The exception tree and the AMQP error-condition table (haclient.errors, which re-exports
haerrors, failover.errors, haclient.jms_errors and haclient.amqp.conditions)."""

from __future__ import annotations

import builtins
import dataclasses
import inspect
import pickle
import sys
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import failover.errors
import haclient.jms_errors
import haerrors
from haclient import errors
from haclient.amqp import conditions
from haclient.errors import (
    CONDITIONS,
    AcknowledgeFailedError,
    AMQPError,
    AttachTimeoutError,
    AuthenticationError,
    BrowserFailoverError,
    ClientIdInUseError,
    ClosedError,
    ConditionRule,
    ConfigurationError,
    ConnectionFailedError,
    ConnectionLostError,
    FailoverTimeoutError,
    HAClientError,
    IllegalStateError,
    InvalidDestinationError,
    InvalidSelectorError,
    LinkDetachedError,
    MessageFormatError,
    NotImplementedByBrokerError,
    OpenTimeoutError,
    PreferredBrokerAvailable,
    ProtocolError,
    RedirectError,
    ResourceLimitError,
    ResourceLockedError,
    TransactionRolledBackError,
    error_from_condition,
    is_retriable,
)

# Every error condition defined by AMQP 1.0 (sections 2.8.15-2.8.18 and 4.5.8).
SPEC_CONDITIONS = [
    "amqp:internal-error",
    "amqp:not-found",
    "amqp:unauthorized-access",
    "amqp:decode-error",
    "amqp:resource-limit-exceeded",
    "amqp:not-allowed",
    "amqp:invalid-field",
    "amqp:not-implemented",
    "amqp:resource-locked",
    "amqp:precondition-failed",
    "amqp:resource-deleted",
    "amqp:illegal-state",
    "amqp:frame-size-too-small",
    "amqp:connection:forced",
    "amqp:connection:framing-error",
    "amqp:connection:redirect",
    "amqp:session:window-violation",
    "amqp:session:errant-link",
    "amqp:session:handle-in-use",
    "amqp:session:unattached-handle",
    "amqp:link:detach-forced",
    "amqp:link:transfer-limit-exceeded",
    "amqp:link:message-size-exceeded",
    "amqp:link:redirect",
    "amqp:link:stolen",
    "amqp:transaction:unknown-id",
    "amqp:transaction:rollback",
    "amqp:transaction:timeout",
]

ERROR_CLASSES = [
    obj
    for name in errors.__all__
    if isinstance(obj := getattr(errors, name), type) and issubclass(obj, BaseException)
]


def test_all_is_pinned() -> None:
    assert sorted(errors.__all__) == sorted(
        [
            "CONDITIONS",
            "AMQPError",
            "AcknowledgeFailedError",
            "AttachTimeoutError",
            "AuthenticationError",
            "BrokerNotReadyError",
            "BrowserFailoverError",
            "ClientIdInUseError",
            "ClosedError",
            "ConditionRule",
            "ConfigurationError",
            "ConnectionFailedError",
            "ConnectionLostError",
            "FailoverTimeoutError",
            "HAClientError",
            "IllegalStateError",
            "InvalidDestinationError",
            "InvalidSelectorError",
            "LinkDetachedError",
            "MessageFormatError",
            "NotImplementedByBrokerError",
            "OpenTimeoutError",
            "PreferredBrokerAvailable",
            "ProtocolError",
            "RedirectError",
            "ResourceLimitError",
            "ResourceLockedError",
            "TransactionRolledBackError",
            "error_from_condition",
            "is_retriable",
        ]
    )
    assert len(set(errors.__all__)) == len(errors.__all__)
    for name in errors.__all__:
        assert hasattr(errors, name), name


HOMES = [haerrors, failover.errors, haclient.jms_errors, conditions]


@pytest.mark.parametrize("home", HOMES, ids=lambda m: m.__name__)
def test_every_public_exception_is_listed_in_all(home: ModuleType) -> None:
    # haclient.errors defines nothing: the classes live in the lowest layer that raises them
    # (the root and what the engine and failover share in haerrors, failover's own outcomes in
    # failover.errors, the client's JMS meanings in haclient.jms_errors, the protocol's beside
    # the AMQP engine in haclient.amqp.conditions); it re-exports every one.
    defined = {
        name
        for name, obj in vars(home).items()
        if inspect.isclass(obj)
        and issubclass(obj, BaseException)
        and obj.__dict__.get("_defined_in") == home.__name__
        and not name.startswith("_")
    }
    assert defined
    assert defined <= set(errors.__all__)
    assert all(getattr(errors, name) is getattr(home, name) for name in defined)


@pytest.mark.parametrize("cls", ERROR_CLASSES, ids=lambda c: c.__name__)
def test_a_class_is_found_where_its_module_says(cls: type[BaseException]) -> None:
    # What a traceback names: the public module, which has it; pickle goes through the module
    # the class is defined in, which has it too.
    assert cls.__module__ == "haclient.errors"
    assert getattr(errors, cls.__qualname__) is cls
    home = cls.__dict__["_defined_in"]
    assert home in {module.__name__ for module in HOMES}
    assert getattr(sys.modules[home], cls.__qualname__) is cls
    assert repr(cls("x")) == f"{cls.__name__}('x')"


def test_an_applications_own_subclass_keeps_its_module_and_pickles() -> None:
    copy = pickle.loads(pickle.dumps(OwnError("mine", condition="x:y")))
    assert type(copy) is OwnError and OwnError.__module__ == __name__
    assert str(copy) == "mine" and copy.condition == "x:y"


class OwnError(errors.HAClientError):
    """An application's own error, under the root."""


def test_the_generic_tree_knows_no_protocol() -> None:
    # What failover raises is failover's; the AMQP-only classes and the table are the engine's.
    assert failover.errors.ConnectionLostError is ConnectionLostError
    assert failover.errors.ConfigurationError is ConfigurationError
    amqp_only = {"ProtocolError", "RedirectError", "LinkDetachedError", "OpenTimeoutError"}
    amqp_only |= {"AttachTimeoutError", "CONDITIONS", "ConditionRule", "error_from_condition"}
    amqp_only |= {"is_retriable"}
    assert amqp_only <= set(conditions.__all__)
    assert not amqp_only & set(failover.errors.__all__)
    assert not amqp_only & set(haerrors.__all__)


def test_the_failover_layer_holds_only_what_it_raises_or_classifies() -> None:
    # The JMS-only classes are the client's (haclient.jms_errors), not failover's.
    jms_only = {"InvalidSelectorError", "AcknowledgeFailedError", "BrowserFailoverError"}
    jms_only |= {"TransactionRolledBackError", "InvalidDestinationError", "MessageFormatError"}
    jms_only |= {"ResourceLockedError", "ResourceLimitError", "NotImplementedByBrokerError"}
    jms_only |= {"ClientIdInUseError"}
    assert jms_only == set(haclient.jms_errors.__all__)
    assert not jms_only & set(failover.errors.__all__)
    assert not jms_only & set(haerrors.__all__)
    assert not jms_only & set(vars(failover.errors))
    assert set(failover.errors.__all__) == {
        "HAClientError",
        "ConfigurationError",
        "IllegalStateError",
        "ClosedError",
        "AuthenticationError",
        "ConnectionLostError",
        "BrokerNotReadyError",
        "ConnectionFailedError",
        "FailoverTimeoutError",
        "PreferredBrokerAvailable",
        "without_frames",
    }


def test_the_public_tree_keeps_its_names_and_relations() -> None:
    # Moving classes between layers changed no name and no isinstance relation.
    assert len(errors.__all__) == 30  # 26 exception classes, the table, its rule, 2 functions
    assert len(ERROR_CLASSES) == 26
    assert issubclass(InvalidSelectorError, ValueError)
    assert issubclass(ClientIdInUseError, IllegalStateError)
    assert issubclass(errors.PreferredBrokerAvailable, ConnectionLostError)
    assert issubclass(errors.BrokerNotReadyError, ConnectionLostError)
    assert issubclass(ConnectionLostError, AMQPError)


def test_the_api_md_names_exist() -> None:
    # The contract in API.md, section Errors.
    for name in [
        "HAClientError",
        "ConfigurationError",
        "IllegalStateError",
        "ClosedError",
        "ConnectionFailedError",
        "FailoverTimeoutError",
        "TransactionRolledBackError",
        "AcknowledgeFailedError",
        "BrowserFailoverError",
        "InvalidDestinationError",
        "InvalidSelectorError",
        "MessageFormatError",
        "ResourceLockedError",
        "AuthenticationError",
    ]:
        assert name in errors.__all__


@pytest.mark.parametrize("cls", ERROR_CLASSES, ids=lambda c: c.__name__)
def test_one_root(cls: type[BaseException]) -> None:
    assert issubclass(cls, HAClientError)


@pytest.mark.parametrize("cls", ERROR_CLASSES, ids=lambda c: c.__name__)
def test_no_class_shadows_a_builtin(cls: type[BaseException]) -> None:
    assert not hasattr(builtins, cls.__name__)


def test_no_connection_error_name() -> None:
    assert not hasattr(errors, "ConnectionError")
    assert not any(issubclass(cls, ConnectionError) for cls in ERROR_CLASSES)


@pytest.mark.parametrize(
    ("cls", "builtin"),
    [
        (ConfigurationError, ValueError),
        (InvalidSelectorError, ValueError),
        (IllegalStateError, RuntimeError),
        (ClosedError, RuntimeError),
        (ClientIdInUseError, RuntimeError),
        (FailoverTimeoutError, TimeoutError),
        (AttachTimeoutError, TimeoutError),
        (OpenTimeoutError, TimeoutError),
    ],
)
def test_builtin_mixins(cls: type[HAClientError], builtin: type[Exception]) -> None:
    assert issubclass(cls, builtin)
    with pytest.raises(builtin):
        raise cls("x")


def test_hierarchy() -> None:
    assert issubclass(ClosedError, IllegalStateError)
    assert issubclass(ClientIdInUseError, IllegalStateError)
    protocol_layer = (ProtocolError, ConnectionLostError, RedirectError, LinkDetachedError)
    assert all(issubclass(cls, AMQPError) for cls in protocol_layer)
    assert issubclass(AttachTimeoutError, AMQPError)
    assert issubclass(OpenTimeoutError, AMQPError)
    assert not issubclass(OpenTimeoutError, AttachTimeoutError)  # a hung broker, not a link
    # JMS-meaning errors are not AMQPError, even when a broker condition caused them.
    jms_meaning = (InvalidDestinationError, TransactionRolledBackError, AuthenticationError)
    assert not any(issubclass(cls, AMQPError) for cls in jms_meaning)
    # Where no builtin meaning matches, none is mixed in.
    assert not issubclass(ConnectionFailedError, (OSError, RuntimeError))
    assert not issubclass(NotImplementedByBrokerError, NotImplementedError)
    assert not issubclass(MessageFormatError, (ValueError, TypeError))


def test_F4_a_hung_broker_is_skipped_but_an_unanswered_attach_is_not_retried() -> None:
    # A peer that never answers the Open (or a Begin) is a hung broker: failover moves on.
    assert OpenTimeoutError("x").retriable
    # An attach left unanswered is the broker's answer to a feature (RabbitMQ): fall back.
    assert not AttachTimeoutError("x").retriable


def test_browser_failover_is_not_stop_iteration() -> None:
    assert not issubclass(BrowserFailoverError, StopIteration)

    def browse() -> Iterator[int]:
        yield 1
        raise BrowserFailoverError("failover during browse")

    seen = []
    with pytest.raises(BrowserFailoverError):
        for item in browse():  # a StopIteration here would end the loop silently
            seen.append(item)
    assert seen == [1]


# --- The table ------------------------------------------------------------------------------


@pytest.mark.parametrize("condition", SPEC_CONDITIONS)
def test_every_spec_condition_is_in_the_table(condition: str) -> None:
    rule = CONDITIONS[condition]
    assert issubclass(rule.error, HAClientError)
    assert isinstance(rule.retriable, bool)
    assert rule.summary


@pytest.mark.parametrize(("condition", "rule"), list(CONDITIONS.items()))
def test_every_rule_builds_its_class(condition: str, rule: ConditionRule) -> None:
    exc = error_from_condition(condition)
    assert type(exc) is rule.error
    assert exc.retriable is rule.retriable is is_retriable(condition)
    assert str(exc) == f"{condition}: {rule.summary}"


@pytest.mark.parametrize(
    ("condition", "cls"),
    [
        ("amqp:not-found", InvalidDestinationError),
        ("amqp:resource-deleted", InvalidDestinationError),
        ("amqp:unauthorized-access", AuthenticationError),
        ("amqp:resource-locked", ResourceLockedError),
        ("amqp:resource-limit-exceeded", ResourceLimitError),
        ("amqp:not-implemented", NotImplementedByBrokerError),
        ("amqp:illegal-state", IllegalStateError),
        ("amqp:connection:forced", ConnectionLostError),
        ("amqp:connection:framing-error", ProtocolError),
        ("amqp:decode-error", ProtocolError),
        ("amqp:session:window-violation", ProtocolError),
        ("amqp:connection:redirect", RedirectError),
        ("amqp:link:redirect", RedirectError),
        ("amqp:link:detach-forced", LinkDetachedError),
        ("amqp:link:stolen", LinkDetachedError),
        ("amqp:link:message-size-exceeded", MessageFormatError),
        ("amqp:transaction:rollback", TransactionRolledBackError),
        ("amqp:transaction:timeout", TransactionRolledBackError),
        ("amqp:transaction:unknown-id", TransactionRolledBackError),
        ("amqp:internal-error", AMQPError),
        ("com.microsoft:message-lock-lost", AcknowledgeFailedError),
    ],
)
def test_condition_classes(condition: str, cls: type[HAClientError]) -> None:
    assert type(error_from_condition(condition)) is cls


@pytest.mark.parametrize(
    ("condition", "retriable"),
    [
        ("amqp:connection:forced", True),
        ("amqp:connection:framing-error", True),
        ("amqp:connection:redirect", True),
        ("amqp:internal-error", True),
        ("amqp:resource-limit-exceeded", True),
        ("amqp:unauthorized-access", False),
        ("amqp:not-found", False),
        ("amqp:decode-error", False),
        ("amqp:invalid-field", False),
        ("amqp:not-implemented", False),
        ("amqp:link:stolen", False),
        ("amqp:transaction:rollback", False),
        ("vendor:never-heard-of-it", False),
    ],
)
def test_retriable(condition: str, retriable: bool) -> None:
    assert is_retriable(condition) is retriable
    assert error_from_condition(condition).retriable is retriable


def test_the_table_is_read_only() -> None:
    with pytest.raises(TypeError):
        CONDITIONS["amqp:not-found"] = ConditionRule(AMQPError, True, "x")  # type: ignore[index]


def test_condition_rule_is_frozen_and_validated() -> None:
    rule = ConditionRule(AMQPError, False, "x")
    with pytest.raises(dataclasses.FrozenInstanceError):
        rule.retriable = True  # type: ignore[misc]
    with pytest.raises(TypeError):
        ConditionRule(ValueError, False, "x")  # type: ignore[arg-type]


# --- error_from_condition ------------------------------------------------------------------


def test_error_from_condition_keeps_what_the_peer_said() -> None:
    info = {"address": "x"}
    exc = error_from_condition(
        "amqp:not-found",
        "queue 'x' does not exist",
        info,
        context="while attaching receiver to 'x'",
    )
    assert isinstance(exc, InvalidDestinationError)
    assert exc.condition == "amqp:not-found"
    assert exc.description == "queue 'x' does not exist"
    assert exc.info == {"address": "x"}
    assert exc.info is not info  # a copy: the caller's map may be reused
    assert str(exc) == "amqp:not-found: queue 'x' does not exist (while attaching receiver to 'x')"


def test_error_from_condition_without_description_uses_the_summary() -> None:
    exc = error_from_condition("amqp:resource-locked", context="while attaching to 'q'")
    assert exc.description is None
    assert exc.info is None
    assert str(exc) == "amqp:resource-locked: the resource is locked (while attaching to 'q')"


def test_unknown_condition() -> None:
    exc = error_from_condition("x-vendor:out-of-coffee", "no coffee", {"k": 1}, context="ctx")
    assert type(exc) is AMQPError
    assert exc.retriable is False
    assert exc.condition == "x-vendor:out-of-coffee"
    assert exc.info == {"k": 1}
    assert str(exc) == "x-vendor:out-of-coffee: no coffee (ctx)"
    assert str(error_from_condition("x-vendor:bare")) == "x-vendor:bare"
    assert is_retriable("x-vendor:out-of-coffee") is False


def test_client_id_in_use_is_refined_from_info() -> None:
    class Symbol(str):  # proton's symbol is a str subclass
        pass

    exc = error_from_condition(
        "amqp:invalid-field",
        "client id app-1 is in use",
        {Symbol("invalid-field"): Symbol("container-id")},
        context="while opening the connection",
    )
    assert type(exc) is ClientIdInUseError
    assert isinstance(exc, IllegalStateError)
    assert exc.retriable is True  # mostly our own dead connection: a failover tries again (F4)
    assert exc.condition == "amqp:invalid-field"
    # Any other invalid field stays a plain AMQPError.
    other = error_from_condition("amqp:invalid-field", "bad", {"invalid-field": "source"})
    assert type(other) is AMQPError


def test_errors_without_a_condition_have_the_same_attributes() -> None:
    exc = ClosedError("consumer is closed")
    assert (exc.condition, exc.description, exc.info, exc.retriable) == (None, None, None, False)
    assert str(exc) == "consumer is closed"


def test_a_condition_alone_makes_the_message() -> None:
    exc = InvalidDestinationError(condition="amqp:not-found", description="no queue 'q'")
    assert str(exc) == "amqp:not-found: no queue 'q'"


@given(
    condition=st.text(min_size=1, max_size=40),
    description=st.none() | st.text(max_size=40),
    context=st.none() | st.text(min_size=1, max_size=40),
)
def test_error_from_condition_never_fails(
    condition: str, description: str | None, context: str | None
) -> None:
    exc = error_from_condition(condition, description, context=context)
    assert isinstance(exc, HAClientError)
    assert exc.condition == condition
    assert exc.description == description
    assert str(exc).startswith(condition)
    assert exc.retriable is is_retriable(condition)


# --- The classes with attributes of their own -----------------------------------------------


def test_transaction_in_doubt_says_the_broker_may_have_committed() -> None:
    exc = TransactionRolledBackError(in_doubt=True)
    assert exc.in_doubt is True
    assert "broker may have committed" in str(exc)
    # Even a message chosen by the raiser keeps the warning.
    custom = TransactionRolledBackError("commit interrupted by failover", in_doubt=True)
    assert str(custom).startswith("commit interrupted by failover")
    assert "may have committed" in str(custom)


def test_transaction_not_in_doubt() -> None:
    exc = TransactionRolledBackError()
    assert exc.in_doubt is False
    assert "may have committed" not in str(exc)
    assert "rolled back" in str(exc)
    from_broker = error_from_condition("amqp:transaction:rollback", "tx 7 failed")
    assert isinstance(from_broker, TransactionRolledBackError)
    assert from_broker.in_doubt is False


def test_connection_failed_carries_the_cause() -> None:
    cause = error_from_condition("amqp:connection:forced", "broker shutting down")
    exc = ConnectionFailedError(cause=cause)
    assert exc.cause is cause
    assert exc.__cause__ is cause
    assert "failover gave up" in str(exc)
    assert "broker shutting down" in str(exc)
    assert exc.retriable is False


def test_failover_timeout() -> None:
    exc = FailoverTimeoutError(timeout=2.5)
    assert exc.timeout == 2.5
    assert "2.5" in str(exc)
    assert (exc.broker, exc.attempts) == (None, None)
    named = FailoverTimeoutError(timeout=2.0, broker="amqp://b:5672", attempts=14)
    assert str(named) == "still failing over after 2 s (attempt 14, trying amqp://b:5672)"
    with pytest.raises(TimeoutError):
        raise exc


def test_configuration_error_names_the_option() -> None:
    exc = ConfigurationError(option="failover.retries")
    assert exc.option == "failover.retries"
    assert "failover.retries" in str(exc)
    assert str(ConfigurationError("bad url")) == "bad url"


def test_not_implemented_by_broker_names_the_feature() -> None:
    exc = NotImplementedByBrokerError(
        feature="transactions", condition="amqp:not-implemented", description="no coordinator"
    )
    assert exc.feature == "transactions"
    assert (
        str(exc)
        == "the broker does not implement transactions (amqp:not-implemented: no coordinator)"
    )
    assert str(NotImplementedByBrokerError(feature="dynamic nodes")) == (
        "the broker does not implement dynamic nodes"
    )


def test_redirect_target() -> None:
    exc = error_from_condition(
        "amqp:connection:redirect",
        "go away",
        {"network-host": "10.0.0.2", "port": 5673, "hostname": "b2"},
    )
    assert isinstance(exc, RedirectError)
    assert (exc.network_host, exc.port, exc.address) == ("10.0.0.2", 5673, None)
    assert RedirectError(info={"port": "junk"}).port is None


EXAMPLES: list[HAClientError] = [
    error_from_condition("amqp:not-found", "no queue", {"a": 1}, context="ctx"),
    TransactionRolledBackError(in_doubt=True),
    ConnectionFailedError(cause=ValueError("boom")),
    FailoverTimeoutError(timeout=1.0),
    FailoverTimeoutError(timeout=2.0, broker="amqp://b:5672", attempts=14),
    ConfigurationError("bad", option="failover.retries"),
    NotImplementedByBrokerError(feature="transactions"),
    error_from_condition("amqp:connection:forced"),
    PreferredBrokerAvailable(broker="amqp://a:5672"),
]


@pytest.mark.parametrize("exc", EXAMPLES, ids=lambda e: type(e).__name__)
def test_errors_pickle_with_their_attributes(exc: HAClientError) -> None:
    # PySpark ships exceptions between processes.
    copy: Any = pickle.loads(pickle.dumps(exc))
    assert type(copy) is type(exc)
    assert str(copy) == str(exc)
    attrs = ("condition", "description", "info", "retriable", "in_doubt", "option", "timeout")
    attrs += ("broker", "attempts")
    for attr in (*attrs, "feature"):
        assert getattr(copy, attr, None) == getattr(exc, attr, None)
    assert str(getattr(copy, "cause", None)) == str(getattr(exc, "cause", None))


def test_item19_activemqs_failed_naming_a_temporary_address_is_an_invalid_destination() -> None:
    gone = "Cannot publish to a deleted Destination: temp-queue://ID:host-1-2-3:1:1"
    error = error_from_condition("failed", gone, context="while sending")
    assert isinstance(error, InvalidDestinationError) and not error.retriable
    assert "temp-queue://ID:host-1-2-3:1:1" in str(error)
    assert isinstance(
        error_from_condition("failed", gone.replace("queue", "topic")), InvalidDestinationError
    )
    other = error_from_condition("failed", "java.io.IOException: disk full")
    assert type(other) is AMQPError  # ActiveMQ's catch-all stays what it was otherwise


def test_connection_failed_names_each_broker_and_a_different_last_cause() -> None:
    a, b = OSError("refused by a"), OSError("refused by b")
    later = OSError("refused by a again")
    failures = {"amqp://a:5672": a, "amqp://b:5672": b}
    assert str(ConnectionFailedError(cause=b, failures=failures)) == (
        "failover gave up; the last failure of each broker: amqp://a:5672: refused by a; "
        "amqp://b:5672: refused by b"
    )
    assert str(ConnectionFailedError(cause=later, failures=failures)).endswith(
        "; last failure: refused by a again"
    )
    # A cause raised from one of the failures (a summary of them) is not told twice.
    summary = AuthenticationError("every broker refused the connection: ...")
    summary.__cause__ = b
    assert "every broker refused" not in str(
        ConnectionFailedError(cause=summary, failures=failures)
    )
