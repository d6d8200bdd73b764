"""A small explicit registry of named builders.

Builders are registered by explicit calls in the module that owns the registry (never as an
import side effect), and registering a name twice is an error.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class Registry(Generic[T]):
    """A mapping from names to builder functions.

    Example:
        >>> reg = Registry("toy")
        >>> reg.register("one", lambda: 1)
        >>> reg.get("one")()
        1
    """

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._items: dict[str, Callable[..., T]] = {}

    def register(self, name: str, builder: Callable[..., T]) -> None:
        """Registers `builder` under `name`.

        Raises:
            ValueError: if `name` is already registered.
        """
        if name in self._items:
            raise ValueError(f"{self.kind} {name!r} is already registered")
        self._items[name] = builder

    def get(self, name: str) -> Callable[..., T]:
        """Returns the builder for `name`.

        Raises:
            ValueError: naming the unknown value and listing the known names.
        """
        try:
            return self._items[name]
        except KeyError:
            known = ", ".join(sorted(self._items))
            raise ValueError(f"unknown {self.kind} {name!r}; known: {known}") from None

    def names(self) -> list[str]:
        """Returns the registered names, sorted."""
        return sorted(self._items)

    def __contains__(self, name: object) -> bool:
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def build(self, name: str, **kwargs: Any) -> T:
        """Calls the builder registered as `name` with keyword arguments."""
        return self.get(name)(**kwargs)
