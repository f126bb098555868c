"""The LangGraph store (mnemosyne.integrations.langgraph, docs/integrations.md).

No conformance suite exists for LangGraph stores, so one list of cases (``CASES``) runs against
LangGraph's own ``InMemoryStore`` and against ``MnemosyneStore`` on a real server, and each case's
observations must be equal. The reference store gets an embedding (a bag of words) so that a
search by query means something there too; those cases observe only what both must agree on (the
best hit of a query one item answers, and the set found). Then a real graph: two threads of one
user, a fact stored in one and recalled in the other.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
import operator
import re
import time
import uuid
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypedDict, cast

import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.store.base import (
    BaseStore,
    GetOp,
    IndexConfig,
    InvalidNamespaceError,
    Item,
    ListNamespacesOp,
    MatchCondition,
    Op,
    PutOp,
    SearchOp,
)
from langgraph.store.memory import InMemoryStore

from mnemosyne.client import ExpiryPolicy, InvalidArgumentError, MemoryClient
from mnemosyne.integrations.langgraph import MnemosyneStore

# -- the reference's embedding: words hashed into 256 dimensions --------------------------------


def _bag_of_words(texts: Sequence[str]) -> list[list[float]]:
    vectors = []
    for text in texts:
        vector = [0.0] * 256
        for word in re.findall(r"[a-z0-9]+", text.lower()):
            vector[int(hashlib.sha256(word.encode()).hexdigest(), 16) % 256] += 1.0
        norm = math.sqrt(sum(x * x for x in vector)) or 1.0
        vectors.append([x / norm for x in vector])
    return vectors


def _reference() -> InMemoryStore:
    return InMemoryStore(index=IndexConfig(dims=256, embed=_bag_of_words))


# -- observations: what a case returns, comparable across the two stores ------------------------


def seen(result: Any) -> Any:
    """An item as (namespace, key, value), lists element by element, anything else as it is."""
    if isinstance(result, Item):
        return (result.namespace, result.key, result.value)
    if isinstance(result, list):
        return [seen(r) for r in result]
    return result


def raised(call: Callable[[], Any]) -> str:
    try:
        call()
    except Exception as exc:  # the class is the observation
        return type(exc).__name__
    return "no error"


def keys(items: list[Any]) -> list[str]:
    return [item.key for item in items]


def sorted_seen(items: list[Any]) -> list[Any]:
    return sorted(seen(items), key=repr)


# -- the cases -----------------------------------------------------------------------------------

U = ("memories", "user-1")


def put_then_get(s: BaseStore) -> Any:
    s.put(U, "food", {"likes": "pizza", "n": 3, "tags": ["a", "b"], "ok": True, "none": None, "é": "ünï"})
    return [seen(s.get(U, "food")), seen(s.get(U, "missing")), seen(s.get(("memories", "user-2"), "food"))]


def put_upserts_by_key(s: BaseStore) -> Any:
    s.put(U, "food", {"likes": "pizza"})
    s.put(U, "food", {"likes": "sushi"})
    return [seen(s.get(U, "food")), seen(s.search(U))]


def same_value_under_two_keys_is_two_items(s: BaseStore) -> Any:
    value = {"likes": "pizza"}
    s.put(U, "first", value)
    s.put(U, "second", value)
    s.put(U, "Second", value)  # differs only by case: an exact key, not a normalised one
    s.put(("memories", "user-2"), "first", value)
    return [sorted_seen(s.search(U)), seen(s.get(U, "Second")), len(s.search(()))]


def none_value_deletes(s: BaseStore) -> Any:
    s.put(U, "a", {"v": 1})
    s.put(U, "b", {"v": 2})
    s.put(U, "a", None)  # type: ignore[arg-type]  # BaseStore.put's annotation omits None; its PutOp takes it
    s.delete(U, "b")
    s.delete(U, "never-there")
    s.put(U, "a", {"v": 3})  # back again, as a new item
    return [seen(s.get(U, "a")), seen(s.get(U, "b")), seen(s.search(U))]


def namespaces_are_searched_by_label_prefix(s: BaseStore) -> Any:
    for namespace in [("a",), ("a", "b"), ("a", "b", "c"), ("a", "c"), ("ab",), ("b", "a")]:
        s.put(namespace, "k", {"in": "/".join(namespace)})
    return [
        sorted_seen(s.search(("a",))),
        sorted_seen(s.search(("a", "b"))),
        sorted_seen(s.search(("a", "b", "c", "d"))),
        len(s.search(())),
        sorted_seen(s.search(("ab",))),
    ]


def order_limit_and_offset(s: BaseStore) -> Any:
    for n in range(6):
        s.put(U, f"k{n}", {"n": n})
    s.put(U, "k1", {"n": 10})  # an upsert keeps its place
    s.delete(U, "k2")
    s.put(U, "k2", {"n": 20})  # a new item after a delete goes last
    return [
        keys(s.search(U)),
        keys(s.search(U, limit=2)),
        keys(s.search(U, limit=2, offset=3)),
        keys(s.search(U, offset=10)),
    ]


def filters(s: BaseStore) -> Any:
    s.put(U, "a", {"kind": "fact", "n": 1, "meta": {"lang": "en", "src": "chat"}, "tags": ["x", "y"]})
    s.put(U, "b", {"kind": "fact", "n": 5, "meta": {"lang": "fr"}})
    s.put(U, "c", {"kind": "rule", "n": 3, "meta": {"lang": "en"}, "tags": ["x"]})
    searches: list[dict[str, Any]] = [
        {"kind": "fact"},
        {"n": {"$gt": 1}},
        {"n": {"$gte": 3, "$lt": 5}},
        {"n": {"$lte": 3}, "kind": "rule"},
        {"kind": {"$ne": "fact"}},
        {"kind": {"$eq": "rule"}},
        {"meta": {"lang": "en"}},
        {"tags": ["x", "y"]},
        {"kind": "none"},
    ]
    return [keys(s.search(U, filter=f)) for f in searches]


def query_finds_the_item_that_answers(s: BaseStore) -> Any:
    s.put(U, "food", {"data": "The user loves margherita pizza with basil"})
    s.put(U, "job", {"data": "The user works as a nurse at the city hospital"})
    s.put(U, "pet", {"data": "The user has a dog called Rex who chases squirrels"})
    s.put(("memories", "user-2"), "food", {"data": "This other user loves pizza too"})
    best = [
        s.search(U, query=q, limit=1)[0].key
        for q in ("pizza with basil", "hospital nurse", "dog called Rex", "squirrels")
    ]
    found = sorted(keys(s.search(U, query="pizza", limit=10)))
    kinds = keys(s.search(U, query="pizza", filter={"data": "The user works as a nurse at the city hospital"}))
    # Queries the server takes as they are not (they raised QUERY_EMPTY, QUERY_INVALID,
    # REQUEST_UNDECODABLE, QUERY_TOO_LONG): each still finds the namespace's items, a long one by its end.
    with warnings.catch_warnings():  # the reference divides by its embedding of no words, a zero vector
        warnings.simplefilter("ignore", RuntimeWarning)
        odd = [sorted(keys(s.search(U, query=q))) for q in (" \u200b ", "a NUL \x00", "half \ud800 a pair")]
    long = s.search(U, query="words " * 2_000 + "dog called Rex", limit=1)[0].key
    return [best, found, kinds, len(s.search(U, query="pizza", limit=2)), odd, long]


def list_namespaces(s: BaseStore) -> Any:
    for namespace in [("a", "b", "v1"), ("a", "c", "v1"), ("a", "c", "v2"), ("d",), ("d", "e", "v1")]:
        s.put(namespace, "k", {"x": 1})
    return [
        s.list_namespaces(),
        s.list_namespaces(prefix=("a",)),
        s.list_namespaces(suffix=("v1",)),
        s.list_namespaces(prefix=("a", "*", "v1")),
        s.list_namespaces(prefix=("*", "c")),
        s.list_namespaces(max_depth=1),
        s.list_namespaces(prefix=("a",), max_depth=2),
        s.list_namespaces(limit=2, offset=1),
        s.list_namespaces(prefix=("zz",)),
    ]


def invalid_namespaces_are_refused(s: BaseStore) -> Any:
    return [
        raised(lambda: s.put(("a.b",), "k", {"x": 1})),
        raised(lambda: s.put((), "k", {"x": 1})),
        raised(lambda: s.put(("langgraph", "x"), "k", {"x": 1})),
        raised(lambda: s.put(("",), "k", {"x": 1})),
        raised(lambda: s.get(("a.b",), "k")),
        raised(lambda: s.search(("a.b",))),
        raised(lambda: s.list_namespaces(prefix=("a.b",))),
        raised(lambda: s.put(U, "k", {"x": 1}, ttl=5)),
        s.search(()),  # nothing was written by any of them
    ]


def addresses_no_item_can_have_are_empty(s: BaseStore) -> Any:
    """A key or namespace past the server's metadata limits (1,024 characters, no NUL) holds no
    item: reads find nothing and a delete does nothing (they raised METADATA_INVALID here)."""
    s.put(U, "k", {"v": 1})
    long_key, long_namespace = "k" * 1_025, ("a" * 600, "b" * 600)
    return [
        s.list_namespaces(prefix=long_namespace),  # first: the reference's get makes it a namespace
        s.get(U, long_key),
        s.get(U, "k\x00"),
        s.get(long_namespace, "k"),
        s.search(long_namespace),
        s.search(long_namespace, query="v"),
        raised(lambda: s.delete(U, long_key)),
        raised(lambda: s.delete(long_namespace, "k")),
        seen(s.search(())),
    ]


def batch_reads_before_its_writes(s: BaseStore) -> Any:
    s.put(U, "k", {"v": "old"})
    results = s.batch(
        [
            PutOp(U, "k", {"v": "new"}),
            GetOp(U, "k"),
            PutOp(U, "j", {"v": 1}),
            PutOp(U, "j", {"v": 2}),  # the last put of an address in a batch wins
            SearchOp(U),
            ListNamespacesOp(match_conditions=(MatchCondition("prefix", ("memories",)),)),
            PutOp(U, "gone", None),
        ]
    )
    return [seen(results), seen(s.get(U, "k")), seen(s.get(U, "j"))]


def async_methods(s: BaseStore) -> Any:
    async def run() -> Any:
        await s.aput(U, "k", {"v": 1})
        await s.aput(U, "k", {"v": 2})
        got = await s.aget(U, "k")
        found = await s.asearch(U, filter={"v": 2})
        namespaces = await s.alist_namespaces()
        await s.adelete(U, "k")
        return [seen(got), seen(found), namespaces, seen(await s.aget(U, "k"))]

    return asyncio.run(run())


def methods_make_a_key_a_string(s: BaseStore) -> Any:
    """BaseStore's put, get and delete (and their async forms) make a key a string (``str(key)``)
    before any store sees it: LangGraph's contract for every store, which this one keeps."""
    five, seven, none = cast(str, 5), cast(str, 7), cast(str, None)  # keys of other types, as a caller's

    async def run() -> Any:
        await s.aput(U, seven, {"v": 7})
        got = [seen(await s.aget(U, "7")), seen(await s.aget(U, seven))]
        await s.adelete(U, seven)
        return [*got, seen(await s.aget(U, "7"))]

    s.put(U, five, {"v": 5})
    s.put(U, none, {"v": None})
    found = [seen(s.get(U, "5")), seen(s.get(U, five)), seen(s.get(U, "None"))]
    s.delete(U, five)
    return [found, seen(s.get(U, "5")), asyncio.run(run()), sorted(keys(s.search(U)))]


