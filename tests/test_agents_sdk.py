"""The OpenAI Agents SDK on Mnemosyne (mnemosyne.integrations.agents, docs/integrations.md).

The session: one list of cases (``CASES``) runs against the SDK's own ``SQLiteSession`` and
against ``MnemosyneSession`` on a real server, each case's observations compared. The memory tools:
the SDK itself runs an Agent against a local server speaking the Chat Completions protocol
(``OpenAIChatCompletionsModel``; tracing off, no internet): two runs of one Agent at once, in two
sessions, both read memory before either writes; the second write is stale and fails, the first
run, its session and its write untouched.
"""

from __future__ import annotations

import asyncio
import json
import operator
import threading
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from agents import Agent, OpenAIChatCompletionsModel, RunConfig, RunContextWrapper, Runner, SQLiteSession
from agents.memory import Session, SessionSettings
from openai import AsyncOpenAI

from mnemosyne.client import RecordChange
from mnemosyne.engine.limits import SCOPE_PATTERN
from mnemosyne.integrations import agents as agents_integration
from mnemosyne.integrations.agents import MemoryTools, MnemosyneSession, session_workspace
from tests.chat_server import ChatServer

# -- the session, case by case against the SDK's SQLiteSession ----------------------------------

# The SDK types an item as a union of TypedDicts; a test builds and reads them as the dicts they are.
Item = Any


def message(role: str, text: str) -> Item:
    return {"role": role, "content": text}


async def read(s: Session, limit: int | None = None) -> list[Item]:
    return list(await s.get_items(limit))


CALL: Item = {
    "type": "function_call",
    "call_id": "call_1",
    "name": "memory_update",
    "arguments": '{"content": "ünïcode ✓"}',
    "id": "fc_1",
    "status": "completed",
}


async def order_and_duplicates(s: Session) -> Any:
    await s.add_items([message("user", "hi"), message("user", "hi")])
    await s.add_items([CALL, {"type": "function_call_output", "call_id": "call_1", "output": "ok"}])
    await s.add_items([])
    await s.add_items([message("assistant", "hi"), message("user", "hi")])
    return await read(s)


async def limits(s: Session) -> Any:
    await s.add_items([message("user", str(n)) for n in range(7)])
    # 8 and 12: more than the session holds, but fewer than twice as many (all 7, not the last 1 or 2)
    return [await read(s, limit) for limit in (None, 3, 1, 7, 8, 12, 50, 0, -1)]


async def pop(s: Session) -> Any:
    await s.add_items([message("user", "a"), message("user", "b")])
    await s.add_items([message("user", "c")])
    popped = [await s.pop_item() for _ in range(4)]
    await s.add_items([message("user", "d")])
    return [popped, await read(s)]


async def clear(s: Session) -> Any:
    await s.add_items([message("user", "a")])
    await s.clear_session()
    empty = await read(s)
    await s.clear_session()
    await s.add_items([message("user", "b")])
    return [empty, await read(s), await s.pop_item(), await s.pop_item()]


async def large_items_in_order(s: Session) -> Any:
    # Past one record's 64 KiB: the items spread over records and still read back in order.
    for n in range(6):
        await s.add_items([message("user", f"{n}:" + "x" * 30_000), message("assistant", str(n))])
    await s.pop_item()
    items = await read(s)
    return [len(items), [i["content"][:2] for i in items], await read(s, 3)]


async def settings_limit(s: Session) -> Any:
    await s.add_items([message("user", str(n)) for n in range(5)])
    return [await read(s), await read(s, 4)]


