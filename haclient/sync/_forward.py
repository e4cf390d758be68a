"""Properties of a blocking object that are the same attribute of the async object it wraps.

A blocking ``MessageProducer`` keeps its async producer in ``_producer``; its ``priority`` is
that producer's ``priority``. ``Forwarded`` says so in one line instead of a getter (and a
setter) per attribute::

    priority = Forwarded[int]("_producer", "Default priority, 0-9 (4).", settable=True)

It is a ``property`` (so ``help()``, ``inspect`` and the API parity test see one), typed for a
type checker by the attribute's type.
"""

from __future__ import annotations

from typing import TypeVar

from haclient.typed_property import TypedProperty

__all__ = ["Forwarded"]

T = TypeVar("T")


class Forwarded(TypedProperty[T]):
    """A property that reads (and, when ``settable``, writes) the attribute of the same name
    on the object kept in the owner's attribute ``wrapped``. Reading it is reading that
    attribute: what it promises during failover is what the async attribute promises."""

    def __init__(self, wrapped: str, doc: str, *, settable: bool = False) -> None:
        self._wrapped = wrapped
        self._name = ""
        super().__init__(self._read, self._write if settable else None, doc=doc)

    def __set_name__(self, owner: type, name: str) -> None:
        # property's own __set_name__ (typeshed lacks it) makes its errors name the attribute
        super().__set_name__(owner, name)  # type: ignore[misc]
        self._name = name

    def _read(self, facade: object) -> T:
        value: T = getattr(getattr(facade, self._wrapped), self._name)
        return value

    def _write(self, facade: object, value: T) -> None:
        setattr(getattr(facade, self._wrapped), self._name, value)