CASES: list[Callable[[BaseStore], Any]] = [
    put_then_get,
    put_upserts_by_key,
    same_value_under_two_keys_is_two_items,
    none_value_deletes,
    namespaces_are_searched_by_label_prefix,
    order_limit_and_offset,
    filters,
    query_finds_the_item_that_answers,
    list_namespaces,
    invalid_namespaces_are_refused,
    addresses_no_item_can_have_are_empty,
    batch_reads_before_its_writes,
    async_methods,
    methods_make_a_key_a_string,
]


@pytest.mark.parametrize("case", CASES, ids=operator.attrgetter("__name__"))
def test_the_store_answers_as_langgraphs_in_memory_store(case, client, tenant):
    expected = case(_reference())
    assert expected not in (None, [], [None])  # every case observes something
    assert case(MnemosyneStore(client, tenant)) == expected


# -- what is Mnemosyne's own -----------------------------------------------------------------------


def test_items_are_memories_of_the_tenant_with_their_namespace_in_metadata(client, tenant):
    store = MnemosyneStore(client, tenant)
    store.put(("memories", "user-1"), "food", {"likes": "pizza"})
    [memory] = client.list_memories(tenant).memories
    assert memory.scope == "global"
    assert memory.metadata == {
        "langgraph.namespace": "memories.user-1",
        "langgraph.key": "food",
        "langgraph.prefix.0": "",
        "langgraph.prefix.1": "memories",
        "langgraph.prefix.2": "memories.user-1",
    }
    # Found by meaning through Recall, as any memory; no record was written (records keep the
    # host-owned generation rules).
    assert client.recall(tenant, "pizza")[0].memory.id == memory.id
    assert [(s.scope, s.generation, s.records) for s in client.list_scopes(tenant)] == [("global", 0, 0)]
    # An upsert is an update of that memory (its earlier value an earlier version); a delete forgets it.
    store.put(("memories", "user-1"), "food", {"likes": "sushi"})
    assert [m.id for m in client.list_memories(tenant).memories] == [memory.id]
    assert len(client.list_memory_versions(tenant, memory.id)) == 2
    store.delete(("memories", "user-1"), "food")
    assert client.get_memory(tenant, memory.id).forgotten