# Every line break str.splitlines knows (JSON escapes those below U+0020; the others it writes raw).
LINE_BREAKS = ["\n", "\r", "\r\n", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029"]


async def line_breaks_inside_items(s: Session) -> Any:
    await s.add_items([message("user", f"first line{b}second line") for b in LINE_BREAKS])
    await s.add_items([message("assistant", "ok")])
    return [await read(s), await s.pop_item(), await s.pop_item(), await s.pop_item(), await read(s)]


async def halves_of_surrogate_pairs(s: Session) -> Any:
    # Text a model or a tool can hand over that is not Unicode: SQLiteSession keeps it (its JSON
    # escapes); a record cannot hold it raw (gRPC's encoder raised UnicodeEncodeError).
    await s.add_items([message("user", "half \ud800 a pair"), message("assistant", "ok")])
    await s.add_items([message("user", "\udfff and ✓")])
    return [await read(s), await s.pop_item(), await read(s)]


CASES: list[Callable[[Session], Awaitable[Any]]] = [
    order_and_duplicates,
    limits,
    pop,
    clear,
    large_items_in_order,
    settings_limit,
    line_breaks_inside_items,
    halves_of_surrogate_pairs,
]


@pytest.mark.parametrize("case", CASES, ids=operator.attrgetter("__name__"))
def test_the_session_answers_as_the_sdks_sqlite_session(case, client, tenant):
    settings = SessionSettings(limit=2) if case is settings_limit else None
    expected = asyncio.run(case(SQLiteSession("s1", session_settings=settings)))
    assert expected
    assert asyncio.run(case(MnemosyneSession("s1", client, tenant, session_settings=settings))) == expected


def test_a_session_is_a_log_in_records_not_memories(client, tenant):
    session = MnemosyneSession("user 42 / chat", client, tenant)
    assert isinstance(session, Session)  # the SDK's protocol
    asyncio.run(session.add_items([message("user", "I love pizza"), message("user", "I love pizza")]))
    assert client.list_memories(tenant).memories == []  # nothing extracted, nothing to recall
    scope = "workspace/" + session_workspace("user 42 / chat")
    assert scope.startswith("workspace/session.")  # an id a workspace name cannot hold, by its digest
    [record] = client.list_records(tenant, scope).records
    assert record.content.count("I love pizza") == 2
    assert session_workspace("user-42") == "session-user-42"
    # Two sessions never share items.
    other = MnemosyneSession("user-42", client, tenant)
    assert asyncio.run(read(other)) == []
    # An id no workspace name can be made of: refused by the constructor, naming it and why (it
    # raised UnicodeEncodeError from hashlib, or TypeError from re for an id that is no string).
    for half in ("\ud800", "chat \udfff 42"):
        with pytest.raises(
            ValueError, match=r"session id .* half of a surrogate pair, .* send the character whole"
        ) as refused:
            MnemosyneSession(half, client, tenant)
        assert repr(half)[:40] in str(refused.value) and not isinstance(refused.value, UnicodeError)
    with pytest.raises(TypeError, match="a session id is a string, not int"):
        MnemosyneSession(42, client, tenant)  # type: ignore[arg-type]  # what the check refuses


def test_two_writers_of_one_session_lose_no_item(client, tenant):
    writers = [MnemosyneSession("shared", client, tenant) for _ in range(4)]

    async def write(n: int, session: MnemosyneSession) -> None:
        for i in range(5):
            await session.add_items([message("user", f"{n}-{i}")])

    async def all_at_once() -> None:
        await asyncio.gather(*(write(n, s) for n, s in enumerate(writers)))

    asyncio.run(all_at_once())
    items = [i["content"] for i in asyncio.run(read(writers[0]))]
    assert sorted(items) == sorted(f"{n}-{i}" for n in range(4) for i in range(5))
    for n in range(4):  # each writer's items in its own order
        mine = [i for i in items if i.startswith(f"{n}-")]
        assert mine == [f"{n}-{i}" for i in range(5)]


# -- an Agent's memory tools, two runs at once ------------------------------------------------------


def _said(body: dict[str, Any]) -> str:
    return next(str(m["content"]) for m in body["messages"] if m["role"] == "user")


def _tool_results(body: dict[str, Any]) -> list[str]:
    return [str(m["content"]) for m in body["messages"] if m["role"] == "tool"]


def test_two_runs_of_one_agent_in_two_sessions_write_against_their_own_context(client, tenant):
    """Run A and run B of ONE Agent both assemble memory (Global generation 0), then B writes
    MEMORY.md and finishes, then A writes: A's write is stale and fails (keyed by the agent alone,
    A would write over B's with what it never read); B's write, run and session are untouched."""
    b_wrote = threading.Event()
    systems: dict[str, list[str]] = {"A": [], "B": []}
    client.retain(tenant, "The courier comes on Tuesdays")

    def respond(body: dict[str, Any]) -> dict[str, Any]:
        run = "A" if "I am A" in _said(body) else "B"
        systems[run].append(next(str(m["content"]) for m in body["messages"] if m["role"] == "system"))
        results = _tool_results(body)
        if results:
            if run == "B":
                b_wrote.set()
            return {"role": "assistant", "content": f"{run} finished: {results[-1]}"}
        if run == "A":
            assert b_wrote.wait(30), "run B never wrote"
        tool_call = {"name": "memory_update", "arguments": json.dumps({"content": f"notes of {run}\n"})}
        return {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": f"call_{run}", "type": "function", "function": tool_call}],
        }

    with ChatServer(respond=respond) as chat:
        model = OpenAIChatCompletionsModel(
            model="scripted", openai_client=AsyncOpenAI(base_url=chat.base_url, api_key="x")
        )
        memory = MemoryTools(client, tenant, "notes")
        agent = Agent(
            name="notes", instructions=memory.instructions("You keep notes."), tools=memory.tools(), model=model
        )
        sessions = {run: MnemosyneSession(f"run-{run}", client, tenant) for run in "AB"}

        async def both() -> list[Any]:
            runs = [
                Runner.run(
                    agent,
                    f"I am {run}: when does the courier come?",
                    session=sessions[run],
                    context=sessions[run],
                    run_config=RunConfig(tracing_disabled=True),
                )
                for run in "AB"
            ]
            return await asyncio.gather(*runs)

        result_a, result_b = asyncio.run(both())

    a_result = json.loads(result_a.final_output.removeprefix("A finished: "))
    b_result = json.loads(result_b.final_output.removeprefix("B finished: "))
    assert b_result == {"ok": True, "result": "MEMORY.md was replaced."}
    assert a_result["ok"] is False and a_result["reason"] == "STALE_CONTEXT"
    assert "generation" not in json.dumps(a_result)  # never shown to the model
    record, generation = client.get_record(tenant, "global", "MEMORY.md")
    assert (record.content, generation) == ("notes of B\n", 1)
    # Both runs read memory before either wrote; each later turn of a run reads it again.
    assert "notes of" not in systems["A"][0] and "notes of" not in systems["B"][0]
    assert "The courier comes on Tuesdays" in systems["A"][0]  # recalled for the user's message
    assert "notes of B" in systems["A"][-1]
    # Each session holds its own run's items, in order: A's stale refusal never reached B's.
    kinds = {run: [i.get("type", "message") for i in asyncio.run(read(sessions[run]))] for run in "AB"}
    assert kinds["A"] == kinds["B"] == ["message", "function_call", "function_call_output", "message"]
    b_items = asyncio.run(read(sessions["B"]))
    assert b_items[0]["content"] == "I am B: when does the courier come?" and "STALE_CONTEXT" not in json.dumps(b_items)
    assert "STALE_CONTEXT" in json.dumps(asyncio.run(read(sessions["A"])))


def test_a_run_without_a_context_of_its_own_is_refused(client, tenant):
    memory = MemoryTools(client, tenant, "notes")
    agent = Agent(name="notes", instructions=memory.instructions("You keep notes."))
    with pytest.raises(TypeError, match="context=session"):
        asyncio.run(agent.get_system_prompt(RunContextWrapper(context=None)))
    # A k no recall takes: refused when the tools are made, not by a TypeError of protobuf's in a run.
    for k, error in (("5", TypeError), (2.5, TypeError), (True, TypeError), (-1, ValueError)):
        with pytest.raises(error, match=f"k .*not {k!r}"):
            MemoryTools(client, tenant, "notes", k=k)  # type: ignore[arg-type]  # what the check refuses
    # A workspace no scope can be named after: refused WORKSPACE_INVALID only in the first run.
    for workspace in ("", "a/b", "-notes", "x" * 65, "notes\n", "n\ud800", "café"):
        with pytest.raises(ValueError, match=r"^workspace .* is not valid: use 1-64 characters"):
            MemoryTools(client, tenant, workspace)
    with pytest.raises(TypeError, match="a workspace name is a string, not int"):
        MemoryTools(client, tenant, 5)  # type: ignore[arg-type]  # what the check refuses
    MemoryTools(client, tenant, "N0tes.v2_x-" + "y" * 53)  # the longest name a scope takes
    # The integration may not import the engine, so it keeps a copy of the pattern: the same one.
    assert agents_integration._WORKSPACE_NAME.pattern == SCOPE_PATTERN.pattern.split("|workspace/", 1)[1]


def test_a_user_message_no_query_can_be_made_of_still_assembles_memory(client, tenant):
    """The latest user message is the query memories are recalled for; one the service cannot take
    as a query (longer than 4,096 characters, a NUL, half a surrogate pair, only white space) raised
    from the instructions and ended the run. A long one is recalled for by its end, the others
    assemble memory without recalled memories."""
    client.retain(tenant, "The courier comes on Tuesdays")
    memory = MemoryTools(client, tenant, "notes")
    agent = Agent(name="notes", instructions=memory.instructions("You keep notes."))
    for said in ("x " * 5_000 + "when does the courier come?", "a NUL \x00 inside", "half \ud800 a pair", " \u200b "):
        run = RunContextWrapper(context=MnemosyneSession("s", client, tenant), turn_input=[message("user", said)])
        system = asyncio.run(agent.get_system_prompt(run))
        assert system is not None and system.startswith("You keep notes.") and "# Global memory" in system, said[-40:]
        if said.endswith("courier come?"):
            assert "The courier comes on Tuesdays" in system
    # A user message not of the SDK's shape (a number for content, a part whose text is no string):
    # a TypeError from the instructions ended the run.
    for content in (5, [{"type": "input_text", "text": 7}], [{"type": "input_text", "text": None}, "part"]):
        odd: Any = [{"role": "user", "content": content}]
        run = RunContextWrapper(context=MnemosyneSession("s", client, tenant), turn_input=odd)
        system = asyncio.run(agent.get_system_prompt(run))
        assert system is not None and "# Global memory" in system, content


def test_a_limit_that_is_no_whole_number_is_refused(client, tenant):
    """1.5 failed in a slice ("slice indices must be integers"), NaN and "2" otherwise; NaN answered every item."""
    session = MnemosyneSession("limits", client, tenant)
    asyncio.run(session.add_items([message("user", "hi")]))
    for limit in (1.5, float("nan"), float("inf"), "2"):
        with pytest.raises(TypeError, match="limit is a whole number of items or None"):
            asyncio.run(session.get_items(limit=limit))  # type: ignore[arg-type]  # what the check refuses
    assert asyncio.run(session.get_items(limit=1)) == [message("user", "hi")]


def test_a_record_added_outside_the_session_is_named_by_an_add_after_it(client, tenant):
    """A record put in the session's workspace by hand, under a key the session does not make and
    sorting last, has no number to append after: add_items raises naming it (it was int()'s
    "invalid literal"), and adds nothing; the items stay readable."""
    session = MnemosyneSession("s-foreign", client, tenant)
    asyncio.run(session.add_items([message("user", "a")]))
    listed = client.list_records(tenant, session.scope)
    outside = json.dumps(message("user", "by hand")) + "\n"
    client.edit_records(tenant, session.scope, [RecordChange("put", "zz-notes.md", outside)], listed.generation)
    with pytest.raises(ValueError, match=f"record 'zz-notes.md' of {session.scope} is not one of the session's"):
        asyncio.run(session.add_items([message("user", "b")]))
    assert asyncio.run(session.get_items()) == [message("user", "a"), message("user", "by hand")]


def test_an_item_that_cannot_be_read_is_never_popped(client, tenant):
    """pop_item reads the latest item before it removes it: one that is not JSON (a record edited
    by hand) raises naming its record, as get_items does, and the session is left as it was."""
    session = MnemosyneSession("s1", client, tenant)
    asyncio.run(session.add_items([message("user", "a")]))
    listed = client.list_records(tenant, session.scope)
    [record] = listed.records
    broken = record.content + '{"role": "user", "content": "cut\n'
    client.edit_records(tenant, session.scope, [RecordChange("put", record.key, broken)], listed.generation)
    # Named, with its record (they raised JSONDecodeError "Unterminated string", naming nothing).
    for read in (session.pop_item, session.get_items):
        with pytest.raises(ValueError, match=f"record '{record.key}' of {session.scope} holds a line that is no JSON"):
            asyncio.run(read())
    assert [r.content for r in client.list_records(tenant, session.scope).records] == [broken]
