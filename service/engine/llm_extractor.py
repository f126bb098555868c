"""An extractor backed by a language model behind an OpenAI-compatible chat-completions API.

One ``extract`` = one model call = one ``POST {base_url}/chat/completions`` that asks for the
facts and triples of ONE memory as a JSON object (plus retries of that same call when the
endpoint times out, answers 429 or a 5xx, or the connection fails). Only the standard library is
used (urllib), so the extractor adds no dependency to the core package.

The answer is parsed completely before anything is returned: a malformed or partial answer (not
JSON, wrong shape, a fact without a value, a truncated completion) raises and the write stores
nothing — or, when a fallback extractor is configured, the fallback's extraction is used instead.
Extraction runs before the write transaction (the engine's contract), so a slow model never holds
the tenant's write lock.

Errors (reason ``EXTRACTION_FAILED``, ``cause`` in the ErrorInfo metadata):
- the endpoint stayed unreachable, slow, rate-limited or failing after all retries:
  ``Unavailable`` (UNAVAILABLE, retryable by the client with the same request_id);
- the endpoint refused the request (400/401/403/404: key, model or URL wrong) or the model's answer
  was not the JSON asked for: ``FailedPrecondition`` (FAILED_PRECONDITION; retrying the same call
  would give the same result; the operator must fix the configuration or set a fallback).
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable, Mapping
from typing import Any

from mnemosyne.engine.chat_api import RANGES, ChatClient, LLMSettings, Purpose, rejected, variable
from mnemosyne.engine.extractor import Extraction, Extractor, Fact, RulesExtractor, Triple
from mnemosyne.engine.limits import parse_integer, parse_number
from mnemosyne.errors import FailedPrecondition, InvalidArgument, MnemosyneError

__all__ = ["LLMSettings", "OpenAIExtractor", "extractor_from_settings", "parse_answer"]

log = logging.getLogger("mnemosyne.llm_extractor")

REASON = "EXTRACTION_FAILED"
MAX_FACTS = 100
MAX_TRIPLES = 100
MAX_KIND_CHARS = 64
MAX_VALUE_CHARS = 2_000
PURPOSE = Purpose(REASON, "extraction", "nothing was stored, retry the write later (same request_id)")

SYSTEM_PROMPT = """\
You extract structured memory from one text. Answer with ONE JSON object and nothing else:
{"facts": [{"kind": "...", "value": "...", "normalized": "..."}],
 "triples": [{"subject": "...", "predicate": "...", "object": "..."}]}
- facts: identifiers, e-mail addresses, dates, quantities with units, names and short
  statements found in the text. "kind" is one lower-case word such as identifier, email, date,
  quantity, person, statement. "value" is copied from the text; "normalized" is a canonical form
  (dates as YYYY-MM-DD, identifiers upper-case, e-mail lower-case, otherwise lower-case).
- triples: simple subject-predicate-object statements, lower-case.
Use empty lists when there is nothing to extract. Never invent content that is not in the text."""


class OpenAIExtractor(Extractor):
    """Facts and triples from an OpenAI-compatible ``/chat/completions`` endpoint."""

    name = "openai"

    def __init__(
        self,
        settings: LLMSettings,
        *,
        fallback: Extractor | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.settings = settings
        self.fallback = fallback
        self.chat = ChatClient(settings, PURPOSE, sleep=sleep)
        self.concurrency = settings.concurrency

    def extract(self, text: str) -> Extraction:
        try:
            return parse_answer(self.chat.complete(SYSTEM_PROMPT, text))
        except MnemosyneError as exc:
            if self.fallback is None:
                raise
            log.warning(
                "model extraction failed (%s: %s); using the %s extractor", exc.reason, exc.message, self.fallback.name
            )
            return self.fallback.extract(text)


def parse_answer(content: str) -> Extraction:
    """A chat completion's text to an Extraction, all or nothing."""
    try:
        answer = json.loads(content)
    except json.JSONDecodeError as exc:
        raise _bad("invalid_json", f"not JSON: {exc.msg} at character {exc.pos}") from None
    if (
        not isinstance(answer, dict)
        or not isinstance(answer.get("facts"), list)
        or not isinstance(answer.get("triples"), list)
    ):
        raise _bad("invalid_answer", 'expected {"facts": [...], "triples": [...]}')
    if len(answer["facts"]) > MAX_FACTS or len(answer["triples"]) > MAX_TRIPLES:
        raise _bad("invalid_answer", f"more than {MAX_FACTS} facts or {MAX_TRIPLES} triples")
    facts: list[Fact] = []
    for i, fact in enumerate(answer["facts"]):
        if not isinstance(fact, dict):
            raise _bad("invalid_answer", f"facts[{i}] is not an object")
        kind = _string(fact, "kind", f"facts[{i}]", MAX_KIND_CHARS).lower()
        value = _string(fact, "value", f"facts[{i}]", MAX_VALUE_CHARS)
        normalized = (
            _string(fact, "normalized", f"facts[{i}]", MAX_VALUE_CHARS)
            if "normalized" in fact
            else " ".join(value.lower().split())
        )
        if (kind, value, normalized) not in facts:
            facts.append((kind, value, normalized))
    triples: list[Triple] = []
    for i, triple in enumerate(answer["triples"]):
        if not isinstance(triple, dict):
            raise _bad("invalid_answer", f"triples[{i}] is not an object")
        subject, predicate, obj = (
            _string(triple, key, f"triples[{i}]", MAX_VALUE_CHARS) for key in ("subject", "predicate", "object")
        )
        if (subject, predicate, obj) not in triples:
            triples.append((subject, predicate, obj))
    return Extraction(facts=facts, triples=triples)


