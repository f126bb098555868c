"""The OpenAI Agents SDK on Mnemosyne (extra ``agents``; docs/integrations.md): a ``Session`` that
keeps a conversation's items, and memory tools for an agent, with host-owned generations.

* ``MnemosyneSession`` is the SDK's ``Session``: the items the SDK hands it, kept verbatim and in
  order, duplicates included. A conversation log, not memories: nothing is extracted,
  deduplicated or recalled from it. It lives in the records of a workspace of its own
  (``session-<id>``), as JSON lines, several items to a record; every change is an
  ``EditRecords`` at the generation it read, so two writers of one session never lose an item
  (the one that lost the race reads again and appends after the other).
* ``MemoryTools`` gives an agent the memory of a tenant's Global scope and one workspace: dynamic
  instructions that assemble the context (records, and memories recalled for the latest user
  message) and the model's tools ``memory_update`` and ``update_workspace``, under the host rules
  of ``MemoryHost`` (host/protocol.py: the model never sees a generation; a write is checked
  against what its context showed and a stale one fails).

In this SDK an ``Agent`` is configuration shared by every run and user, so an observation is
keyed by the agent AND the run's context object (``Runner.run(..., context=...)``: the session,
or any object proper to one conversation), never by the agent alone: two runs of one agent in
two sessions each write against what their own context showed.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import threading
import weakref
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

from agents import Agent, FunctionTool, RunContextWrapper, Tool
from agents.memory import SessionSettings
from agents.memory.session_settings import resolve_session_limit
from agents.tool_context import ToolContext

from mnemosyne.client import AbortedError, InvalidArgumentError, MemoryClient, MemoryHost, RecordChange
from mnemosyne.host.protocol import usable_query
from mnemosyne.host.unicode import lone_surrogate

if TYPE_CHECKING:
    from agents.items import TResponseInputItem

# A record holds the items of one or more add_items calls up to this many bytes, so a session of
# N bytes is about N / 64 KiB records (a workspace holds at most 1,000 by default) and an append
# rewrites at most 64 KiB. A single item may be as large as a record (256 KiB by default).
RECORD_BYTES = 65_536
MAX_CHANGES = 100  # changes of one EditRecords (engine/workspace.py MAX_CHANGES)
ATTEMPTS = 20  # edits of one change tried before giving up to writers that always come first
_READABLE_ID = re.compile(r"[A-Za-z0-9_-]{1,56}")
_WORKSPACE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")  # engine/limits.py SCOPE_PATTERN's


def session_workspace(session_id: str) -> str:
    """The workspace holding ``session_id``'s items: ``session-<id>`` for an id of up to 56
    letters, digits, "_" and "-"; else ``session.<digest>`` (a workspace name has no other
    characters; the "." keeps the two forms apart). Raises TypeError for an id that is no string
    and ValueError for one holding half of a surrogate pair (no digest, nor request, can be made of
    it)."""
    if not isinstance(session_id, str):
        raise TypeError(f"a session id is a string, not {type(session_id).__name__}")
    if _READABLE_ID.fullmatch(session_id):
        return f"session-{session_id}"
    refusal = lone_surrogate(session_id, f"session id {session_id[:80]!r}")
    if refusal is not None:
        raise ValueError(refusal)  # no workspace can be named after it
    return "session." + hashlib.sha256(session_id.encode("utf-8")).hexdigest()[:40]


class MnemosyneSession:
    """The SDK's ``Session`` for conversation ``session_id``, kept in ``tenant`` through
    ``client`` (a ``MemoryClient``). ``session_settings``: the SDK's (its ``limit`` is the
    default of ``get_items``). Raises TypeError or ValueError for an id no workspace can be named
    after (``session_workspace``), and the client's errors: ``InvalidArgumentError``
    RECORD_TOO_LARGE for one item over the server's --max-record-bytes, ResourceExhaustedError
    RECORDS_LIMIT for a session past its workspace's records, ``AbortedError`` GENERATION_MISMATCH
    after ``ATTEMPTS`` edits that another writer always came before."""

    def __init__(
        self, session_id: str, client: MemoryClient, tenant: str, *, session_settings: SessionSettings | None = None
    ) -> None:
        self.session_id = session_id
        self.session_settings = session_settings
        self.client = client
        self.tenant = tenant
        self.scope = "workspace/" + session_workspace(session_id)

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """The session's items in the order they were added; with ``limit`` N > 0 the latest N
        (0: none; None or negative: all), as the SDK's own sessions answer."""
        limit = resolve_session_limit(limit, self.session_settings)
        if limit is not None and not isinstance(limit, int):  # 1.5 failed in a slice; NaN answered all
            raise TypeError(f"limit is a whole number of items or None, not {limit!r}")
        _, records = await asyncio.to_thread(self._read)
        lines = [(key, line) for key, held in records for line in held]
        if limit is not None and limit >= 0:
            lines = lines[max(0, len(lines) - limit) :] if limit else []
        return [self._item(key, line) for key, line in lines]

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Append ``items`` (verbatim: each must be JSON-serialisable, as the SDK's items are)."""
        if items:
            lines = [_line(item) for item in items]
            await asyncio.to_thread(self._edit, lambda records: self._appended(records, lines))

    async def pop_item(self) -> TResponseInputItem | None:
        """Remove the latest item and return it (None when the session is empty)."""
        popped: list[TResponseInputItem] = []

        def without_last(records: Records) -> list[RecordChange]:
            popped.clear()
            if not records:
                return []
            key, held = records[-1]
            # Parsed before the edit is made: an item that cannot be read back is never removed.
            popped.append(self._item(key, held[-1]))
            return [RecordChange("put", key, _content(held[:-1])) if held[1:] else RecordChange("delete", key)]

        await asyncio.to_thread(self._edit, without_last)
        return popped[0] if popped else None

    async def clear_session(self) -> None:
        """Remove every item of the session (``MAX_CHANGES`` records an edit)."""
        while await asyncio.to_thread(
            self._edit, lambda records: [RecordChange("delete", key) for key, _ in records[:MAX_CHANGES]]
        ):
            pass

    # -- the records ------------------------------------------------------------------------------

    def _item(self, key: str, line: str) -> TResponseInputItem:
        """The item of ``line`` (of record ``key``); raises ValueError naming the record when the
        line is no JSON (the record was changed outside the session)."""
        try:
            item: TResponseInputItem = json.loads(line)
        except ValueError:
            raise ValueError(
                f"session {self.session_id!r}: record {key!r} of {self.scope} holds a line that is no JSON item "
                f"({line[:40]!r}...): it was changed outside the session; fix or delete that record"
            ) from None
        return item

    def _appended(self, records: Records, lines: Sequence[str]) -> list[RecordChange]:
        """``_appended``, after the last record: raises ValueError naming it when its key is not
        one the session makes (a record added outside it), which no item can be numbered after."""
        if records and not _RECORD_KEY.fullmatch(records[-1][0]):
            raise ValueError(
                f"session {self.session_id!r}: record {records[-1][0]!r} of {self.scope} is not one of the "
                f"session's (they are numbered: {_record_key(0)}, ...): it was added outside the session, and "
                "no item can be appended after it; delete it, or move its items into the session"
            )
        return _appended(records, lines)

    def _read(self) -> tuple[int, Records]:
        listed = self.client.list_records(self.tenant, self.scope)
        return listed.generation, [(r.key, _lines(r.content)) for r in listed.records]

    def _edit(self, changes_of: Callable[[Records], list[RecordChange]]) -> int:
        """Apply ``changes_of(records)`` in one edit at the generation the records were read at;
        when another writer came first, read again and make the changes again. Returns how many
        changes were applied."""
        refused: AbortedError | None = None
        for _attempt in range(ATTEMPTS):
            generation, records = self._read()
            changes = changes_of(records)
            if not changes:
                return 0
            try:
                self.client.edit_records(self.tenant, self.scope, changes, generation)
                return len(changes)
            except AbortedError as error:
                if error.reason != "GENERATION_MISMATCH":
                    raise
                refused = error
        assert refused is not None
        raise AbortedError(
            refused.code,
            refused.reason,
            f"session {self.session_id!r} changed under each of {ATTEMPTS} edits; try again",
            refused.metadata,
        )


# A session's records in order: each record's key and its items, one JSON text a line.
Records = list[tuple[str, list[str]]]


def _line(item: object) -> str:
    """An item's JSON line: its text as written, unless it holds half of a surrogate pair, which
    no record (UTF-8) can hold: then its JSON escapes, as the SDK's SQLiteSession writes every
    item, so it comes back verbatim."""
    line = json.dumps(item, ensure_ascii=False)
    return line if lone_surrogate(line, "an item") is None else json.dumps(item)


def _lines(content: str) -> list[str]:
    """A record's items, one a line. A line ends at LF alone: JSON escapes LF inside strings, but
    an item holds the other line breaks ``str.splitlines`` knows (U+2028, U+0085...) raw, as
    ``json.dumps(..., ensure_ascii=False)`` writes them."""
    return [line for line in content.split("\n") if line]


def _content(lines: Sequence[str]) -> str:
    return "".join(line + "\n" for line in lines)


def _appended(records: Records, lines: Sequence[str]) -> list[RecordChange]:
    """Records putting ``lines`` after ``records``: the last record grown while it stays under
    RECORD_BYTES, then new records numbered after it (their keys sort as their order)."""
    changes: list[RecordChange] = []
    key, pending = records[-1] if records else (None, [])
    unchanged = _content(pending)  # the last record as it is: put again only once it has grown
    number = int(key.partition(".")[0]) if key is not None else 0
    for line in lines:
        if pending and len(_content([*pending, line]).encode("utf-8")) > RECORD_BYTES:
            if key is None or _content(pending) != unchanged:
                changes.append(RecordChange("put", key or _record_key(number), _content(pending)))
            key, pending, number = None, [], number + 1
        pending = [*pending, line]
    changes.append(RecordChange("put", key or _record_key(number), _content(pending)))
    if len(changes) > MAX_CHANGES:
        raise ValueError(
            f"these items need {len(changes)} records of {RECORD_BYTES} bytes; one add takes at most {MAX_CHANGES}"
        )
    return changes


def _record_key(number: int) -> str:
    return f"{number:012d}.jsonl"


_RECORD_KEY = re.compile(r"[0-9]{12,}\.jsonl")  # the keys _record_key makes


# -- memory tools --------------------------------------------------------------------------------


class Conversation:
    """The key of one agent's observation in one run context: made once for the pair, alive while
    both the agent and the context are (``HostObservations`` holds it weakly)."""


class Conversations:
    """(agent, run context) → its ``Conversation``, by identity, forgetting a pair when either
    object is collected."""

    def __init__(self) -> None:
        # Re-entrant: a collection inside the locked section may run a removal callback here.
        self._lock = threading.RLock()
        self._pairs: dict[tuple[int, int], tuple[weakref.ref[Any], weakref.ref[Any], Conversation]] = {}

    def of(self, agent: object, context: object) -> Conversation:
        """The conversation of ``agent`` in ``context``; raises TypeError for a context that is
        None or cannot be weakly referenced (pass the run an object of its own)."""
        pair = (id(agent), id(context))
        with self._lock:
            held = self._pairs.get(pair)
            if held is not None and held[0]() is agent and held[1]() is context:
                return held[2]
            conversation = Conversation()

            def gone(_: weakref.ref[Any], pair: tuple[int, int] = pair) -> None:
                with self._lock:
                    if self._pairs.get(pair, (None, None, None))[2] is conversation:
                        del self._pairs[pair]

            try:
                self._pairs[pair] = (weakref.ref(agent, gone), weakref.ref(context, gone), conversation)
            except TypeError:
                raise TypeError(
                    f"the memory tools key what an agent saw by its run's context, and a "
                    f"{type(context).__name__} cannot be one: give each conversation an object of its own, "
                    "e.g. Runner.run(agent, input, session=session, context=session)"
                ) from None
            return conversation


class MemoryTools:
    """Memory for the agents of ``tenant`` (through ``client``), in the Global scope and
    ``workspace``: ``instructions(base)`` for an ``Agent``'s instructions, ``tools()`` for its
    tools. ``k``: memories recalled for the latest user message into each context (0, the
    default: the server's, 5 or its --max-k when lower; TypeError or ValueError for one no recall
    takes, the server's max_k refusing a larger one in the run). A ``workspace`` no scope can be
    named after is a TypeError or ValueError. Runs must carry a context object
    proper to their conversation (the module's docstring says why)."""

    def __init__(self, client: MemoryClient, tenant: str, workspace: str, *, k: int = 0) -> None:
        if isinstance(k, bool) or not isinstance(k, int):
            raise TypeError(f"k is a whole number of memories to recall (0: the server's default), not {k!r}")
        if k < 0:
            raise ValueError(f"k is a whole number of memories to recall, 0 (the server's default) or more, not {k!r}")
        _check_workspace(workspace)
        self.host = MemoryHost(client, tenant)
        self.workspace = workspace
        self.k = k
        self.conversations = Conversations()

    def instructions(self, base: str) -> Callable[[RunContextWrapper[Any], Agent[Any]], Awaitable[str]]:
        """Dynamic instructions: ``base``, then the memory context assembled for this agent in
        this run's context (which is what its next memory write is checked against)."""

        async def instructions(run: RunContextWrapper[Any], agent: Agent[Any]) -> str:
            conversation = self.conversations.of(agent, run.context)
            query = usable_query(_latest_user_text(run.turn_input))
            memory = await asyncio.to_thread(self._assemble, conversation, query)
            return f"{base}\n\n{memory}"

        return instructions

    def _assemble(self, conversation: Conversation, query: str | None) -> str:
        """The memory context, with memories recalled for ``query``; without them when the service
        takes no query of that text (only white space, a server's shorter limit): a user's message
        never ends the run."""
        try:
            return self.host.assemble_context(conversation, self.workspace, query, self.k)
        except InvalidArgumentError as error:
            if query is None or not error.reason.startswith("QUERY_"):
                raise
        return self.host.assemble_context(conversation, self.workspace, None, self.k)

    def tools(self) -> list[Tool]:
        """The model's tools ``memory_update`` and ``update_workspace`` (no generation in their
        schemas or results; a result is JSON, ``{"ok": false, "reason": "STALE_CONTEXT", ...}``
        when memory changed since this agent's context was assembled in this run)."""
        return [
            FunctionTool(
                name=schema["function"]["name"],
                description=schema["function"]["description"],
                params_json_schema=schema["function"]["parameters"],
                on_invoke_tool=self._invoker(schema["function"]["name"]),
                strict_json_schema=False,  # a put's content is optional for a delete
            )
            for schema in MemoryHost.tool_schemas("openai")
        ]

    def _invoker(self, name: str) -> Callable[[ToolContext[Any], str], Awaitable[str]]:
        async def invoke(call: ToolContext[Any], arguments: str) -> str:
            if call.agent is None:
                raise TypeError(f"the SDK gave the {name} call no agent: its context cannot be found")
            conversation = self.conversations.of(call.agent, call.context)
            result = await asyncio.to_thread(self.host.call_tool, conversation, name, arguments)
            return json.dumps(result, ensure_ascii=False)

        return invoke


def _check_workspace(workspace: str) -> None:
    """Refuse, when the tools are made, a workspace name every run's assembly would refuse
    (WORKSPACE_INVALID), as the session refuses its id when it is made."""
    if not isinstance(workspace, str):
        raise TypeError(f"a workspace name is a string, not {type(workspace).__name__}")
    if not _WORKSPACE_NAME.fullmatch(workspace):
        raise ValueError(
            f"workspace {workspace[:80]!r} is not valid: use 1-64 characters of letters, digits, '.', '_' and '-', "
            "the first a letter or digit"
        )


def _latest_user_text(items: Sequence[Any]) -> str | None:
    """The text of the latest user message of a turn's input (the query memories are recalled for)."""
    for item in reversed(items):
        if isinstance(item, dict) and item.get("role") == "user":
            content = item.get("content")
            if isinstance(content, str):
                return content or None
            # Parts of other kinds (an image), or a message not of the SDK's shape (a number for
            # content, a text that is no string), give no text: they never end the run.
            parts = content if isinstance(content, list | tuple) else ()
            texts = [part.get("text") for part in parts if isinstance(part, dict)]
            return " ".join(t for t in texts if isinstance(t, str) and t) or None
    return None


__all__ = ["MemoryTools", "MnemosyneSession", "session_workspace"]
