"""F14: the names a failover listener is called by, haclient's and Qpid JMS's
(``failover.listeners``), alone and through the manager (on its fakes, in virtual time)."""

from __future__ import annotations

import re
from pathlib import Path

import anyio
import pytest
from test_failover_manager import HANG, Network, make, running, until
from unitkit import A, B, S

from failover.listeners import CALLS, ConnectionListener, FailoverEvent, Listeners
from failover.policy import FailoverMethod, FailoverPolicy
from failover.protocols import FailoverListener
from failover.url import BrokerURL
from haclient.errors import ConnectionFailedError, ConnectionLostError
from haclient.sync._facts import FailoverRelay as _ThreadedFailoverListener

API_MD = Path(__file__).resolve().parents[2] / "docs" / "api.md"

JMS_NAMES = (
    "on_connection_established",
    "on_connection_interrupted",
    "on_connection_restored",
    "on_connection_failure",
)


class Both(FailoverListener, ConnectionListener):
    """Has every name of both protocols; records each call with its arguments."""

    def __init__(self, log: list[tuple[object, ...]] | None = None) -> None:
        self.log: list[tuple[object, ...]] = [] if log is None else log

    def failover_started(self, cause: BaseException) -> None:
        self.log.append(("failover_started", cause))

    def failover_completed(self, broker: BrokerURL, downtime: float) -> None:
        self.log.append(("failover_completed", broker, downtime))

    def failover_failed(self, cause: BaseException) -> None:
        self.log.append(("failover_failed", cause))

    def resource_not_restored(self, resource: object, error: BaseException) -> None:
        self.log.append(("resource_not_restored", resource, error))

    def on_connection_established(self, broker: BrokerURL) -> None:
        self.log.append(("on_connection_established", broker))

    def on_connection_interrupted(self, broker: BrokerURL) -> None:
        self.log.append(("on_connection_interrupted", broker))

    def on_connection_restored(self, broker: BrokerURL) -> None:
        self.log.append(("on_connection_restored", broker))

    def on_connection_failure(self, error: BaseException) -> None:
        self.log.append(("on_connection_failure", error))


class JavaPort(ConnectionListener):
    """Only Qpid JMS's names, as a port of a Java ``JmsConnectionListener`` has."""

    def __init__(self) -> None:
        self.log: list[tuple[str, object]] = []

    def on_connection_established(self, broker: BrokerURL) -> None:
        self.log.append(("established", broker))

    def on_connection_interrupted(self, broker: BrokerURL) -> None:
        self.log.append(("interrupted", broker))

    def on_connection_restored(self, broker: BrokerURL) -> None:
        self.log.append(("restored", broker))

    def on_connection_failure(self, error: BaseException) -> None:
        self.log.append(("failure", error))


# --- The table, alone ------------------------------------------------------------------------


def test_F14_each_event_calls_haclients_name_then_qpid_jms_with_their_own_arguments() -> None:
    log: list[tuple[object, ...]] = []
    listeners = Listeners()
    listeners.add(Both(log))
    cause = ConnectionLostError("gone")
    listeners.tell(FailoverEvent.ESTABLISHED, broker=A)
    listeners.tell(FailoverEvent.INTERRUPTED, broker=A, cause=cause)
    listeners.tell(FailoverEvent.RESTORED, broker=B, downtime=0.5)
    listeners.tell(FailoverEvent.FAILED, cause=cause)
    listeners.tell(FailoverEvent.CONNECT_FAILED, cause=cause)
    listeners.tell(FailoverEvent.NOT_RESTORED, resource="r", error=cause)
    assert log == [
        ("on_connection_established", A),
        ("failover_started", cause),
        ("on_connection_interrupted", A),
        ("failover_completed", B, 0.5),
        ("on_connection_restored", B),
        ("failover_failed", cause),
        ("on_connection_failure", cause),
        ("on_connection_failure", cause),
        ("resource_not_restored", "r", cause),
    ]


def test_F14_every_listener_hears_an_event_by_all_its_names_before_the_next_listener() -> None:
    log: list[tuple[object, ...]] = []
    listeners = Listeners()
    first, second = Both(log), Both(log)
    listeners.add(first)
    listeners.add(second)
    listeners.tell(FailoverEvent.RESTORED, broker=B, downtime=1.0)
    assert [name for name, *_ in log] == ["failover_completed", "on_connection_restored"] * 2


def test_F14_a_raising_qpid_jms_callback_is_logged_and_the_rest_are_called(
    caplog: pytest.LogCaptureFixture,
) -> None:
    class Boom:
        def on_connection_interrupted(self, broker: BrokerURL) -> None:
            raise RuntimeError("listener bug: interrupted")

    after = JavaPort()
    listeners = Listeners()
    listeners.add(Boom())
    listeners.add(after)
    listeners.tell(FailoverEvent.INTERRUPTED, broker=A, cause=OSError("x"))
    assert after.log == [("interrupted", A)]
    assert "listener bug: interrupted" in caplog.text


