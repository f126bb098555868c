"""Session consolidation: a finished session's memories become durable records, each receipt
applied exactly once (the agent-memory design's third writer; docs/consolidation.md).

A **session** is the memories of a tenant sharing a thread id (``thread`` on Retain). It is
finished when its newest memory is older than the idle time, or when a caller names it. Each scope
its memories are in (``global``, ``workspace/<name>``) is consolidated on its own, into that
scope's ``MEMORY.md``, under its own **receipt**: ``session-`` and 40 hex digits of the SHA-256 of
(thread id, scope, the ids of the session's live memories in that scope, and the SHA-256 of each
updated one's text). A memory's id is never reused, and an update's text is named, so the same
session content always gives the same receipt, and a session that grows, loses a forgotten memory
or has one updated gets a new one.

Per scope, in this order (``SessionConsolidator._scope``):

1. the receipt was applied: report ``already applied``, call no model;
2. a proposal is journaled for the receipt (``consolidation_journal``): use it, call no model;
3. else propose (the rules, or one model call, outside any transaction) and journal the proposal,
   with the model calls it cost, in one transaction — before any commit of records;
4. read the record and its generation (one snapshot), merge the proposal's section onto it (only
   the lines the record does not hold), and commit through ``Workspaces.consolidate`` with the
   generation just read and the receipt; the same transaction applies the receipt and drops the
   journal row. A ``GENERATION_MISMATCH`` (someone wrote meanwhile) re-reads and merges again on
   top of the newer record; the ``MAX_CONFLICTS``-th conflict gives up and says so. A
   section every line of which the record already holds is ``nothing new``: no write.

A process killed anywhere re-runs to the same end: after step 3 the proposal is on disk (no second
model call), after step 4 the receipt is (``already applied``). Only a kill between the model's
answer and the journal's commit (microseconds) costs one more call.

Two proposers: ``RulesProposer`` (the default: no network, deterministic, the same section for the
same memories) and ``ModelProposer`` (one call to the OpenAI-compatible chat API of the server's
``--extractor openai`` settings per scope; the prompt is ``SYSTEM_PROMPT``). Both produce
``Items`` (learned, decisions, open items) that ``render`` turns into a bounded section::

    ## Session chat-42 — 2026-11-30 (3 memories, positions 0-2)
    - learned: the staging database is db-stage-2
    - decided: we ship on Thursday
    - open: who owns the rollback plan?
"""

from __future__ import annotations

import abc
import hashlib
import json
import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from mnemosyne.engine import changers, relative_time
from mnemosyne.engine import limits as check
from mnemosyne.engine.chat_api import ChatClient, LLMSettings, Purpose, rejected
from mnemosyne.engine.config import EngineConfig
from mnemosyne.engine.extractor import Extractor
from mnemosyne.engine.llm_extractor import OpenAIExtractor
from mnemosyne.engine.observer import EngineObserver
from mnemosyne.engine.types import (
    ALREADY_APPLIED,
    APPLIED,
    GAVE_UP,
    GLOBAL_SCOPE,
    NOTHING_NEW,
    RecordChange,
    ScopeOutcome,
    ThreadRef,
)
from mnemosyne.engine.workspace import MAIN_RECORD, Workspaces
from mnemosyne.errors import Conflict, InvalidArgument, MnemosyneError, NotFound
from mnemosyne.runtime import background
from mnemosyne.runtime.seams import Seams
from mnemosyne.store.pool import TenantPool
from mnemosyne.store.tenant_ids import validate_tenant
from mnemosyne.store.tenant_store import TenantStore

log = logging.getLogger("mnemosyne.consolidator")

REASON = "CONSOLIDATION_FAILED"
# Bounds of one session's consolidation: memories read, items kept, characters of an item, bytes
# of the section; conflicts (newer writes) survived before giving up; finished threads taken by
# one call without a thread.
MAX_SESSION_MEMORIES = 1_000
MAX_ITEMS = 40
MAX_ITEM_CHARS = 300
MAX_SECTION_BYTES = 8_192
MAX_CONFLICTS = 3
MAX_THREADS_PER_CALL = 100
# How long the hold seam waits at most for its file to go.
HOLD_SECONDS = 30.0


