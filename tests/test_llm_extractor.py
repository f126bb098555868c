"""The OpenAI-compatible LLM extractor, against a local server speaking the chat-completions API
(tests/chat_server.py): one call per write, retries on timeouts and 429, clean rejection of
malformed or partial answers, the rules fallback, and exact model-call counting through a real
server process configured with --extractor openai.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from mnemosyne.client import MemoryClient
from mnemosyne.client.errors import FailedPreconditionError
from mnemosyne.engine.extractor import Extraction, RulesExtractor
from mnemosyne.engine.llm_extractor import LLMSettings, OpenAIExtractor, extractor_from_settings
from mnemosyne.errors import FailedPrecondition, Unavailable
from tests.chat_server import Behaviour, ChatServer
from tests.support import SERVE, ServerFactory, ServerProcess, serve_args, wait_until

TEXT = "Ticket RF-88213 was opened by ana@example.com on 2024-03-05. The refund status: approved."


@pytest.fixture
def chat() -> Iterator[ChatServer]:
    with ChatServer() as server:
        yield server


def make_extractor(
    chat: ChatServer,
    *,
    timeout: float = 10.0,
    retries: int = 2,
    fallback: bool = False,
    sleeps: list[float] | None = None,
) -> OpenAIExtractor:
    settings = LLMSettings(
        base_url=chat.base_url, model="test-model", api_key="sk-test", timeout=timeout, retries=retries, backoff=0.01
    )
    recorded = sleeps if sleeps is not None else []
    return OpenAIExtractor(settings, fallback=RulesExtractor() if fallback else None, sleep=recorded.append)


def expected(text: str) -> Extraction:
    # What the local model answers for this text (it derives its answer from the input).
    return RulesExtractor().extract(text)


def test_one_call_per_extraction_with_model_key_and_text(chat: ChatServer) -> None:
    extraction = make_extractor(chat).extract(TEXT)
    assert chat.calls == 1
    request = chat.requests[0]
    assert request["model"] == "test-model"
    assert request["messages"][-1] == {"role": "user", "content": TEXT}
    assert chat.headers[0]["authorization"] == "Bearer sk-test"
    assert extraction.facts == expected(TEXT).facts and extraction.facts
    assert extraction.triples == expected(TEXT).triples and extraction.triples


def test_slow_answer_times_out_then_the_retry_succeeds(chat: ChatServer) -> None:
    chat.script = [Behaviour("hang")]
    sleeps: list[float] = []
    extraction = make_extractor(chat, timeout=2.0, sleeps=sleeps).extract(TEXT)
    assert chat.calls == 2 and len(sleeps) == 1
    assert extraction == expected(TEXT)


def test_http_429_then_success_waits_at_least_retry_after(chat: ChatServer) -> None:
    chat.script = [Behaviour("status", status=429, retry_after="0.25")]
    sleeps: list[float] = []
    extraction = make_extractor(chat, sleeps=sleeps).extract(TEXT)
    assert chat.calls == 2
    assert len(sleeps) == 1 and sleeps[0] >= 0.25
    assert extraction == expected(TEXT)


def test_retries_exhausted_fail_unavailable_with_the_cause(chat: ChatServer) -> None:
    chat.script = [Behaviour("status", status=503)] * 3
    with pytest.raises(Unavailable) as caught:
        make_extractor(chat, retries=2).extract(TEXT)
    assert caught.value.reason == "EXTRACTION_FAILED" and caught.value.metadata == {"cause": "http_503"}
    assert chat.calls == 3


def test_refused_request_is_not_retried(chat: ChatServer) -> None:
    chat.script = [Behaviour("status", status=401)]
    with pytest.raises(FailedPrecondition) as caught:
        make_extractor(chat).extract(TEXT)
    assert caught.value.reason == "EXTRACTION_FAILED" and caught.value.metadata == {"cause": "http_401"}
    assert "MNEMOSYNE_LLM_API_KEY" in caught.value.message
    assert chat.calls == 1


@pytest.mark.parametrize(
    ("content", "finish_reason", "cause"),
    [
        ('{"facts": [{"kind": "identifier", "value": "RF-88213"}], "triples": [', "stop", "invalid_json"),
        ("Sure! Here are the facts: RF-88213", "stop", "invalid_json"),
        ('{"facts": [{"kind": "identifier", "value": "RF-88213"}]}', "stop", "invalid_answer"),
        ('{"facts": [{"kind": "identifier"}], "triples": []}', "stop", "invalid_answer"),
        ('{"facts": [], "triples": [{"subject": "refund", "predicate": "status"}]}', "stop", "invalid_answer"),
        ('{"facts": ["RF-88213"], "triples": []}', "stop", "invalid_answer"),
        ('{"facts": {"identifier": "RF-88213"}, "triples": []}', "stop", "invalid_answer"),
        ('[{"kind": "identifier", "value": "RF-88213"}]', "stop", "invalid_answer"),
        ('{"facts": [{"kind": "identifier", "value": "RF-88213"}], "triples": []}', "length", "truncated"),
    ],
    ids=[
        "truncated-json",
        "prose",
        "no-triples",
        "fact-without-value",
        "triple-without-object",
        "fact-not-object",
        "facts-not-list",
        "not-an-object",
        "finish-length",
    ],
)
def test_malformed_or_partial_answer_is_rejected_whole(
    chat: ChatServer, content: str, finish_reason: str, cause: str
) -> None:
    chat.script = [Behaviour("content", content=content, finish_reason=finish_reason)]
    with pytest.raises(FailedPrecondition) as caught:
        make_extractor(chat).extract(TEXT)
    assert caught.value.reason == "EXTRACTION_FAILED" and caught.value.metadata == {"cause": cause}
    assert chat.calls == 1  # a deterministic bad answer is not asked again


def test_fenced_json_answer_is_accepted(chat: ChatServer) -> None:
    answer = {"facts": [{"kind": "identifier", "value": "RF-88213", "normalized": "RF-88213"}], "triples": []}
    chat.script = [Behaviour("content", content="```json\n" + json.dumps(answer) + "\n```")]
    assert make_extractor(chat).extract(TEXT) == Extraction(facts=[("identifier", "RF-88213", "RF-88213")], triples=[])


def test_fallback_to_rules_on_invalid_answer(chat: ChatServer) -> None:
    chat.script = [Behaviour("content", content="not json")]
    assert make_extractor(chat, fallback=True).extract(TEXT) == RulesExtractor().extract(TEXT)
    assert chat.calls == 1


@pytest.mark.parametrize(
    "env",
    [
        {},
        {"MNEMOSYNE_LLM_MODEL": "m"},
        {"MNEMOSYNE_LLM_BASE_URL": "ftp://x/v1", "MNEMOSYNE_LLM_MODEL": "m"},
        {"MNEMOSYNE_LLM_BASE_URL": "http://x/v1", "MNEMOSYNE_LLM_MODEL": "m", "MNEMOSYNE_LLM_TIMEOUT": "soon"},
        {"MNEMOSYNE_LLM_BASE_URL": "http://x/v1", "MNEMOSYNE_LLM_MODEL": "m", "MNEMOSYNE_LLM_FALLBACK": "magic"},
    ],
    ids=["nothing", "no-url", "bad-scheme", "bad-timeout", "bad-fallback"],
)
def test_incomplete_configuration_is_refused(env: dict[str, str]) -> None:
    with pytest.raises(FailedPrecondition) as caught:
        extractor_from_settings("openai", env)
    assert caught.value.reason == "LLM_CONFIG_INVALID"


@pytest.mark.parametrize("value", ["0", "0.0005", "nan", "inf", "1e300", "5000", "soon", "0x10"])
def test_the_model_timeout_variable_is_refused_outside_its_range_in_one_line_naming_it(value: str) -> None:
    """MNEMOSYNE_LLM_TIMEOUT is held to --llm-timeout's range, 0.001 to 3600 seconds, and refused
    in one line naming it and that range (0 was refused with a line about four variables)."""
    env = {"MNEMOSYNE_LLM_BASE_URL": "http://x/v1", "MNEMOSYNE_LLM_MODEL": "m", "MNEMOSYNE_LLM_TIMEOUT": value}
    with pytest.raises(FailedPrecondition) as caught:
        extractor_from_settings("openai", env)
    assert caught.value.reason == "LLM_CONFIG_INVALID"
    message = caught.value.message
    assert message.startswith("MNEMOSYNE_LLM_TIMEOUT ") and "from 0.001 to 3600" in message, message
    assert "\n" not in message and "RETRIES" not in message, message
    with pytest.raises(FailedPrecondition, match=r"^MNEMOSYNE_LLM_TIMEOUT is nan; it must be from 0.001 to 3600$"):
        LLMSettings(base_url="http://x/v1", model="m", timeout=float("nan"))  # made in code


def test_a_model_flag_is_held_to_its_variables_range_and_refused_naming_the_flag(tmp_path: Path) -> None:
    """--llm-timeout 5000 was taken by the flag (to 1e9) and then refused naming
    MNEMOSYNE_LLM_TIMEOUT, a variable the operator never set; --llm-retries 1000 likewise."""
    for flag, value, limit in [("--llm-timeout", "5000", "from 0.001 to 3600"), ("--llm-retries", "1000", "0 to 100")]:
        argv = [*SERVE, *serve_args(tmp_path, "--extractor", "openai", flag, value)]
        result = subprocess.run(argv, capture_output=True, text=True, timeout=60)
        assert result.returncode == 2 and f"argument {flag}: " in result.stderr, result.stderr
        assert limit in result.stderr and "MNEMOSYNE_LLM" not in result.stderr, result.stderr


# -- through a real server process ------------------------------------------------------------


def serve_with(server_factory: ServerFactory, chat: ChatServer, **env: str) -> ServerProcess:
    return server_factory(
        args=[
            "--extractor",
            "openai",
            "--llm-base-url",
            chat.base_url,
            "--llm-model",
            "test-model",
            "--llm-timeout",
            "10",
        ],
        env={"MNEMOSYNE_LLM_API_KEY": "sk-server", "MNEMOSYNE_LLM_BACKOFF": "0.01", **env},
    ).start()


def test_server_counts_model_calls_exactly(server_factory, chat: ChatServer, tenant: str) -> None:
    process = serve_with(server_factory, chat)
    texts = [TEXT, "Order ORD-5521 ships on 2024-04-01.", "Maria's role is release manager."]
    with MemoryClient(process.target) as client:
        first = client.retain(tenant, texts[0], request_id="write-1")
        results = [client.retain(tenant, t) for t in texts[1:]]
        assert client.retain(tenant, texts[0], request_id="write-1") == first  # replay: no model call
        assert client.retain(tenant, texts[0].upper()).status == "duplicate"  # duplicate: no model call
        assert client.retain_batch(tenant, [texts[1], texts[2]])[0].status == "duplicate"
        stats = client.stats(tenant)
        memory = client.get_memory(tenant, first.memory_id)
    assert [r.status for r in [first, *results]] == ["created"] * 3
    assert chat.calls == 3 and stats.model_calls == 3
    assert chat.headers[0]["authorization"] == "Bearer sk-server"
    # The stored facts and triples are the model's answer for that text.
    answer = chat.answers[0]
    assert [(f.kind, f.value, f.normalized) for f in memory.facts] == [
        (f["kind"], f["value"], f["normalized"]) for f in answer["facts"]
    ]
    assert [(t.subject, t.predicate, t.object) for t in memory.triples] == [
        (t["subject"], t["predicate"], t["object"]) for t in answer["triples"]
    ]


def test_a_new_tenant_s_writes_do_not_wait_for_the_model_working_on_its_first(
    server_factory, chat: ChatServer, tenant: str
) -> None:
    # A tenant's first write makes its file under the tenant's opening lock: the model's work on
    # it is done before, so a second write of the new tenant commits while the first still waits
    # for the model.
    process = serve_with(server_factory, chat)
    chat.script = [Behaviour("hang")]
    with MemoryClient(process.target) as client, ThreadPoolExecutor(1) as pool:
        first = pool.submit(client.retain, tenant, TEXT)
        wait_until(lambda: chat.calls == 1)  # the first write's extraction is waiting for the model
        with MemoryClient(process.target, timeout=8, retries=0) as other:
            second = other.retain(tenant, "Order ORD-5521 ships on 2024-04-01.")
        assert second.status == "created" and not first.done()
        chat.release.set()  # the hung request ends: the extractor asks again and is answered
        assert first.result(timeout=60).status == "created"
        assert client.stats(tenant).memories == 2 and client.stats(tenant).model_calls == 2
    assert chat.calls == 3


def test_server_retries_429_and_counts_one_model_call(server_factory, chat: ChatServer, tenant: str) -> None:
    process = serve_with(server_factory, chat)
    chat.script = [Behaviour("status", status=429, retry_after="0")]
    with MemoryClient(process.target) as client:
        assert client.retain(tenant, TEXT).status == "created"
        assert client.stats(tenant).model_calls == 1
    assert chat.calls == 2


def test_server_rejects_invalid_answer_and_stores_nothing(server_factory, chat: ChatServer, tenant: str) -> None:
    process = serve_with(server_factory, chat)
    chat.script = [
        Behaviour("content", content='{"facts": [{"kind": "identifier", "value": "RF-88213"}], "triples": [')
    ]
    with MemoryClient(process.target) as client:
        with pytest.raises(FailedPreconditionError) as caught:
            client.retain(tenant, TEXT)
        assert caught.value.reason == "EXTRACTION_FAILED" and caught.value.metadata.get("cause") == "invalid_json"
        assert client.list_memories(tenant).memories == []
        assert client.stats(tenant).model_calls == 0
        # The next write, with a good answer, is stored whole.
        assert client.retain(tenant, TEXT).status == "created"
        assert client.stats(tenant).model_calls == 1


def test_server_falls_back_to_rules_when_configured(server_factory, chat: ChatServer, tenant: str) -> None:
    process = serve_with(server_factory, chat, MNEMOSYNE_LLM_FALLBACK="rules")
    chat.script = [Behaviour("content", content="no JSON today")]
    with MemoryClient(process.target) as client:
        result = client.retain(tenant, TEXT)
        memory = client.get_memory(tenant, result.memory_id)
        assert client.stats(tenant).model_calls == 1
    assert [(f.kind, f.value, f.normalized) for f in memory.facts] == RulesExtractor().extract(TEXT).facts
    assert chat.calls == 1


def test_server_refuses_to_start_without_llm_settings(tmp_path: Path) -> None:
    result = subprocess.run(
        [*SERVE, *serve_args(tmp_path, "--extractor", "openai")],
        capture_output=True,
        text=True,
        timeout=60,
        env={k: v for k, v in os.environ.items() if not k.startswith("MNEMOSYNE_LLM_")},
    )
    assert result.returncode == 2
    assert "MNEMOSYNE_LLM_BASE_URL" in result.stderr and "LLM_CONFIG_INVALID" in result.stderr


def test_a_batch_calls_the_model_concurrently_and_keeps_each_answer_with_its_item(
    server_factory, chat: ChatServer, tenant: str
) -> None:
    process = serve_with(server_factory, chat, MNEMOSYNE_LLM_CONCURRENCY="4")
    chat.delay = 0.2  # a model's latency: one after the other, 12 items would take 2.4 s
    texts = [f"Order ORD-{7000 + i} ships {i + 1} boxes on 2024-05-{i + 1:02d}." for i in range(12)]
    with MemoryClient(process.target) as client:
        results = client.retain_batch(tenant, texts)
        memories = [client.get_memory(tenant, r.memory_id) for r in results]
        assert client.stats(tenant).model_calls == 12
    assert [r.status for r in results] == ["created"] * 12
    assert chat.calls == 12 and chat.max_in_flight == 4  # bounded by --llm-concurrency, and reached
    for text, memory in zip(texts, memories):  # answers of concurrent calls never swap items
        assert memory.text == text
        assert [(f.kind, f.value, f.normalized) for f in memory.facts] == RulesExtractor().extract(text).facts


def test_one_bad_answer_in_a_concurrent_batch_stores_nothing(server_factory, chat: ChatServer, tenant: str) -> None:
    process = serve_with(server_factory, chat)
    chat.script = [Behaviour()] * 3 + [Behaviour("content", content="not JSON")]
    texts = [f"Parcel PK-{i:04d} left depot D{i} on 2024-06-0{i + 1}." for i in range(8)]
    with MemoryClient(process.target) as client:
        with pytest.raises(FailedPreconditionError) as caught:
            client.retain_batch(tenant, texts)
        assert caught.value.reason == "EXTRACTION_FAILED"
        assert client.list_memories(tenant).memories == [] and client.stats(tenant).model_calls == 0
    assert chat.calls == 8  # the other calls in flight ended before the write was refused


def test_llm_concurrency_out_of_range_is_refused() -> None:
    with pytest.raises(FailedPrecondition) as caught:
        extractor_from_settings(
            "openai",
            {
                "MNEMOSYNE_LLM_BASE_URL": "http://127.0.0.1:1/v1",
                "MNEMOSYNE_LLM_MODEL": "m",
                "MNEMOSYNE_LLM_CONCURRENCY": "0",
            },
        )
    assert caught.value.reason == "LLM_CONFIG_INVALID" and "CONCURRENCY" in caught.value.message