def test_where_it_differs_from_the_in_memory_store(client, tenant):
    """Stricter than InMemoryStore in three places (docs/integrations.md): an op handed to ``batch``
    directly has its labels checked (the reference checks only in its methods: a label "a.b" would
    address the namespace ("a", "b") here), a negative limit, offset or depth is refused, and a
    namespace whose items are all deleted is no longer listed (the reference keeps listing it)."""
    store = MnemosyneStore(client, tenant)
    refused: list[Op] = [GetOp(("a.b",), "k"), SearchOp(("a", "")), PutOp(("a.b",), "k", {"v": 1})]
    for op in refused:
        with pytest.raises(InvalidNamespaceError):
            store.batch([op])
    with pytest.raises(NotImplementedError):
        store.batch([PutOp(("a",), "k", {"v": 1}, ttl=1.0)])
    store.put(("a",), "k", {"v": 1})
    # A negative limit, offset or depth is refused (the reference slices by it: search(offset=-1)
    # answered the last item, limit=-1 all but the last; here they answered [] or the last item).
    for call in (
        lambda: store.search(("a",), limit=-1),
        lambda: store.search(("a",), offset=-1),
        lambda: store.search(("a",), query="v", limit=True),
        lambda: store.list_namespaces(limit=-1),
        lambda: store.list_namespaces(offset=-2),
        lambda: store.list_namespaces(max_depth=-1),
    ):
        with pytest.raises(ValueError, match="a whole number from 0"):
            call()
    store.delete(("a",), "k")
    assert store.list_namespaces() == []
    assert store.search(()) == []


