"""Who the engine's changes are by (store/revisions.py ``CHANGER``), for the revisions they write:
the transport names each call's surface and token; the hot path keeps a fast write's with it
until a worker applies it; the expiry sweep is its own."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache

from mnemosyne.store.revisions import CHANGER, Changer

# The expiry sweep's erasures (engine/expiry.py), and the background consolidator's records.
EXPIRY_SWEEP = Changer("expiry", "")
CONSOLIDATOR = Changer("consolidator", "")

__all__ = ["CONSOLIDATOR", "EXPIRY_SWEEP", "Changer", "changes_by", "current", "set_changer"]


def set_changer(surface: str, token_name: str) -> None:
    """The calls of this task (or thread) from here on are by ``token_name`` through ``surface``."""
    CHANGER.set(_changer(surface, token_name))


# Every call sets its changer, and a Changer made anew runs a NamedTuple's Python ``__new__``;
# surfaces are a handful and token names the operator's.
@lru_cache(maxsize=1024)
def _changer(surface: str, token_name: str) -> Changer:
    return Changer(surface, token_name)


def current() -> Changer:
    return CHANGER.get()


@contextmanager
def changes_by(changer: Changer) -> Iterator[None]:
    """Changes made inside are by ``changer``."""
    token = CHANGER.set(changer)
    try:
        yield
    finally:
        CHANGER.reset(token)