class _Withdrawn(Exception):
    """A session's proposal quotes a memory updated or forgotten before it was applied."""


@dataclass(frozen=True)
class SessionMemory:
    id: int
    scope: str
    text: str
    position: int
    occurred_at: int | None  # unix microseconds
    updated: bool = False  # its text may no longer be the one its id was retained with


@dataclass(frozen=True)
class Items:
    """What a session taught, in order: learned facts, decisions, open items."""

    learned: tuple[str, ...] = ()
    decisions: tuple[str, ...] = ()
    open_items: tuple[str, ...] = ()


# -- proposing ----------------------------------------------------------------------------------


class Proposer(abc.ABC):
    """Contract: ``propose`` is called outside every store transaction, may be slow, raises only a
    MnemosyneError (nothing is journaled or written then), and returns the items with the number
    of model calls it made."""

    name: str = "proposer"

    @abc.abstractmethod
    def propose(self, thread_id: str, memories: Sequence[SessionMemory]) -> tuple[Items, int]: ...


_SPEAKERS = frozenset({"user", "assistant", "system", "tool"})  # a conversation's lines (engine/conversation.py)
_OPEN_MARKS = ("?", "todo", "to do:", "open question", "follow up", "follow-up", "tbd", "not yet", "still need")
_DECISION_MARKS = ("decided", "decision", "we will ", "we'll ", "agreed", "chose ", "going with", "settled on")


def _one_line(text: str) -> str:
    line = " ".join(text.split())
    return line if len(line) <= MAX_ITEM_CHARS else line[: MAX_ITEM_CHARS - 1].rstrip() + "…"


def rules_items(texts: Sequence[str]) -> Items:
    """The rules' reading of a session: every line of every memory (a conversation's speaker
    prefix removed) is an item, once; a question or a to-do is open, a decision is decided, the
    rest is learned. Deterministic: the same texts give the same items."""
    kinds: dict[str, list[str]] = {"learned": [], "decisions": [], "open": []}
    seen: set[str] = set()
    for text in texts:
        for raw in text.splitlines():
            speaker, colon, rest = raw.partition(": ")
            line = _one_line(rest if colon and speaker.strip().lower() in _SPEAKERS else raw)
            if not line or line.lower() in seen:
                continue
            seen.add(line.lower())
            lower = line.lower()
            kind = (
                "open"
                if any(mark in lower for mark in _OPEN_MARKS)
                else "decisions"
                if any(mark in lower for mark in _DECISION_MARKS)
                else "learned"
            )
            kinds[kind].append(line)
    return Items(tuple(kinds["learned"]), tuple(kinds["decisions"]), tuple(kinds["open"]))


class RulesProposer(Proposer):
    name = "rules"

    def propose(self, thread_id: str, memories: Sequence[SessionMemory]) -> tuple[Items, int]:
        return rules_items([m.text for m in memories]), 0


SYSTEM_PROMPT = """\
You consolidate one finished session of an agent's memory into durable notes. The user message
lists the session's memories, one per line, oldest first, each as "[position] text". Answer with
ONE JSON object and nothing else:
{"learned": ["..."], "decisions": ["..."], "open_items": ["..."]}
- learned: facts, preferences and results worth remembering after this session.
- decisions: what was decided or agreed.
- open_items: questions left open and work still to do.
Each entry is one short sentence taken from the memories; never invent content. At most 40
entries in all; use empty lists when there is nothing to keep."""
MAX_PROMPT_MEMORY_CHARS = 2_000
MAX_PROMPT_CHARS = 100_000
PURPOSE = Purpose(REASON, "consolidation", "nothing was journaled or written; run the consolidation again later")


def prompt_lines(memories: Sequence[SessionMemory]) -> str:
    """The user message of the model call: a memory per line, bounded."""
    lines: list[str] = []
    size = 0
    for memory in memories:
        line = f"[{memory.position}] {' '.join(memory.text.split())[:MAX_PROMPT_MEMORY_CHARS]}"
        size += len(line) + 1
        if size > MAX_PROMPT_CHARS:
            break
        lines.append(line)
    return "\n".join(lines)


