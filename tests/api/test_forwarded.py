"""``Forwarded``: the blocking facade's properties that are an attribute of the async object."""

from __future__ import annotations

import inspect
from types import SimpleNamespace

import pytest

from haclient.sync._forward import Forwarded


class Facade:
    limit = Forwarded[int]("_inner", "How many at most.", settable=True)
    name = Forwarded[str]("_inner", "What it is called.")

    def __init__(self, inner: SimpleNamespace) -> None:
        self._inner = inner


def test_reading_reads_the_wrapped_objects_attribute_of_the_same_name() -> None:
    inner = SimpleNamespace(limit=3, name="a")
    facade = Facade(inner)
    inner.limit = 7
    assert (facade.limit, facade.name) == (7, "a")


def test_a_settable_one_writes_through_to_the_wrapped_object() -> None:
    inner = SimpleNamespace(limit=3, name="a")
    Facade(inner).limit = 9
    assert inner.limit == 9


def test_a_read_only_one_refuses_a_write_by_name() -> None:
    facade = Facade(SimpleNamespace(limit=3, name="a"))
    with pytest.raises(AttributeError, match="name"):
        facade.name = "b"


def test_it_is_a_property_with_its_own_docstring() -> None:
    member = inspect.getattr_static(Facade, "limit")
    assert isinstance(member, property)
    assert inspect.getdoc(member) == "How many at most."
    assert inspect.getattr_static(Facade, "name").fset is None