def test_a_batch_checks_every_value_before_it_writes_any(client, tenant):
    store = MnemosyneStore(client, tenant)
    with pytest.raises(TypeError):
        store.batch([PutOp(("ns",), "a", {"v": 1}), PutOp(("ns",), "b", {"v": object()})])
    # What JSON text cannot hold (docs/integrations.md: "a value that is not JSON"): NaN and
    # Infinity were stored as Python's non-JSON NaN; a lone surrogate failed in gRPC's encoder,
    # after the puts before it were made.
    for bad in (
        PutOp(("ns",), "b", {"v": math.nan}),
        PutOp(("ns",), "b", {"v": [-math.inf]}),
        PutOp(("ns",), "b", {"v": "\ud800"}),
        PutOp(("ns",), "\udc00", {"v": 1}),
    ):
        with pytest.raises(ValueError, match="NaN or Infinity|half of a surrogate pair, .* send the character whole"):
            store.batch([PutOp(("ns",), "a", {"v": 1}), bad])
    # A key that is no string, a namespace that is no tuple, in an op given to batch or abatch (the
    # methods make a key a string first): protobuf's "bad argument type for built-in operation" or
    # "unhashable type", after the puts before it were made, or a string's characters as labels.
    key: Any = 5
    namespace: Any = "ns"  # read as the labels ("n", "s")
    listed: Any = ["ns"]
    others: list[Any] = [key, None, ["k"], 1.5, b"k"]
    wrong: list[Op] = [
        *[PutOp(("ns",), other, {"v": 1}) for other in others],
        PutOp(("ns",), key, None),
        GetOp(("ns",), key),
        PutOp(namespace, "b", {"v": 1}),
        PutOp(listed, "b", {"v": 1}),
        GetOp(namespace, "a"),
        SearchOp(namespace),
        ListNamespacesOp(match_conditions=(MatchCondition("prefix", listed),)),
    ]
    for wrong_op in wrong:
        for run in (store.batch, lambda ops: asyncio.run(store.abatch(ops))):
            with pytest.raises(TypeError, match=r"^a (key is a string|namespace is a tuple of strings), not \w+ \("):
                run([PutOp(("ns",), "a", {"v": 1}), wrong_op])
    for call in (lambda: store.put(namespace, "k", {"v": 1}), lambda: store.search(namespace)):
        with pytest.raises(TypeError, match="a namespace is a tuple of strings, not str"):
            call()
    # A query that is no string, a filter no mapping: AttributeError from deep in the store.
    odd_query: Any = 5
    odd_filter: Any = [("v", 1)]
    with pytest.raises(TypeError, match=r"^a query is a string or None, not int \(5\)"):
        store.batch([PutOp(("ns",), "a", {"v": 1}), SearchOp(("ns",), query=odd_query)])
    with pytest.raises(TypeError, match=r"^a filter is a mapping \(field -> condition\) or None, not list"):
        store.search(("ns",), filter=odd_filter)
    # An integer longer than Python writes (4,300 digits): it was blamed on NaN or Infinity.
    with pytest.raises(ValueError, match="an integer too long for JSON text"):
        store.batch([PutOp(("ns",), "a", {"v": 1}), PutOp(("ns",), "b", {"v": 10**5000})])
    assert store.search(()) == []
    assert client.list_memories(tenant).memories == []