def _bad(cause: str, message: str) -> FailedPrecondition:
    return rejected(PURPOSE, cause, message)


def _string(obj: Mapping[str, Any], key: str, where: str, limit: int) -> str:
    value = obj.get(key)
    if not isinstance(value, str) or not value.strip():
        raise _bad("invalid_answer", f"{where}.{key} is missing or not a non-empty string")
    if len(value) > limit or "\x00" in value:
        raise _bad("invalid_answer", f"{where}.{key} is longer than {limit} characters or contains NUL")
    return value.strip()


def extractor_from_settings(kind: str, env: Mapping[str, str] | None = None, **overrides: Any) -> Extractor:
    """The extractor named by ``--extractor`` (``rules`` or ``openai``), configured from
    ``MNEMOSYNE_LLM_*`` variables; keyword ``overrides`` (from command-line flags) win when not None."""
    env = os.environ if env is None else env
    if kind == "rules":
        return RulesExtractor()
    if kind != "openai":
        raise FailedPrecondition(f"unknown extractor {kind!r}; use rules or openai", reason="LLM_CONFIG_INVALID")

    def setting(name: str, default: str | None = None) -> str | None:
        flag = overrides.get(name.lower())
        return str(flag) if flag is not None else env.get(f"MNEMOSYNE_LLM_{name}", default)

    base_url, model = setting("BASE_URL"), setting("MODEL")
    if not base_url or not model:
        raise FailedPrecondition(
            "--extractor openai needs MNEMOSYNE_LLM_BASE_URL (e.g. https://api.openai.com/v1) and MNEMOSYNE_LLM_MODEL",
            reason="LLM_CONFIG_INVALID",
        )

    def number(name: str, parse: Callable[..., Any]) -> Any:
        """A number by the one rule for numbers given as text (engine/limits.py), in its range."""
        smallest, largest = RANGES[name]
        text = setting(name.upper()) or str(LLMSettings.__dataclass_fields__[name].default)
        return parse(text, field=variable(name), minimum=smallest, maximum=largest)

    try:
        settings = LLMSettings(
            base_url=base_url,
            model=model,
            api_key=env.get("MNEMOSYNE_LLM_API_KEY") or None,
            timeout=number("timeout", parse_number),
            retries=number("retries", parse_integer),
            backoff=number("backoff", parse_number),
            concurrency=number("concurrency", parse_integer),
        )
    except InvalidArgument as exc:
        raise FailedPrecondition(exc.message, reason="LLM_CONFIG_INVALID") from None
    fallback_name = setting("FALLBACK", "") or ""
    if fallback_name not in ("", "none", "rules"):
        raise FailedPrecondition(
            f"MNEMOSYNE_LLM_FALLBACK must be rules or empty, got {fallback_name!r}", reason="LLM_CONFIG_INVALID"
        )
    return OpenAIExtractor(settings, fallback=RulesExtractor() if fallback_name == "rules" else None)
