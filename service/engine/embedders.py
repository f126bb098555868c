"""Which embedder makes and reads each tenant's vectors.

A tenant keeps the embedder it was created with: its file records the embedder of its first write
(``check_tenant_embedder``), and every later write, recall and dedup of that tenant uses that one,
whatever the server's ``--embedder``, which only chooses the embedder of new tenants (and of
tenants that have no vector yet). Moving a tenant to another embedder is ``mnemosyne reembed``'s
job (engine/reembed.py). Each embedder loads once per process, on first use, and is shared: a
model's weights are held once however many engines or tenants use it.
"""

from __future__ import annotations

import threading

from mnemosyne.engine.embedder import Embedder, HashingEmbedder
from mnemosyne.engine.sentence_embedder import MiniLMEmbedder
from mnemosyne.errors import FailedPrecondition, InvalidArgument
from mnemosyne.store.reembed_rows import REEMBED_META
from mnemosyne.store.tenant_cache import CacheKey
from mnemosyne.store.tenant_store import ReadTxn, TenantStore

EMBEDDERS = ("minilm", "hashing")
DEFAULT_EMBEDDER = "minilm"
# The name a tenant's file records ("<name>/<dim>") -> the embedder's configuration name.
_RECORDED = {MiniLMEmbedder.name: "minilm", HashingEmbedder.name: "hashing"}
_KINDS: dict[str, type[Embedder]] = {"minilm": MiniLMEmbedder, "hashing": HashingEmbedder}
_LOADED: dict[str, Embedder] = {}
_LOADING = threading.Lock()
_CACHE_KEY: CacheKey[Embedder] = CacheKey("embedder")
# The embedder a re-embedding in progress moves the tenant to, in a tuple: (None,) when none runs.
_TARGET_KEY: CacheKey[tuple[Embedder | None]] = CacheKey("reembed-target")


def make_embedder(name: str) -> Embedder:
    """The embedder of that configuration name (``--embedder``/MNEMOSYNE_EMBEDDER): MiniLM (its
    model installed with the package) or the model-free hashing one; loaded once per process."""
    kind = _KINDS.get(name)
    if kind is None:
        raise InvalidArgument(
            # A client's text: shown clipped, so the error stays within any header's limit.
            f"unknown embedder {name[:80]!r}; choose one of {', '.join(EMBEDDERS)}",
            reason="EMBEDDER_UNKNOWN",
        )
    with _LOADING:
        loaded = _LOADED.get(name)
        if loaded is None:
            loaded = _LOADED[name] = kind()
    return loaded


def configuration_name(recorded: str) -> str:
    """The configuration name of the embedder a tenant's file records (``hashing-v2/384`` ->
    ``hashing``); FailedPrecondition for one this version does not run."""
    name = _RECORDED.get(recorded.rsplit("/", 1)[0])
    if name is None or make_embedder(name).recorded != recorded:
        raise FailedPrecondition(
            f"this tenant's vectors were made by embedder {recorded}, which this server does not run "
            f"(it runs {', '.join(EMBEDDERS)}); re-embed it with a version that does",
            reason="EMBEDDER_MISMATCH",
        )
    return name


class TenantEmbedders:
    """The embedder of each tenant: the one its file records, else the one new tenants get."""

    def __init__(self, default: str | Embedder) -> None:
        self.default = make_embedder(default) if isinstance(default, str) else default

    def of(self, store: TenantStore) -> Embedder:
        """The tenant's embedder (cached on its open store; ``moved`` changes it)."""
        known = store.cache.get(_CACHE_KEY)
        if known is not None:
            return known
        return self._load(store)[0]

    def moving_to(self, store: TenantStore) -> Embedder | None:
        """The embedder a re-embedding of the tenant moves it to (engine/reembed.py), None when
        none runs: a write embeds with it too. Read with the tenant's own embedder, once per open
        store (``moving`` changes it), so a write costs nothing more while no move runs."""
        known = store.cache.get(_TARGET_KEY)
        if known is not None:
            return known[0]
        return self._load(store)[1]

    def _load(self, store: TenantStore) -> tuple[Embedder, Embedder | None]:
        """Both cached values of the tenant, read from its file in one read."""
        with store.read() as txn:
            recorded, moving_to = txn.meta("embedder"), txn.meta(REEMBED_META)
        embedder = self.default if recorded is None else make_embedder(configuration_name(recorded))
        target = store.cache.setdefault(_TARGET_KEY, (_runnable(moving_to),))[0]
        return store.cache.setdefault(_CACHE_KEY, embedder), target

    def follow(self, store: TenantStore, recorded: str) -> None:
        """The tenant's embedder is the one its file records now (``recorded``, read in a write's
        transaction): a re-embedding's switch committed since this store cached another."""
        store.cache[_CACHE_KEY] = make_embedder(configuration_name(recorded))

    def switched(self, store: TenantStore, txn: ReadTxn, embedder: Embedder) -> bool:
        """Inside a read of the tenant that took ``embedder`` from the store before it began:
        whether a re-embedding's switch committed in between (the file records another, one this
        version runs). The store then follows the file, and the read is made again by ``of``:
        its vectors by ``embedder`` are not comparable with the tenant's. False for one this
        version does not run: ``check_tenant_embedder`` refuses it."""
        recorded = txn.meta("embedder")
        if recorded is None or recorded == embedder.recorded or _runnable(recorded) is None:
            return False
        self.follow(store, recorded)
        return True

    @staticmethod
    def moving(store: TenantStore, target: Embedder) -> None:
        """After the commit that began a re-embedding of the tenant to ``target``."""
        store.cache[_TARGET_KEY] = (target,)

    @staticmethod
    def moved(store: TenantStore, embedder: Embedder) -> None:
        """After the commit that recorded ``embedder`` as the tenant's (a re-embedding's last)."""
        store.cache[_CACHE_KEY] = embedder
        store.cache[_TARGET_KEY] = (None,)


def _runnable(recorded: str | None) -> Embedder | None:
    """The embedder of a recorded "<name>/<dim>", None for none or one this version does not run
    (a move to it cannot go on here: its step refuses it)."""
    try:
        return None if recorded is None else make_embedder(configuration_name(recorded))
    except FailedPrecondition:
        return None