def test_a_lone_surrogate_in_an_address_is_refused_by_every_method_as_by_put(client, tenant):
    # get, delete, search and list_namespaces raised the client's RequestInvalidError (from its
    # encoder), put the store's ValueError: every one is the store's refusal, before any call.
    store = MnemosyneStore(client, tenant)
    calls: list[Callable[[], object]] = [
        lambda: store.put(("ns",), "\udc00", {"v": 1}),
        lambda: store.put(("n\ud800",), "k", {"v": 1}),
        lambda: store.get(("ns",), "\udc00"),
        lambda: store.get(("n\ud800",), "k"),
        lambda: store.delete(("ns",), "\udc00"),
        lambda: store.delete(("n\ud800",), "k"),
        lambda: store.search(("n\ud800",)),
        lambda: store.search(("n\ud800",), query="q"),
        lambda: store.list_namespaces(prefix=("n\ud800",)),
        lambda: store.list_namespaces(suffix=("*", "n\ud800")),
    ]
    for call in calls:
        with pytest.raises(
            ValueError, match=r"^the item's (key|namespace label .*) holds .*, half of a surrogate pair"
        ):
            call()


def test_a_store_is_bound_to_its_tenant(client, tenant):
    MnemosyneStore(client, tenant).put(("memories",), "k", {"v": 1})
    other = MnemosyneStore(client, tenant + "-other")
    assert other.get(("memories",), "k") is None
    assert other.search(()) == []