def test_F14_a_listener_whose_attributes_raise_is_logged_and_the_rest_are_called(
    caplog: pytest.LogCaptureFixture,
) -> None:
    class Odd:  # a proxy or mock whose lookup of a name raises something else than AttributeError
        def __getattr__(self, name: str) -> object:
            raise RuntimeError(f"listener bug: no {name}")

    after = JavaPort()
    listeners = Listeners()
    listeners.add(Odd())
    listeners.add(after)
    listeners.tell(FailoverEvent.INTERRUPTED, broker=A, cause=OSError("x"))
    listeners.notify("send_failed", None, "ID:1", OSError("y"))
    assert after.log == [("interrupted", A)]
    assert "listener bug: no on_connection_interrupted" in caplog.text


def test_F14_every_qpid_jms_name_is_in_the_table_and_the_protocol() -> None:
    names = {name for calls in CALLS.values() for name, _ in calls}
    assert set(JMS_NAMES) <= names
    for name in JMS_NAMES:
        assert callable(getattr(ConnectionListener, name))
    assert set(CALLS) == set(FailoverEvent)


def test_F14_the_blocking_wrapper_forwards_every_name_of_the_table() -> None:
    names = {name for calls in CALLS.values() for name, _ in calls}
    for name in names:
        assert callable(getattr(_ThreadedFailoverListener, name, None)), name


def test_F14_api_md_maps_each_qpid_jms_name_to_the_one_haclient_calls() -> None:
    """docs/api.md's table row for each Java method names the snake-case method CALLS has."""
    text = API_MD.read_text(encoding="utf-8")
    for name in JMS_NAMES:
        java = "on" + "".join(part.capitalize() for part in name.split("_")[1:])
        row = re.search(rf"^\| `{java}\(.*$", text, re.MULTILINE)
        assert row is not None, f"docs/api.md has no row for {java}"
        assert f"`{name}(" in row.group(0)


# --- Through the manager ---------------------------------------------------------------------


@pytest.mark.anyio
async def test_F14_a_listener_added_before_start_hears_established_once() -> None:
    network = Network()
    port = JavaPort()
    with anyio.fail_after(HANG):
        async with make(network, [A, B]) as manager:
            manager.add_listener(port)
            network.down = {"a"}
            await manager.start()
            assert port.log == [("established", B)]  # before start() returned
            connection, _ = await manager.wait_connected()
            network.down = set()
            connection.drop()
            await until(lambda: len(port.log) == 3)
    assert port.log == [("established", B), ("interrupted", B), ("restored", A)]


@pytest.mark.anyio
async def test_F14_interrupted_and_restored_pair_with_started_and_completed() -> None:
    network = Network()
    log: list[tuple[object, ...]] = []
    async with running(network, [A, B]) as manager:
        manager.add_listener(Both(log))
        network.last.drop(ConnectionLostError("a died"))
        await until(lambda: len(log) == 4)
        assert manager.state is S.CONNECTED
    started, interrupted, completed, restored = log
    assert started[0] == "failover_started" and interrupted == ("on_connection_interrupted", A)
    assert completed[:2] == ("failover_completed", B) and restored == ("on_connection_restored", B)


@pytest.mark.anyio
async def test_F14_failure_is_heard_when_failover_gives_up_or_is_off() -> None:
    network = Network()
    gave_up, off = JavaPort(), JavaPort()
    policy = FailoverPolicy(cyclecount=1, connect_delay=0.0)
    async with running(network, [A, B], policy) as manager:
        manager.add_listener(gave_up)
        network.down = {"a", "b"}
        network.last.drop()
        await until(lambda: manager.state is S.FAILED)
    assert [name for name, _ in gave_up.log] == ["interrupted", "failure"]
    assert "connection refused" in str(gave_up.log[1][1])
    nofailover = FailoverPolicy(method=FailoverMethod.NOFAILOVER)
    async with running(Network(), [A], nofailover) as manager:
        manager.add_listener(off)
        cause = ConnectionLostError("dropped")
        (await manager.wait_connected())[0].drop(cause)
        await until(lambda: manager.state is S.FAILED)
    assert off.log == [("failure", cause)]  # no interruption: nothing fails over


@pytest.mark.anyio
async def test_F14_failure_is_heard_when_the_first_connect_gives_up() -> None:
    network = Network(down={"a"})
    port = JavaPort()
    with anyio.fail_after(HANG):
        async with make(network, [A], FailoverPolicy(cyclecount=1, connect_delay=0.0)) as manager:
            manager.add_listener(port)
            with pytest.raises(ConnectionFailedError):
                await manager.start()
    assert [name for name, _ in port.log] == ["failure"]
    assert "connection refused by a" in str(port.log[0][1])


@pytest.mark.anyio
async def test_F14_nothing_is_heard_after_close() -> None:
    port = JavaPort()
    async with running(Network(), [A]) as manager:
        manager.add_listener(port)
        await manager.close()
    assert port.log == []
