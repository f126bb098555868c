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
import random
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from mnemosyne.engine.extractor import Extraction, Extractor, Fact, RulesExtractor, Triple
from mnemosyne.errors import FailedPrecondition, MnemosyneError, Unavailable

log = logging.getLogger("mnemosyne.llm_extractor")

REASON = "EXTRACTION_FAILED"
MAX_FACTS = 100
MAX_TRIPLES = 100
MAX_KIND_CHARS = 64
MAX_VALUE_CHARS = 2_000
_RETRYABLE_STATUS = frozenset({408, 409, 425, 429, 500, 502, 503, 504})

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


@dataclass(frozen=True)
class LLMSettings:
    """Where and how to call the model. ``base_url`` follows the OpenAI convention and includes
    the API version (``https://api.openai.com/v1``, ``http://127.0.0.1:8080/v1``)."""

    base_url: str
    model: str
    api_key: str | None = None
    timeout: float = 30.0  # seconds per attempt
    retries: int = 2  # further attempts after the first, for timeouts, 429, 5xx, connection errors
    backoff: float = 0.5  # first backoff in seconds; doubles each retry, with jitter, capped
    max_backoff: float = 8.0
    concurrency: int = 8  # threads extracting multi-item writes (WritePath._extract), shared by the server

    def __post_init__(self) -> None:
        if not self.base_url.startswith(("http://", "https://")):
            raise FailedPrecondition(
                f"MNEMOSYNE_LLM_BASE_URL must be an http(s) URL such as http://127.0.0.1:8080/v1, got {self.base_url!r}",
                reason="LLM_CONFIG_INVALID",
            )
        if not self.model:
            raise FailedPrecondition(
                "MNEMOSYNE_LLM_MODEL is empty; name the model to call", reason="LLM_CONFIG_INVALID"
            )
        if self.timeout <= 0 or self.retries < 0 or self.backoff < 0 or not 1 <= self.concurrency <= 256:
            raise FailedPrecondition(
                "MNEMOSYNE_LLM_TIMEOUT must be > 0, MNEMOSYNE_LLM_RETRIES and MNEMOSYNE_LLM_BACKOFF >= 0, "
                "MNEMOSYNE_LLM_CONCURRENCY from 1 to 256",
                reason="LLM_CONFIG_INVALID",
            )

    @property
    def endpoint(self) -> str:
        return self.base_url.rstrip("/") + "/chat/completions"