def test_racing_creations_of_one_address_read_as_one_item(client, tenant):
    """Two processes creating one address at once may leave two memories: reads see the newest,
    and the next put forgets the other."""
    store = MnemosyneStore(client, tenant)
    store.put(("ns",), "k", {"v": "first"})
    [first] = client.list_memories(tenant).memories
    # What a second process's put made meanwhile: the same address, another value.
    client.retain(tenant, '{"v": "second"}\nlanggraph:0', metadata=dict(first.metadata))
    assert store.get(("ns",), "k").value == {"v": "second"}  # type: ignore[union-attr]  # found: asserted by its value
    assert [i.value for i in store.search(("ns",))] == [{"v": "second"}]
    store.put(("ns",), "k", {"v": "third"})
    assert [m.text.partition("\n")[0] for m in client.list_memories(tenant).memories] == ['{"v": "third"}']


def test_an_item_whose_memory_was_changed_outside_the_store_is_named(client, tenant):
    """An item is a memory any client may update; one whose text is no longer a JSON value made
    every search of its namespace raise JSONDecodeError "Expecting value", naming nothing."""
    store = MnemosyneStore(client, tenant)
    store.put(("ns",), "a", {"v": 1})
    [memory] = client.list_memories(tenant).memories
    client.update_memory(tenant, memory.id, text="edited by a person in the console")
    for read in (lambda: store.search(("ns",)), lambda: store.get(("ns",), "a")):
        with pytest.raises(
            ValueError, match=f"item \\('ns',\\) 'a' is memory {memory.id}, .* changed outside the store"
        ):
            read()
    store.put(("ns",), "a", {"v": 2})  # the way out the message names
    assert store.get(("ns",), "a").value == {"v": 2}  # type: ignore[union-attr]  # found: asserted by its value


def test_a_memory_under_the_prefix_index_with_no_address_is_named(client, tenant):
    """A memory retained outside the store under its prefix index, without the namespace and key
    of an item, made every search and listing of that prefix raise KeyError 'langgraph.namespace'."""
    store = MnemosyneStore(client, tenant)
    store.put(("ns",), "a", {"v": 1})
    stray = client.retain(tenant, '{"v": 2}', metadata={"langgraph.prefix.0": "", "langgraph.prefix.1": "ns"})
    for read in (lambda: store.search(("ns",)), lambda: store.list_namespaces()):
        with pytest.raises(ValueError, match=f"memory {stray.memory_id} is under the store's prefix index but"):
            read()
    client.forget(tenant, stray.memory_id)  # the way out the message names
    assert [item.key for item in store.search(("ns",))] == ["a"]


class _DeletedMeanwhile(MemoryClient):
    """A client whose next listing is followed by ``then`` (another process's delete): the
    interleaving of a put or delete that looked its address up just before the other's delete."""

    then: Callable[[], None] | None = None

    def list_memories(self, *args: Any, **kwargs: Any) -> Any:
        page = super().list_memories(*args, **kwargs)
        then, self.then = self.then, None
        if then is not None:
            then()
        return page


def test_a_put_or_delete_racing_another_process_s_delete_succeeds(target, client, tenant):
    """A put or delete that found the address's memories, forgotten by another process before it
    wrote, raised MEMORY_NOT_FOUND; a put now makes the item anew, a delete finds it gone."""
    other = MnemosyneStore(client, tenant)
    racing = _DeletedMeanwhile(target)
    store = MnemosyneStore(racing, tenant)
    other.put(("ns",), "k", {"v": "first"})
    [first] = client.list_memories(tenant).memories
    client.retain(tenant, '{"v": "second"}\nlanggraph:0', metadata=dict(first.metadata))  # two at the address
    racing.then = lambda: other.delete(("ns",), "k")
    store.put(("ns",), "k", {"v": "third"})
    assert store.get(("ns",), "k").value == {"v": "third"}  # type: ignore[union-attr]  # found: asserted by its value
    assert [m.text.partition("\n")[0] for m in client.list_memories(tenant).memories] == ['{"v": "third"}']
    racing.then = lambda: other.delete(("ns",), "k")
    store.delete(("ns",), "k")
    assert store.get(("ns",), "k") is None and client.list_memories(tenant).memories == []
    racing.close()


# -- a real graph --------------------------------------------------------------------------------


class Turn(TypedDict, total=False):
    said: str
    answer: str


