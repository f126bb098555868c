"""A LangGraph store kept by Mnemosyne: ``MnemosyneStore``, a ``BaseStore`` bound to one tenant
(extra ``langgraph``; docs/integrations.md says what it keeps, what it refuses and why).

The store's contract is LangGraph's, not the memory contract, so this module honours the store's:

* ``batch``/``abatch`` are the primitives (``get``, ``put``, ``search``... are BaseStore's, over
  them). As in LangGraph's ``InMemoryStore``, a batch's reads see the store as it was before the
  batch, and of several puts of one (namespace, key) in a batch the last one wins.
* An item is one memory of the tenant, in its Global scope (items are memories, never records:
  records keep the host-owned generation rules). ``put`` upserts by (namespace, key): the memory
  holding that address is updated in place (its earlier value kept as an earlier version, erased
  with it), a ``None`` value forgets it. The same value under two keys is two items: a memory's
  text is the value's JSON followed by a line naming a digest of its address, so the server's
  exact-duplicate rule (one fingerprint per normalised text) never folds two addresses into one.
* A namespace is any tuple of labels without "." (BaseStore's rule). It is kept in the memory's
  metadata, never as a tenant: ``langgraph.namespace`` (the labels joined by "."), ``langgraph.key``
  and an index of its prefixes, ``langgraph.prefix.<n>`` holding the first n labels (n from 0), so
  a search of a prefix is one metadata filter the server applies.
* ``search`` with a query goes through Recall (its best hits of the prefix, as many as the
  server's ``max_k`` gives: 100 unless its operator set fewer), its ``filter`` then applied to the
  values; without a query, the prefix's items in the order they were first put. ``list_namespaces``
  reads the items under the longest literal prefix of its conditions. Listings page through at
  the server's ``max_page_size``. The store asks for the protocol's most (``MAX_K``,
  ``MAX_PAGE_SIZE``) until a server with a lower cap refuses it naming its cap (the ErrorInfo's
  ``limit``), then asks for that (``_ServerCap``): a lower cap never fails a search or a listing.
* ``supports_ttl`` is False: a put with a TTL is refused. The tenant's expiry policy applies to
  items as to any memory (docs/expiry.md); a put after an item expired makes it anew (``_put``).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from functools import partial
from typing import Any, TypeVar

from langgraph.store.base import (
    BaseStore,
    GetOp,
    InvalidNamespaceError,
    Item,
    ListNamespacesOp,
    MatchCondition,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
    validate_op_namespace,
)

from mnemosyne.client import MemoryClient
from mnemosyne.client.errors import FailedPreconditionError, InvalidArgumentError, NotFoundError
from mnemosyne.client.types import Memory, MemoryPage
from mnemosyne.host.protocol import MAX_K, MAX_PAGE_SIZE, usable_query
from mnemosyne.host.unicode import lone_surrogate

NAMESPACE_KEY = "langgraph.namespace"
KEY_KEY = "langgraph.key"
PREFIX_KEY = "langgraph.prefix.{}"
# The address line that ends every item's text (see the module's docstring): a digest, not the
# address itself, so that no key or label reaches the embeddings or the full-text index.
ADDRESS_LINE = "langgraph:{}"

Address = tuple[tuple[str, ...], str]
T = TypeVar("T")


class _ServerCap:
    """The most one server gives of a size the store asks for at its most (a recall's k, a
    page's size): the protocol's maximum until the server refuses a size with ``reason`` naming
    its lower cap (ErrorInfo metadata ``limit``, engine/limits.py); from then on, that cap."""

    def __init__(self, reason: str, most: int) -> None:
        self.reason = reason
        self.most = most

    def ask(self, call: Callable[[int], T], wanted: int) -> T:
        """``call``'s answer for ``wanted`` (at most the cap known), asked again at the server's
        cap when it refuses ``wanted`` as over it."""
        while True:
            size = max(1, min(wanted, self.most))
            try:
                return call(size)
            except InvalidArgumentError as error:
                limit = error.metadata.get("limit", "")
                if error.reason != self.reason or not limit.isdigit() or not 0 < int(limit) < size:
                    raise
                self.most = int(limit)


class MnemosyneStore(BaseStore):
    """A LangGraph ``BaseStore`` whose items are memories of ``tenant``, reached through
    ``client`` (a ``MemoryClient``; its token must name the tenant). Give it to a graph
    (``builder.compile(store=store)``) or use it directly (``store.put``, ``store.search``...).

    Puts made through one store are applied one at a time; two processes putting the same new
    address at the same instant may both create it: reads then see the newest, and the next put
    of that address forgets the other. Errors are the client's (``mnemosyne.client.errors``):
    ``InvalidArgumentError`` for a value whose JSON is too long (TEXT_TOO_LONG: the server's
    --max-text-chars less the 31 characters of the address line) or a namespace too
    deep or too long for the metadata (METADATA_INVALID), ``PermissionDeniedError`` for a token
    that does not name the tenant; a namespace LangGraph forbids raises ``InvalidNamespaceError``,
    a TTL ``NotImplementedError``, a key that is no string or a namespace no tuple ``TypeError``."""

    supports_ttl = False

    def __init__(self, client: MemoryClient, tenant: str) -> None:
        self.client = client
        self.tenant = tenant
        self._puts = threading.Lock()
        self._k = _ServerCap("K_OUT_OF_RANGE", MAX_K)
        self._page_size = _ServerCap("PAGE_SIZE_OUT_OF_RANGE", MAX_PAGE_SIZE)

    # -- the primitives ---------------------------------------------------------------------------

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Run ``ops`` and return one result per op, in order: every op is checked (and every
        value made into its text) before any runs; reads run first, against the store as it was,
        then the puts (the last of each address), one by one: one the server refuses stops the
        batch, the puts before it stay."""
        ops = list(ops)
        for op in ops:
            _check(op)
        puts = {(op.namespace, op.key): op for op in ops if isinstance(op, PutOp)}
        texts = {address: None if op.value is None else _text(*address, op.value) for address, op in puts.items()}
        results = [None if isinstance(op, PutOp) else self._read(op) for op in ops]
        with self._puts:
            for address, text in texts.items():
                self._put(*address, text)
        return results

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """``batch`` on a worker thread: the client's calls block, the event loop does not."""
        return await asyncio.to_thread(self.batch, list(ops))

    # -- reads --------------------------------------------------------------------------------------

    def _read(self, op: Op) -> Result:
        if isinstance(op, GetOp):
            found = list(self._each({NAMESPACE_KEY: _joined(op.namespace), KEY_KEY: op.key}))
            return _item(_newest(found)) if found else None
        if isinstance(op, SearchOp):
            return self._search(op)
        if isinstance(op, ListNamespacesOp):
            return self._list_namespaces(op)
        raise ValueError(f"unknown operation {type(op).__name__}")

    def _search(self, op: SearchOp) -> list[SearchItem]:
        within = {PREFIX_KEY.format(len(op.namespace_prefix)): _joined(op.namespace_prefix)}
        wanted = op.offset + op.limit
        found: list[tuple[Memory, float | None]] = []
        query = usable_query(op.query)
        if query:
            # Filters apply to values the server does not index: ask for the most it gives then.
            k = MAX_K if op.filter else wanted
            try:
                hits = self._k.ask(lambda k: self.client.recall(self.tenant, query, k=k, filters=within), k)
            except InvalidArgumentError as error:
                if error.reason == "METADATA_INVALID":
                    return []  # a prefix past the metadata limits: no item is under it
                if not error.reason.startswith("QUERY_"):
                    raise
                hits = []  # a query the server takes nothing of (only white space): the items in order
            found = [(h.memory, h.score) for h in hits]
        items = [(memory, score) for memory, score in _current(found) if _matches(_value(memory), op.filter)]
        if len(items) < wanted:
            # A query orders the prefix's items, it does not drop them (as LangGraph's stores):
            # those Recall did not find follow, unscored, in the order they were put.
            recalled = {memory.id for memory, _ in found}
            rest = [(m, None) for m in self._each(within) if m.id not in recalled]
            items += [(memory, score) for memory, score in _current(rest) if _matches(_value(memory), op.filter)]
        return [_search_item(memory, score) for memory, score in items[op.offset : wanted]]

    def _list_namespaces(self, op: ListNamespacesOp) -> list[tuple[str, ...]]:
        literal: tuple[str, ...] = ()
        for condition in op.match_conditions or ():
            if condition.match_type == "prefix":
                head = tuple(condition.path[: next((i for i, p in enumerate(condition.path) if p == "*"), None)])
                literal = head if len(head) > len(literal) else literal
        namespaces = {_address(m)[0] for m in self._each({PREFIX_KEY.format(len(literal)): _joined(literal)})}
        kept = [ns for ns in namespaces if all(_namespace_matches(c, ns) for c in op.match_conditions or ())]
        if op.max_depth is not None:
            kept = list({ns[: op.max_depth] for ns in kept})
        return sorted(kept)[op.offset : op.offset + op.limit]

    def _each(self, filters: Mapping[str, str]) -> Iterator[Memory]:
        """Every live memory whose metadata has ``filters``, in the order they were created; none
        when a filter's value (a key, a namespace) is one no memory's metadata can hold."""
        token = ""
        while True:
            try:
                page = self._page_size.ask(partial(self._page, filters, token), MAX_PAGE_SIZE)
            except InvalidArgumentError as error:
                if error.reason == "METADATA_INVALID":
                    return  # a key or namespace past the metadata limits: no item can be there
                raise
            yield from page.memories
            token = page.next_page_token
            if not token:
                return

    def _page(self, filters: Mapping[str, str], token: str, page_size: int) -> MemoryPage:
        return self.client.list_memories(self.tenant, page_size=page_size, page_token=token, metadata_equals=filters)

    # -- writes -------------------------------------------------------------------------------------

    def _put(self, namespace: tuple[str, ...], key: str, text: str | None) -> None:
        """Make the item at (``namespace``, ``key``) hold ``text`` (None: forget it)."""
        found = list(self._each({NAMESPACE_KEY: _joined(namespace), KEY_KEY: key}))
        keep = None if text is None or not found else _newest(found)
        for memory in found:
            if memory is not keep:
                self._forget(memory.id)
        if text is None:
            return
        try:
            hidden = self._write(namespace, key, keep, text)
            if hidden is not None:
                # A memory expired in its grace still holds this text, hidden (docs/expiry.md): the
                # write was its duplicate and would leave the item unreadable. That item expired,
                # so its memory goes and the write is made anew, under the tenant's expiry policy.
                self._forget(hidden)
                self._write(namespace, key, keep, text)
        except InvalidArgumentError as error:
            if error.reason == "TEXT_TOO_LONG":
                raise _value_too_long(error, text) from None
            if error.reason in ("METADATA_TOO_LARGE", "METADATA_INVALID"):
                raise _address_refused(error, namespace, key) from None
            raise

    def _write(self, namespace: tuple[str, ...], key: str, keep: Memory | None, text: str) -> int | None:
        """Retain ``text`` as the item's memory, or update ``keep`` to it. Returns the memory that
        already held the text when the write was its duplicate (then nothing changed), else None."""
        if keep is None:
            result = self.client.retain(self.tenant, text, metadata=_metadata(namespace, key))
            return result.memory_id if result.status == "duplicate" else None
        if keep.text == text:
            return None
        try:
            self.client.update_memory(self.tenant, keep.id, text=text)
        except FailedPreconditionError as error:
            if error.reason != "MEMORY_DUPLICATE":
                raise
            return int(error.metadata["memory_id"])
        except NotFoundError as error:
            if error.reason != "MEMORY_NOT_FOUND":
                raise
            return self._write(namespace, key, None, text)  # another process deleted the item meanwhile
        return None

    def _forget(self, memory_id: int) -> None:
        """Forget ``memory_id``; one another process forgot since it was listed is gone already."""
        try:
            self.client.forget(self.tenant, memory_id)
        except NotFoundError as error:
            if error.reason != "MEMORY_NOT_FOUND":
                raise


# -- items as memories --------------------------------------------------------------------------


def _check(op: Op) -> None:
    """Refuse what LangGraph's own methods refuse before batching, for ops given to ``batch``."""
    if not isinstance(op, GetOp | PutOp | SearchOp | ListNamespacesOp):
        raise ValueError(f"unknown operation {type(op).__name__}")
    _check_types(op)
    validate_op_namespace(op)
    _check_text(op)
    if isinstance(op, PutOp):
        if not op.namespace:
            raise InvalidNamespaceError("Namespace cannot be empty.")
        if op.namespace[0] == "langgraph":
            raise InvalidNamespaceError(f'Root label for namespace cannot be "langgraph". Got: {op.namespace}')
        if op.ttl is not None:
            raise NotImplementedError(
                "MnemosyneStore takes no TTL of a put (supports_ttl is False; the tenant's expiry policy applies): "
                "put with ttl=None"
            )
        if op.value is not None and not isinstance(op.value, Mapping):
            raise TypeError(f"a value is a mapping with string keys or None, not {type(op.value).__name__}")
    if isinstance(op, SearchOp | ListNamespacesOp):
        depth = {"max_depth": op.max_depth} if isinstance(op, ListNamespacesOp) and op.max_depth is not None else {}
        for name, number in {"limit": op.limit, "offset": op.offset, **depth}.items():
            if isinstance(number, bool) or not isinstance(number, int) or number < 0:
                raise ValueError(f"{name} must be a whole number from 0, not {number!r}")


def _check_types(op: Op) -> None:
    """Refuse an op's key that is not a string, a namespace (or prefix, or condition's path)
    that is not a tuple and a search's query that is no string or filter no mapping, as a value
    that is not a mapping: BaseStore's methods make a key a string
    (``str(key)``) before the op is made, but an op given to ``batch`` carries what it was given, and
    the metadata would hold ``5`` as "5" (an item read back under another key) and a namespace
    "abc" as the labels ("a", "b", "c")."""
    key = op.key if isinstance(op, GetOp | PutOp) else ""
    if not isinstance(key, str):
        raise TypeError(f"a key is a string, not {type(key).__name__} ({key!r:.40})")
    for path in _paths(op):
        if not isinstance(path, tuple):
            raise TypeError(f"a namespace is a tuple of strings, not {type(path).__name__} ({path!r:.40})")
    # A search's query and filter, which would fail deep in the store as AttributeError ('int' object
    # has no attribute 'replace', 'list' object has no attribute 'items').
    if isinstance(op, SearchOp) and not isinstance(op.query, str | None):
        raise TypeError(f"a query is a string or None, not {type(op.query).__name__} ({op.query!r:.40})")
    if isinstance(op, SearchOp) and not isinstance(op.filter, Mapping | None):
        raise TypeError(f"a filter is a mapping (field -> condition) or None, not {type(op.filter).__name__}")


def _paths(op: Op) -> list[tuple[str, ...]]:
    """The namespaces an op names: its namespace, its search's prefix or its conditions' paths."""
    if isinstance(op, GetOp | PutOp):
        return [op.namespace]
    if isinstance(op, SearchOp):
        return [op.namespace_prefix]
    return [c.path for c in op.match_conditions or ()] if isinstance(op, ListNamespacesOp) else []


def _check_text(op: Op) -> None:
    """Refuse an op's key or namespace label (of a prefix, of a condition's path) holding half of
    a surrogate pair, which no metadata (UTF-8) can hold: every op, not the puts alone, so that a
    get, delete, search or listing of one fails as a put does, not in the client's encoder."""
    labels = [(f"the item's namespace label {label[:40]!r}", label) for path in _paths(op) for label in path]
    key = [("the item's key", op.key)] if isinstance(op, GetOp | PutOp) else []
    for what, text in [*labels, *key]:
        refusal = lone_surrogate(text, what)
        if refusal is not None:
            raise ValueError(refusal)


def _joined(labels: Sequence[str]) -> str:
    # Labels have no "." (BaseStore's rule, checked by _check), so the join is unambiguous.
    return ".".join(labels)


def _metadata(namespace: tuple[str, ...], key: str) -> dict[str, str]:
    prefixes = {PREFIX_KEY.format(n): _joined(namespace[:n]) for n in range(len(namespace) + 1)}
    return {NAMESPACE_KEY: _joined(namespace), KEY_KEY: key, **prefixes}


def _text(namespace: tuple[str, ...], key: str, value: Mapping[str, Any]) -> str:
    """The value's JSON on one line (compact JSON has no raw newline), then the address line.
    Raises ValueError for what JSON text cannot hold (NaN, Infinity, a lone surrogate), before
    any put of the batch is made."""
    try:
        document = json.dumps(dict(value), ensure_ascii=False, allow_nan=False)
    except ValueError as exc:
        if "Out of range float" not in str(exc):  # an integer of more digits than Python writes
            raise ValueError(f"the value of key {key!r} holds an integer too long for JSON text: {exc}") from None
        raise ValueError(f"the value of key {key!r} holds NaN or Infinity, which have no JSON form") from None
    refusal = lone_surrogate(document, "the item's value (its JSON)")  # its address: _check_text
    if refusal is not None:
        raise ValueError(refusal)
    address = json.dumps([list(namespace), key], ensure_ascii=False)
    digest = hashlib.sha256(address.encode("utf-8")).hexdigest()[:20]
    return document + "\n" + ADDRESS_LINE.format(digest)


def _value_too_long(error: InvalidArgumentError, text: str) -> InvalidArgumentError:
    """The server's TEXT_TOO_LONG said of the value: the server counts the item's whole text, so a
    value's JSON has the server's limit (its ErrorInfo's ``limit``) less the address line."""
    value = text.partition("\n")[0]
    line = len(text) - len(value)
    if not error.metadata.get("limit", "").isdigit():
        return error
    limit = int(error.metadata["limit"])
    message = (
        f"the value's JSON has {len(value)} characters; the limit is {limit - line} "
        f"(the server's --max-text-chars, {limit}, less the {line} characters of the item's address line)"
    )
    return InvalidArgumentError(error.code, error.reason, message, {**error.metadata, "limit": str(limit - line)})


def _address_refused(error: InvalidArgumentError, namespace: tuple[str, ...], key: str) -> InvalidArgumentError:
    """The server's refusal of the item's metadata said of its namespace or key: a namespace of n
    labels takes n + 3 pairs (``_metadata``); its labels joined and the key are metadata values."""
    if not error.metadata.get("limit", "").isdigit():
        return error
    limit = int(error.metadata["limit"])
    joined = _joined(namespace)
    if error.reason == "METADATA_TOO_LARGE":
        limit, message = (
            limit - 3,
            (
                f"the item's namespace has {len(namespace)} labels; the limit is {limit - 3} (the server's "
                f"--max-metadata-pairs, {limit}, less the 3 pairs its key and namespace take besides one a label)"
            ),
        )
    elif len(joined) > limit:
        message = f"the item's namespace has {len(joined)} characters joined by '.'; the limit is {limit}"
    elif len(key) > limit:
        message = f"the item's key has {len(key)} characters; the limit is {limit}"
    elif "\x00" in key:
        message = "the item's key holds NUL, which the server's metadata cannot hold"
    else:
        return error
    if error.reason == "METADATA_INVALID":
        message += (
            " (the server's --max-metadata-value-chars: an item's namespace and key are kept in its memory's metadata)"
        )
    return InvalidArgumentError(error.code, error.reason, message, {**error.metadata, "limit": str(limit)})


def _value(memory: Memory) -> dict[str, Any]:
    """The item's value; raises ValueError naming the item and its memory when the memory's text is
    no longer an item's (changed outside the store: UpdateMemory, mem0's update)."""
    try:
        value = json.loads(memory.text.partition("\n")[0])
    except ValueError:
        value = None
    if not isinstance(value, dict):
        namespace, key = _address(memory)
        raise ValueError(
            f"the item {namespace} {key!r} is memory {memory.id}, whose text is no longer a JSON object on its first "
            f"line: it was changed outside the store; put the item again, or forget memory {memory.id}"
        )
    return value


def _address(memory: Memory) -> Address:
    """The item's (namespace, key); raises ValueError naming the memory when its metadata holds
    no address (a memory retained or changed outside the store, under the store's prefix index)."""
    joined, key = memory.metadata.get(NAMESPACE_KEY), memory.metadata.get(KEY_KEY)
    if joined is None or key is None:
        raise ValueError(
            f"memory {memory.id} is under the store's prefix index but its metadata has no {NAMESPACE_KEY} and "
            f"{KEY_KEY}: it was retained or changed outside the store; forget memory {memory.id}, or give it both"
        )
    return (tuple(joined.split(".")) if joined else ()), key


def _written_at(memory: Memory) -> float:
    return memory.updated_at or memory.created_at


def _newest(memories: Sequence[Memory]) -> Memory:
    return max(memories, key=lambda m: (_written_at(m), m.id))


def _current(found: Sequence[tuple[Memory, float | None]]) -> list[tuple[Memory, float | None]]:
    """``found`` without the older copies of an address (two processes' racing creations)."""
    newest: dict[Address, Memory] = {}
    for memory, _ in found:
        held = newest.get(_address(memory))
        if held is None or (_written_at(memory), memory.id) > (_written_at(held), held.id):
            newest[_address(memory)] = memory
    return [(memory, score) for memory, score in found if newest[_address(memory)] is memory]


def _times(memory: Memory) -> tuple[datetime, datetime]:
    return datetime.fromtimestamp(memory.created_at, UTC), datetime.fromtimestamp(_written_at(memory), UTC)


def _item(memory: Memory) -> Item:
    created, updated = _times(memory)
    namespace, key = _address(memory)
    return Item(value=_value(memory), key=key, namespace=namespace, created_at=created, updated_at=updated)


def _search_item(memory: Memory, score: float | None) -> SearchItem:
    created, updated = _times(memory)
    namespace, key = _address(memory)
    return SearchItem(namespace, key, _value(memory), created, updated, score)


# -- LangGraph's matching rules (its documented filter operators and namespace conditions) -------


def _matches(value: Mapping[str, Any], filter: Mapping[str, Any] | None) -> bool:
    return all(_compare(value.get(k), wanted) for k, wanted in (filter or {}).items())


def _compare(held: Any, wanted: Any) -> bool:
    """JSONB-like: a dict of ``$`` operators, a nested dict, a list element by element, or equality."""
    if isinstance(wanted, dict):
        if any(k.startswith("$") for k in wanted):
            return all(_operator(held, op, operand) for op, operand in wanted.items())
        return isinstance(held, dict) and all(_compare(held.get(k), v) for k, v in wanted.items())
    if isinstance(wanted, list | tuple):
        return (
            isinstance(held, list | tuple)
            and len(held) == len(wanted)
            and all(_compare(h, w) for h, w in zip(held, wanted))
        )
    return bool(held == wanted)


def _operator(held: Any, op: str, operand: Any) -> bool:
    if op == "$eq":
        return bool(held == operand)
    if op == "$ne":
        return bool(held != operand)
    comparisons = {"$gt": float.__gt__, "$gte": float.__ge__, "$lt": float.__lt__, "$lte": float.__le__}
    if op not in comparisons:
        raise ValueError(f"unsupported filter operator {op!r}: use $eq, $ne, $gt, $gte, $lt or $lte")
    if held is None:
        return False
    return bool(comparisons[op](float(held), float(operand)))


def _namespace_matches(condition: MatchCondition, namespace: tuple[str, ...]) -> bool:
    path = condition.path
    if len(namespace) < len(path):
        return False
    pairs = zip(namespace, path) if condition.match_type == "prefix" else zip(reversed(namespace), reversed(path))
    return all(p == "*" or label == p for label, p in pairs)


__all__ = ["MnemosyneStore"]
