"""What the engine keeps in memory for one open tenant (its vector index, its postings, its
approximate index, its hot-path flag): ``TenantStore.cache``, dropped when the store closes.

Each kind of value lives under a typed key (``CacheKey[T]``, defined by the module that makes the
value), so a reader gets the type its maker put there, checked by mypy, and the store knows
nothing of the engine's types."""

from __future__ import annotations

from typing import Any, Generic, TypeVar, cast

T = TypeVar("T")


class CacheKey(Generic[T]):
    """The key of one kind of value in a tenant's cache; ``T`` is the value's type."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"CacheKey({self.name!r})"


class TenantCache:
    """One open tenant's values by typed key. Each operation is atomic (one dict operation under
    the GIL): of two threads making the same value, ``setdefault`` keeps the first's."""

    def __init__(self) -> None:
        self._values: dict[CacheKey[Any], Any] = {}

    def get(self, key: CacheKey[T]) -> T | None:
        return cast("T | None", self._values.get(key))

    def setdefault(self, key: CacheKey[T], value: T) -> T:
        """The value under ``key``, ``value`` put there first when there is none."""
        return cast(T, self._values.setdefault(key, value))

    def __setitem__(self, key: CacheKey[T], value: T) -> None:
        self._values[key] = value

    def clear(self) -> None:
        self._values.clear()