def test_a_fact_stored_in_one_thread_is_recalled_in_another(client, tenant):
    def respond(state: Turn, config: RunnableConfig, *, store: BaseStore) -> Turn:
        namespace = ("memories", config["configurable"]["user_id"])
        said = state["said"]
        if said.startswith("remember: "):
            store.put(namespace, uuid.uuid4().hex, {"data": said.removeprefix("remember: ")})
            return {"answer": "noted"}
        found = store.search(namespace, query=said, limit=1)
        return {"answer": found[0].value["data"] if found else "I don't know"}

    builder = StateGraph(Turn)
    builder.add_node("respond", respond)
    builder.add_edge(START, "respond")
    builder.add_edge("respond", END)
    graph = builder.compile(checkpointer=InMemorySaver(), store=MnemosyneStore(client, tenant))

    def turn(thread: str, user: str, said: str) -> str:
        config: RunnableConfig = {"configurable": {"thread_id": thread, "user_id": user}}
        return str(graph.invoke({"said": said}, config)["answer"])

    assert turn("thread-1", "ada", "remember: my favourite food is margherita pizza") == "noted"
    assert turn("thread-1", "ada", "remember: I work as a nurse") == "noted"
    assert turn("thread-2", "ada", "what is my favourite food?") == "my favourite food is margherita pizza"
    # The other thread's state never held the fact: it came through the store.
    assert "pizza" not in str(graph.get_state({"configurable": {"thread_id": "thread-2"}}).values.get("said"))
    assert turn("thread-3", "bob", "what is my favourite food?") == "I don't know"  # another user's namespace


# -- a tenant's expiry policy, and the size of a value ----------------------------------------------

DAY = 86_400


def test_a_put_after_its_item_expired_is_readable(server_factory, tenant, tmp_path: Path):
    """Under a tenant's default TTL (docs/expiry.md) an expired item's memory still holds its text,
    hidden, through the grace: a put of that text again would be its duplicate, unreadable. The
    put makes the item anew instead, with the tenant's TTL from then (the server's expiry clock is
    moved by the test seam MNEMOSYNE_TEST_CLOCK_FILE)."""
    clock = tmp_path / "clock"
    clock.write_text("0")
    server = server_factory(env={"MNEMOSYNE_TEST_CLOCK_FILE": str(clock)}).start()
    with MemoryClient(server.target) as client:
        client.set_expiry_policy(tenant, ExpiryPolicy(default_ttl_seconds=DAY))
        store = MnemosyneStore(client, tenant)

        def expire() -> None:
            clock.write_text(str(float(clock.read_text()) + DAY + 60))
            assert store.get(("prefs",), "food") is None

        def live() -> list[str]:
            return [m.text.partition("\n")[0] for m in client.list_memories(tenant).memories]

        store.put(("prefs",), "food", {"likes": "pizza"})
        expire()
        store.put(("prefs",), "food", {"likes": "pizza"})  # a retain of the hidden memory's text
        assert store.get(("prefs",), "food").value == {"likes": "pizza"}  # type: ignore[union-attr]  # found: asserted by its value
        assert [i.value for i in store.search(("prefs",))] == [{"likes": "pizza"}]
        [memory] = client.list_memories(tenant).memories
        expires_at = client.get_memory(tenant, memory.id).expires_at
        assert expires_at == pytest.approx(time.time() + float(clock.read_text()) + DAY, abs=30)

        expire()
        store.put(("prefs",), "food", {"likes": "sushi"})  # a new memory beside the hidden one
        store.put(("prefs",), "food", {"likes": "pizza"})  # an update to the hidden memory's text
        assert store.get(("prefs",), "food").value == {"likes": "pizza"}  # type: ignore[union-attr]  # found: asserted by its value
        assert live() == ['{"likes": "pizza"}']


