"""A small explicit registry of named builders, each tagged with the task it serves.

Builders are registered by explicit calls in the module that owns the registry (never as an
import side effect), and registering a name twice is an error.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class Registry(Generic[T]):
    """A mapping from names to builder functions, with an optional task tag per name.

    Example:
        >>> reg = Registry("toy")
        >>> reg.register("one", lambda: 1, task="counting")
        >>> reg.get("one")()
        1
        >>> reg.names(task="counting"), reg.task_of("one")
        (['one'], 'counting')
    """

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._items: dict[str, Callable[..., T]] = {}
        self._tasks: dict[str, str | None] = {}

    def register(self, name: str, builder: Callable[..., T], *, task: str | None = None) -> None:
        """Registers `builder` under `name`, serving `task` (e.g. "classification").

        Raises:
            ValueError: if `name` is already registered.
        """
        if name in self._items:
            raise ValueError(f"{self.kind} {name!r} is already registered")
        self._items[name] = builder
        self._tasks[name] = task

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

    def task_of(self, name: str) -> str | None:
        """The task `name` was registered for (ValueError for an unknown name)."""
        self.get(name)
        return self._tasks[name]

    def names(self, task: str | None = None) -> list[str]:
        """The registered names, sorted; only those of `task` when given.

        Raises:
            ValueError: for a `task` no name is registered for (listing the known tasks).
        """
        if task is None:
            return sorted(self._items)
        tasks = {t for t in self._tasks.values() if t is not None}
        if task not in tasks:
            raise ValueError(f"unknown task {task!r}; known: {', '.join(sorted(tasks))}")
        return sorted(n for n, t in self._tasks.items() if t == task)

    def __contains__(self, name: object) -> bool:
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def build(self, name: str, **kwargs: Any) -> T:
        """Calls the builder registered as `name` with keyword arguments."""
        return self.get(name)(**kwargs)