def parse_items(content: str) -> Items:
    """The model's answer to Items, all or nothing (a malformed answer raises CONSOLIDATION_FAILED)."""
    try:
        answer = json.loads(content)
    except json.JSONDecodeError as exc:
        raise rejected(PURPOSE, "invalid_json", f"not JSON: {exc.msg} at character {exc.pos}") from None
    keys = ("learned", "decisions", "open_items")
    if not isinstance(answer, dict) or not all(isinstance(answer.get(key), list) for key in keys):
        raise rejected(
            PURPOSE, "invalid_answer", 'expected {"learned": [...], "decisions": [...], "open_items": [...]}'
        )
    lists: list[tuple[str, ...]] = []
    for key in keys:
        entries = answer[key]
        if not all(isinstance(e, str) and e.strip() and "\x00" not in e for e in entries):
            raise rejected(PURPOSE, "invalid_answer", f"{key} holds an entry that is not a non-empty string")
        lists.append(tuple(_one_line(e) for e in entries))
    if sum(len(entries) for entries in lists) > 4 * MAX_ITEMS:
        raise rejected(PURPOSE, "invalid_answer", f"more than {4 * MAX_ITEMS} entries")
    return Items(*lists)


class ModelProposer(Proposer):
    """One chat-completion call per proposal (the extractor's settings and client code)."""

    name = "model"

    def __init__(
        self,
        settings: LLMSettings,
        *,
        fallback: Proposer | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.chat = ChatClient(settings, PURPOSE, sleep=sleep)
        self.fallback = fallback

    def propose(self, thread_id: str, memories: Sequence[SessionMemory]) -> tuple[Items, int]:
        try:
            return parse_items(self.chat.complete(SYSTEM_PROMPT, prompt_lines(memories))), 1
        except MnemosyneError as exc:
            if self.fallback is None:
                raise
            log.warning("model consolidation failed (%s: %s); using the rules", exc.reason, exc.message)
            return self.fallback.propose(thread_id, memories)[0], 1


# -- the section --------------------------------------------------------------------------------


def _date(microseconds: int) -> str:
    return relative_time.day_of(microseconds).isoformat()  # in integers: 9999's last µs is no float


def heading(thread_id: str, memories: Sequence[SessionMemory]) -> str:
    """``## Session <id> — <dates> (<n> memories, positions <lo>-<hi>)``: no clock, only what the
    memories say (their occurred_at dates, when they have them)."""
    dates = sorted({_date(m.occurred_at) for m in memories if m.occurred_at is not None})
    when = f" — {dates[0]}" + (f" to {dates[-1]}" if len(dates) > 1 else "") if dates else ""
    positions = [m.position for m in memories]
    count = f"{len(memories)} memor{'y' if len(memories) == 1 else 'ies'}"
    return f"## Session {thread_id}{when} ({count}, positions {min(positions)}-{max(positions)})"


def render(thread_id: str, memories: Sequence[SessionMemory], items: Items) -> str:
    """The section: a heading, then an item per line, at most MAX_ITEMS lines and
    MAX_SECTION_BYTES bytes; a last line counts what did not fit."""
    lines = [heading(thread_id, memories)]
    entries = [
        *(f"- learned: {e}" for e in items.learned),
        *(f"- decided: {e}" for e in items.decisions),
        *(f"- open: {e}" for e in items.open_items),
    ]
    entries = list(dict.fromkeys(entries))
    size = len(lines[0].encode()) + 1
    kept = 0
    for entry in entries[:MAX_ITEMS]:
        size += len(entry.encode()) + 1
        if size > MAX_SECTION_BYTES - 100:
            break
        lines.append(entry)
        kept += 1
    if kept < len(entries):
        lines.append(f"- ({len(entries) - kept} more in thread {thread_id}, not shown)")
    return "\n".join(lines)


def merged(record: str, section: str, receipt_id: str) -> str | None:
    """The record with the section's lines it does not hold appended; None when it holds every
    item already (nothing new). A heading the record already holds gets the receipt's name."""
    present = {line.strip() for line in record.splitlines() if line.strip()}
    title, *entries = section.splitlines()
    fresh = [line for line in entries if line.strip() not in present]
    if not fresh:
        return None
    if title in present:
        title = f"{title} [{receipt_id}]"
    body = "\n".join([title, *fresh]) + "\n"
    return body if not record.strip() else record.rstrip("\n") + "\n\n" + body


# -- the consolidator ---------------------------------------------------------------------------


def receipt_id(thread_id: str, scope: str, memories: Sequence[SessionMemory]) -> str:
    """An update keeps the id, so its text is named too; none updated: the receipt of before."""
    updated = sorted([m.id, hashlib.sha256(m.text.encode()).hexdigest()] for m in memories if m.updated)
    named = [thread_id, scope, sorted(m.id for m in memories), *([updated] if updated else [])]
    digest = hashlib.sha256(json.dumps(named).encode()).hexdigest()
    return f"session-{digest[:40]}"


def validate_thread_id(thread_id: str) -> str:
    check.validate_thread(ThreadRef(thread_id, 0), field="thread")
    return thread_id


class SessionConsolidator:
    """Consolidates sessions of a tenant (``consolidate``) and, for the tenants of
    ``ConsolidationConfig.tenants``, in the background (``start``/``stop``) at idle priority."""

    def __init__(
        self,
        *,
        pool: TenantPool,
        workspaces: Workspaces,
        proposer: Proposer,
        observer: EngineObserver,
        config: EngineConfig,
        seams: Seams,
    ) -> None:
        self._pool = pool
        self._workspaces = workspaces
        self.proposer = proposer
        self._observer = observer
        self._seams = seams
        self.settings = config.consolidation
        for tenant in self.settings.tenants:
            validate_tenant(tenant)  # refused at start, not at every background pass
        if not self.settings.idle_seconds > 0:
            raise InvalidArgument(
                f"the consolidation idle time must be more than 0 seconds, not {self.settings.idle_seconds}",
                reason="CONSOLIDATE_IDLE_INVALID",
            )
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._locks_guard = threading.Lock()
        self._locks: dict[str, tuple[threading.Lock, int]] = {}

    # -- one call -----------------------------------------------------------------------------

    def consolidate(self, tenant: str, thread_id: str = "") -> list[ScopeOutcome]:
        """Consolidate one named thread (finished because the caller says so), or, without one,
        every thread idle for ``idle_seconds`` that has memories newer than its last completed
        consolidation (at most MAX_THREADS_PER_CALL). Scopes are done in order (global first); an
        error stops the call and leaves the scopes done so far done (a re-run goes on from there).
        A thread whose scopes all ended applied, already applied or with nothing new is marked
        consolidated through its newest memory."""
        if thread_id:
            validate_thread_id(thread_id)
            threads = [thread_id]
        else:
            threads = self._idle_threads(tenant)
        outcomes: list[ScopeOutcome] = []
        for thread in threads:
            done, newest = self._session_of(tenant, thread, named=bool(thread_id))
            outcomes.extend(done)
            if all(o.outcome != GAVE_UP for o in done):
                with self._pool.tenant(tenant, create=False) as store:
                    assert store is not None
                    with store.write() as txn:
                        txn.mark_thread_consolidated(thread, newest)
        return outcomes

    def _session_of(self, tenant: str, thread: str, *, named: bool) -> tuple[list[ScopeOutcome], int]:
        """The thread's scopes consolidated, from one read of its session; read again when a
        memory of it was updated or forgotten before its proposal was applied (never applied
        then: the proposal may quote what the memory no longer holds)."""
        for _attempt in range(MAX_CONFLICTS):
            sessions, newest = self._sessions(tenant, thread)
            if not sessions and named:
                raise NotFound(
                    f"thread {thread[:80]!r} has no memories in this tenant to consolidate", reason="THREAD_NOT_FOUND"
                )
            try:
                return [self._scope(tenant, thread, scope, memories) for scope, memories in sessions], newest
            except _Withdrawn:
                continue
        raise Conflict(
            "the session's memories changed repeatedly during its consolidation; retry", reason="WRITE_CONTENDED"
        )

    def _idle_threads(self, tenant: str) -> list[str]:
        with self._pool.tenant(tenant, create=False) as store:
            if store is None:
                return []
            with store.read() as txn:
                return txn.threads_to_consolidate(
                    idle_before=time.time() - self.settings.idle_seconds, limit=MAX_THREADS_PER_CALL
                )

    def _sessions(self, tenant: str, thread: str) -> tuple[list[tuple[str, list[SessionMemory]]], int]:
        """The thread's live memories by scope (global first, then workspaces by name), each in
        thread order, from one snapshot; and the thread's newest memory id (forgotten ones too)."""
        by_scope: dict[str, list[SessionMemory]] = {}
        with self._pool.tenant(tenant, create=False) as store:
            if store is None:
                return [], 0
            with store.read() as txn:
                ids = txn.list_thread_ids(
                    thread, scope=None, after=None, limit=MAX_SESSION_MEMORIES, include_forgotten=False
                )
                for row in txn.memories_by_ids(ids, with_details=False).values():
                    if not row.forgotten and not row.merged_into:
                        place, updated = row.thread_position or 0, row.updated_at > 0
                        memory = SessionMemory(row.id, row.scope, row.body, place, row.occurred_at, updated)
                        by_scope.setdefault(row.scope, []).append(memory)
                newest = txn.thread_newest_id(thread)
        sessions = [(scope, sorted(ms, key=lambda m: (m.position, m.id))) for scope, ms in by_scope.items()]
        return sorted(sessions, key=lambda item: (item[0] != GLOBAL_SCOPE, item[0])), newest

    def _applied(self, tenant: str, thread: str, scope: str, receipt: str) -> ScopeOutcome | None:
        with self._pool.tenant(tenant, create=False) as store:
            assert store is not None
            with store.read() as txn:
                prior = txn.find_receipt(receipt)
        if prior is None:
            return None
        generation = int(json.loads(prior[2])["generation"])
        return ScopeOutcome(thread, scope, receipt, ALREADY_APPLIED, generation, 0, 0)

    def _scope(self, tenant: str, thread: str, scope: str, memories: list[SessionMemory]) -> ScopeOutcome:
        receipt = receipt_id(thread, scope, memories)
        with self._proposing(receipt):  # one proposal per receipt in this process at a time
            applied = self._applied(tenant, thread, scope, receipt)
            if applied is not None:
                return applied
            section, model_calls = self._proposal(tenant, thread, scope, receipt, memories)
        conflicts = 0
        while True:
            record, generation = self._record(tenant, scope)
            content = merged(record, section, receipt)
            if content is None:
                return ScopeOutcome(thread, scope, receipt, NOTHING_NEW, generation, model_calls, conflicts)
            self._hold(attempt=conflicts + 1)
            try:
                result = self._workspaces.consolidate(
                    tenant,
                    scope,
                    [RecordChange("put", MAIN_RECORD, content)],
                    expected_generation=generation,
                    receipt_id=receipt,
                    journaled=True,
                )
            except Conflict as exc:
                if exc.reason == "PROPOSAL_WITHDRAWN":
                    raise _Withdrawn from exc
                if exc.reason != "GENERATION_MISMATCH":
                    raise
                conflicts += 1
                if conflicts == MAX_CONFLICTS:
                    log.warning("consolidation of a thread gave up after %d conflicts in %s", conflicts, scope)
                    return ScopeOutcome(thread, scope, receipt, GAVE_UP, generation, model_calls, conflicts)
                continue  # someone wrote meanwhile: merge on top of what they wrote
            outcome = ALREADY_APPLIED if result.already_applied else APPLIED
            return ScopeOutcome(thread, scope, receipt, outcome, result.generation, model_calls, conflicts)

    @contextmanager
    def _proposing(self, receipt: str) -> Iterator[None]:
        """Held from the receipt check to the journal's commit: a concurrent run of the same
        receipt (the background and a caller) waits, then finds the proposal, calling no model."""
        with self._locks_guard:
            lock, users = self._locks.get(receipt, (threading.Lock(), 0))
            self._locks[receipt] = (lock, users + 1)
        try:
            with lock:
                yield
        finally:
            with self._locks_guard:
                lock, users = self._locks[receipt]
                if users == 1:
                    del self._locks[receipt]
                else:
                    self._locks[receipt] = (lock, users - 1)

    def _proposal(
        self, tenant: str, thread: str, scope: str, receipt: str, memories: list[SessionMemory]
    ) -> tuple[str, int]:
        """(section, model calls made now): the journaled one, else a new one journaled."""
        with self._pool.tenant(tenant, create=False) as store:
            assert store is not None
            with store.read() as txn:
                journaled = txn.journaled_proposal(receipt)
        if journaled is not None:
            return journaled[0], 0
        items, model_calls = self.proposer.propose(thread, memories)
        section = render(thread, memories, items)
        with self._pool.tenant(tenant, create=False) as store:
            assert store is not None
            section = self._journal(store, thread, scope, receipt, section, model_calls, memories)
        self._observer.consolidation_proposed(model_calls=model_calls)
        self._seams.committed("consolidation_proposal")  # the kill-after-the-model-answered seam
        return section, model_calls

    def _journal(
        self,
        store: TenantStore,
        thread: str,
        scope: str,
        receipt: str,
        section: str,
        calls: int,
        memories: Sequence[SessionMemory],
    ) -> str:
        with store.write() as txn:
            already = txn.journaled_proposal(receipt)  # a concurrent run journaled first: use its
            if already is not None:
                return already[0]
            rows = txn.memories_by_ids([m.id for m in memories], with_details=False)
            for m in memories:  # proposed from memories a forget or an update changed meanwhile: withdrawn
                row = rows.get(m.id)
                if row is None or row.forgotten or row.merged_into or row.body != m.text:
                    raise _Withdrawn
            txn.journal_proposal(
                receipt,
                thread_id=thread,
                scope=scope,
                section=section,
                consolidator=self.proposer.name,
                model_calls=calls,
            )
            txn.add_counters({"consolidation_model_calls": calls, "consolidation_proposals": 1})
        return section

    def _record(self, tenant: str, scope: str) -> tuple[str, int]:
        """The scope's MEMORY.md ("" when absent) and its generation, from one snapshot."""
        with self._pool.tenant(tenant, create=False) as store:
            assert store is not None
            with store.read() as txn:
                content = txn.record(scope, MAIN_RECORD) or ""
                stored = txn.scope_generation(scope)
        return content, self._seams.generation_base if stored is None else stored

    def _hold(self, *, attempt: int) -> None:
        """Test seam: before commit attempt N, while the hold file exists and ``<file>.goN`` does
        not, wait (after creating ``<file>.heldN``)."""
        hold = self._seams.hold_consolidation_file
        if hold is None or not hold.exists():
            return
        hold.with_name(f"{hold.name}.held{attempt}").touch()
        go = hold.with_name(f"{hold.name}.go{attempt}")
        deadline = time.monotonic() + HOLD_SECONDS
        while hold.exists() and not go.exists() and time.monotonic() < deadline:
            time.sleep(0.02)

    # -- the background ---------------------------------------------------------------------------

    def start(self) -> None:
        if self.settings.tenants and self._thread is None:
            self._thread = threading.Thread(target=self._run, name="consolidator", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
            self._thread = None

    def _run(self) -> None:
        background.become_background_thread()
        changers.set_changer(changers.CONSOLIDATOR.surface, "")  # its record revisions are its own
        while not self._stop.wait(self.settings.interval_seconds):
            membership = self._pool.membership
            for tenant in self.settings.tenants:
                if self._stop.is_set():
                    return
                if membership is not None and membership.owner(tenant) != membership.me:
                    continue  # another member's (each member may be given the same list)
                try:
                    for outcome in self.consolidate(tenant):
                        log.info(
                            "background consolidation of a thread in %s: %s (generation %d, %d model calls)",
                            outcome.scope,
                            outcome.outcome,
                            outcome.generation,
                            outcome.model_calls,
                        )
                except MnemosyneError as exc:
                    log.warning("background consolidation failed: %s [%s]", exc.message, exc.reason)
                except Exception:  # a bug must not end the thread: the next pass tries again
                    log.exception("background consolidation failed")


def proposer_for(extractor: Extractor) -> Proposer:
    """The model proposer when the server extracts with the model plug-in (its settings, and its
    fallback to the rules), else the rules."""
    if isinstance(extractor, OpenAIExtractor):
        return ModelProposer(extractor.settings, fallback=RulesProposer() if extractor.fallback is not None else None)
    return RulesProposer()
