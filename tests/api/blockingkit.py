"""What the blocking API's tests share: a failover listener that a test can wait on."""

from __future__ import annotations

import concurrent.futures
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


class FailoverSeen:
    """A failover listener whose ``started`` event is set once the connection lost its broker."""

    def __init__(self) -> None:
        self.started = threading.Event()

    def failover_started(self, cause: BaseException) -> None:
        self.started.set()


def on_loop(conn: Any, fn: Callable[[], T], timeout: float = 10.0) -> T:
    """For tests only: run ``fn()`` on ``conn``'s event-loop thread and return its result (the
    library itself never passes a function to that thread)."""
    loop = conn._boundary.loop_thread.loop
    assert loop is not None
    future: concurrent.futures.Future[T] = concurrent.futures.Future()

    async def run() -> None:  # in a task of its own, as anyio's functions expect
        try:
            future.set_result(fn())
        except BaseException as exc:
            future.set_exception(exc)

    context = conn._boundary.loop_thread._context  # the loop's own (anyio's backend is known)
    loop.call_soon_threadsafe(lambda: loop.create_task(run(), context=context.copy()))
    return future.result(timeout)


def loop_object(conn: Any, facade: Any) -> Any:
    """For tests only, on the loop: the async object behind the blocking ``facade``."""
    from haclient.sync._served import Serving

    served = Serving.of(conn._boundary.loop_thread, conn._boundary)
    assert served is not None
    return served.objects[facade._handle]


def loop_lane(conn: Any, producer: Any) -> Any:
    """For tests only, on the loop: the lane of the blocking ``producer``."""
    from haclient.sync._served import Serving

    served = Serving.of(conn._boundary.loop_thread, conn._boundary)
    assert served is not None
    return served.lanes[producer._handle]


def until_on_loop(conn: Any, condition: Callable[[], object], what: str, timeout: float) -> None:
    """For tests only: poll ``condition()`` on ``conn``'s event-loop thread until it holds (the
    loop's state has no event a test could wait on); fail naming ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    while not on_loop(conn, condition):
        assert time.monotonic() < deadline, what
        time.sleep(0.005)
