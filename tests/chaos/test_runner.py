"""The matrix runner's own bookkeeping (``chaos.scenarios.runner``)."""

from __future__ import annotations

from chaos.scenarios.runner import _leaves
from haclient.errors import InvalidDestinationError


def test_a_dead_workload_is_written_down_by_the_exceptions_inside_its_task_group() -> None:
    inner = InvalidDestinationError("amqp:not-found: no node 'tmp-1'")
    group = ExceptionGroup("outer", [ExceptionGroup("inner", [inner]), KeyError("k")])
    assert [type(leaf) for leaf in _leaves(group)] == [InvalidDestinationError, KeyError]
    assert _leaves(group)[0] is inner
    assert _leaves(inner) == [inner]