def test_a_value_has_the_servers_text_limit_less_its_address_line(client, tenant):
    """A memory's text is the value's JSON and a 31-character address line, so a value's JSON has
    the server's --max-text-chars less 31 (32,737 by default); a longer one is refused with its
    own length and that limit."""
    store = MnemosyneStore(client, tenant)

    def value(chars: int) -> dict[str, str]:
        return {"s": "x" * (chars - len('{"s": ""}'))}

    store.put(("ns",), "largest", value(32_737))
    assert store.get(("ns",), "largest").value == value(32_737)  # type: ignore[union-attr]  # found: asserted by its value
    with pytest.raises(InvalidArgumentError) as refused:
        store.put(("ns",), "too-long", value(32_738))
    assert refused.value.reason == "TEXT_TOO_LONG"
    assert "the value's JSON has 32738 characters; the limit is 32737" in refused.value.message
    assert refused.value.metadata["limit"] == "32737"
    assert store.get(("ns",), "too-long") is None


def test_an_address_past_the_metadata_limits_is_refused_in_the_store_s_terms(client, tenant):
    """A put's namespace and key are kept in the memory's metadata (29 labels, 1,024 characters
    joined, a key of 1,024 without NUL): past those the put is refused naming the namespace or the
    key, not the server's metadata pairs and filters that the store's user never wrote."""
    store = MnemosyneStore(client, tenant)
    refusals = {
        "namespace has 30 labels; the limit is 29": (tuple(f"l{n}" for n in range(30)), "k", "METADATA_TOO_LARGE"),
        "namespace has 1201 characters joined by '.'; the limit is 1024": (
            ("a" * 600, "b" * 600),
            "k",
            "METADATA_INVALID",
        ),
        "key has 1025 characters; the limit is 1024": (("ns",), "k" * 1_025, "METADATA_INVALID"),
        "key holds NUL": (("ns",), "k\x00", "METADATA_INVALID"),
    }
    for words, (namespace, key, reason) in refusals.items():
        with pytest.raises(InvalidArgumentError) as refused:
            store.put(namespace, key, {"v": 1})
        assert refused.value.reason == reason
        assert refused.value.message.startswith(f"the item's {words}")
    assert refused.value.metadata["limit"] == "1024"  # the last: the key's
    store.put(tuple(f"l{n}" for n in range(29)), "k" * 1_024, {"v": 1})  # the limits themselves
    assert [i.key for i in store.search(("l0",))] == ["k" * 1_024]
    assert len(client.list_memories(tenant).memories) == 1


def test_a_server_with_lower_caps_answers_every_search_and_listing(server_factory, tenant):
    """The store asks for the protocol's most (k 100, pages of 1,000); a server started with
    lower caps refused that (K_OUT_OF_RANGE, PAGE_SIZE_OUT_OF_RANGE), failing every search and
    listing. It names its cap in the refusal's ErrorInfo (``limit``); the store then asks for that
    and pages through: every item promised is returned, the recalled ones first."""
    server = server_factory(args=["--max-k", "3", "--max-page-size", "4"]).start()
    with MemoryClient(server.target) as client:
        with pytest.raises(InvalidArgumentError) as refused:
            client.recall(tenant, "anything", k=4)
        assert (refused.value.reason, refused.value.metadata["limit"]) == ("K_OUT_OF_RANGE", "3")
        with pytest.raises(InvalidArgumentError) as refused:
            client.list_memories(tenant, page_size=5)
        assert (refused.value.reason, refused.value.metadata["limit"]) == ("PAGE_SIZE_OUT_OF_RANGE", "4")
        store = MnemosyneStore(client, tenant)
        store.batch([PutOp(("docs", f"n{n % 2}"), f"k{n}", {"n": n, "topic": f"topic {n}"}) for n in range(9)])
        listed = store.search(("docs",), limit=20)
        assert sorted(item.value["n"] for item in listed) == list(range(9))
        found = store.search(("docs",), query="topic 7", limit=6)
        assert len(found) == 6 and found[0].value["n"] == 7
        assert len(store.search(("docs",), query="topic", filter={"n": {"$gte": 2}}, limit=20)) == 7
        assert store.list_namespaces(prefix=("docs",)) == [("docs", "n0"), ("docs", "n1")]
        assert store.get(("docs", "n1"), "k7").value == {"n": 7, "topic": "topic 7"}  # type: ignore[union-attr]  # found: asserted by its value
