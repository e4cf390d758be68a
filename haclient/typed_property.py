"""``TypedProperty``: a ``property`` built from functions, which a type checker reads as ``T``.

``x = property(read)`` in a class body is a property to Python and ``Any`` to a type checker.
``x = TypedProperty[int](read, doc="...")`` is the same property to Python (its C descriptor
does the work, nothing is added per access) and an ``int`` attribute to a type checker. The
blocking facade's forwarded attributes and the codec's message fields are made this way.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Generic, TypeVar, overload

__all__ = ["TypedProperty"]

T = TypeVar("T")


class TypedProperty(property, Generic[T]):
    """A property of type ``T``: ``read(obj)`` gives its value, ``write(obj, value)`` (if any)
    sets it; ``doc`` is its docstring."""

    def __init__(
        self,
        read: Callable[[Any], T],
        write: Callable[[Any, T], None] | None = None,
        *,
        doc: str,
    ) -> None:
        super().__init__(read, write, None, doc)
        self.__doc__ = doc  # a subclass's own docstring would hide property's doc slot

    if TYPE_CHECKING:  # what a type checker sees; at run time property's own descriptor works

        @overload
        def __get__(self, instance: None, owner: type | None = None, /) -> TypedProperty[T]: ...

        @overload
        def __get__(self, instance: object, owner: type | None = None, /) -> T: ...

        def __get__(self, instance: object, owner: type | None = None, /) -> Any: ...

        def __set__(self, instance: object, value: T, /) -> None: ...