class _CallFailed(Exception):
    def __init__(self, cause: str, message: str, *, retryable: bool, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.cause = cause
        self.retryable = retryable
        self.retry_after = retry_after


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
        self._sleep = sleep
        self.concurrency = settings.concurrency

    def extract(self, text: str) -> Extraction:
        try:
            return parse_answer(self._complete(text))
        except MnemosyneError as exc:
            if self.fallback is None:
                raise
            log.warning(
                "model extraction failed (%s: %s); using the %s extractor", exc.reason, exc.message, self.fallback.name
            )
            return self.fallback.extract(text)

    # -- the HTTP call --------------------------------------------------------------------------

    def _request_body(self, text: str) -> bytes:
        return json.dumps(
            {
                "model": self.settings.model,
                "temperature": 0,
                "response_format": {"type": "json_object"},
                "messages": [
                    {"role": "system", "content": SYSTEM_PROMPT},
                    {"role": "user", "content": text},
                ],
            }
        ).encode()

    def _complete(self, text: str) -> Mapping[str, Any]:
        """The decoded chat-completion response, after retries; raises a domain error."""
        body = self._request_body(text)
        attempts = 1 + self.settings.retries
        for attempt in range(attempts):
            try:
                return self._post(body)
            except _CallFailed as exc:
                if not exc.retryable:
                    raise FailedPrecondition(
                        f"the extraction model refused the request: {exc}; check MNEMOSYNE_LLM_BASE_URL "
                        "(it ends with the API version, e.g. /v1), MNEMOSYNE_LLM_MODEL and MNEMOSYNE_LLM_API_KEY",
                        reason=REASON,
                        metadata={"cause": exc.cause},
                    ) from None
                if attempt + 1 == attempts:
                    raise Unavailable(
                        f"the extraction model failed {attempts} time(s), last: {exc}; nothing was stored, "
                        "retry the write later (same request_id)",
                        reason=REASON,
                        metadata={"cause": exc.cause},
                    ) from None
                delay = min(self.settings.max_backoff, self.settings.backoff * 2**attempt)
                delay = delay / 2 + random.uniform(0, delay / 2)  # jitter: retries of many writers spread out
                if exc.retry_after is not None:
                    delay = min(self.settings.max_backoff, max(delay, exc.retry_after))
                log.info("model call failed (%s), attempt %d/%d; retrying in %.2fs", exc, attempt + 1, attempts, delay)
                self._sleep(delay)
        raise AssertionError("unreachable")  # pragma: no cover

    def _post(self, body: bytes) -> Mapping[str, Any]:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self.settings.api_key:
            headers["Authorization"] = f"Bearer {self.settings.api_key}"
        request = urllib.request.Request(self.settings.endpoint, data=body, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=self.settings.timeout) as response:
                raw = response.read()
        except urllib.error.HTTPError as exc:
            retry_after = _retry_after(exc.headers.get("Retry-After") if exc.headers else None)
            exc.close()
            raise _CallFailed(
                f"http_{exc.code}",
                f"HTTP {exc.code} from {self.settings.endpoint}",
                retryable=exc.code in _RETRYABLE_STATUS,
                retry_after=retry_after,
            ) from None
        except TimeoutError:
            raise _CallFailed("timeout", f"no answer within {self.settings.timeout:g}s", retryable=True) from None
        except (urllib.error.URLError, ConnectionError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            if isinstance(reason, (TimeoutError, socket.timeout)):
                raise _CallFailed("timeout", f"no answer within {self.settings.timeout:g}s", retryable=True) from None
            raise _CallFailed(
                "connection", f"cannot reach {self.settings.endpoint}: {reason}", retryable=True
            ) from None
        try:
            decoded = json.loads(raw)
        except (UnicodeDecodeError, json.JSONDecodeError):
            raise _bad("invalid_response", "the endpoint's response body is not JSON") from None
        if not isinstance(decoded, dict):
            raise _bad("invalid_response", "the endpoint's response is not a JSON object")
        return decoded


def _retry_after(value: str | None) -> float | None:
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None  # an HTTP date: ignore, the exponential backoff applies


def _bad(cause: str, message: str) -> FailedPrecondition:
    return FailedPrecondition(
        f"the extraction model's answer was rejected ({message}); nothing was stored. Use a model that "
        "follows JSON instructions, or set MNEMOSYNE_LLM_FALLBACK=rules",
        reason=REASON,
        metadata={"cause": cause},
    )


def parse_answer(response: Mapping[str, Any]) -> Extraction:
    """A chat-completion response to an Extraction, all or nothing."""
    try:
        choice = response["choices"][0]
        content = choice["message"]["content"]
    except (KeyError, IndexError, TypeError):
        raise _bad("invalid_response", "no choices[0].message.content in the response") from None
    if choice.get("finish_reason") not in (None, "stop"):
        raise _bad("truncated", f"the completion ended with finish_reason={choice.get('finish_reason')!r}")
    if not isinstance(content, str):
        raise _bad("invalid_answer", "message content is not text")
    content = content.strip()
    if content.startswith("```"):  # some models fence JSON even when told not to
        content = content.strip("`").removeprefix("json").strip()
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
    try:
        settings = LLMSettings(
            base_url=base_url,
            model=model,
            api_key=env.get("MNEMOSYNE_LLM_API_KEY") or None,
            timeout=float(setting("TIMEOUT", "30") or 30),
            retries=int(setting("RETRIES", "2") or 2),
            backoff=float(setting("BACKOFF", "0.5") or 0.5),
            concurrency=int(setting("CONCURRENCY", "8") or 8),
        )
    except ValueError as exc:
        raise FailedPrecondition(
            f"MNEMOSYNE_LLM_* setting is not a number: {exc}", reason="LLM_CONFIG_INVALID"
        ) from None
    fallback_name = setting("FALLBACK", "") or ""
    if fallback_name not in ("", "none", "rules"):
        raise FailedPrecondition(
            f"MNEMOSYNE_LLM_FALLBACK must be rules or empty, got {fallback_name!r}", reason="LLM_CONFIG_INVALID"
        )
    return OpenAIExtractor(settings, fallback=RulesExtractor() if fallback_name == "rules" else None)
