"""A client of an OpenAI-compatible chat-completions API, shared by the model plug-ins: the
extractor (engine/llm_extractor.py) and the session consolidator (engine/consolidator.py).

One ``complete`` = one model call = one ``POST {base_url}/chat/completions`` with a system and a
user message, asking for a JSON object (plus retries of that same call when the endpoint times
out, answers 429 or a 5xx, or the connection fails). Only the standard library is used (urllib),
so the plug-ins add no dependency to the core package. It returns the answer's text; what the text
must hold is the caller's to check (``rejected`` makes the caller's error).

Errors (the caller's ``reason``, ``cause`` in the ErrorInfo metadata):
- the endpoint stayed unreachable, slow, rate-limited or failing after all retries:
  ``Unavailable`` (UNAVAILABLE, retryable);
- the endpoint refused the request (400/401/403/404: key, model or URL wrong) or its answer was not
  a chat completion, or was truncated: ``FailedPrecondition`` (retrying the same call would give
  the same result; the operator must fix the configuration or set a fallback).
"""

from __future__ import annotations

import json
import logging
import random
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from mnemosyne.errors import FailedPrecondition, Unavailable

log = logging.getLogger("mnemosyne.chat_api")

_RETRYABLE_STATUS = frozenset({408, 409, 425, 429, 500, 502, 503, 504})

# The range of each number of LLMSettings, by the variable that sets it: the same for the variable
# (engine/llm_extractor.py), for serve's flag (cli/serve.py) and for settings made in code.
RANGES: dict[str, tuple[float, float]] = {
    "timeout": (0.001, 3600.0),  # seconds per attempt: a slow model, not a hung one
    "retries": (0, 100),
    "backoff": (0.0, 3600.0),
    "concurrency": (1, 256),
}


def variable(name: str) -> str:
    """The variable that sets the field ``name`` of LLMSettings."""
    return f"MNEMOSYNE_LLM_{name.upper()}"


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
        for name, (smallest, largest) in RANGES.items():
            value = getattr(self, name)
            if not smallest <= value <= largest:  # NaN compares false: refused too
                raise FailedPrecondition(
                    f"{variable(name)} is {value!r}; it must be from {smallest:g} to {largest:g}",
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


@dataclass(frozen=True)
class Purpose:
    """What a plug-in calls the model for, in its errors: ``reason`` (e.g. EXTRACTION_FAILED),
    ``what`` ("extraction"), and what the failure left behind and what to do (``aftermath``)."""

    reason: str
    what: str
    aftermath: str


class ChatClient:
    """``complete(system, user)``: the text of one chat completion, after retries."""

    def __init__(self, settings: LLMSettings, purpose: Purpose, *, sleep: Callable[[float], None] = time.sleep) -> None:
        self.settings = settings
        self.purpose = purpose
        self._sleep = sleep

    def rejected(self, cause: str, message: str) -> FailedPrecondition:
        return rejected(self.purpose, cause, message)

    def complete(self, system: str, user: str) -> str:
        """The answer's text (``choices[0].message.content``, unfenced); raises a domain error."""
        body = json.dumps(
            {
                "model": self.settings.model,
                "temperature": 0,
                "response_format": {"type": "json_object"},
                "messages": [{"role": "system", "content": system}, {"role": "user", "content": user}],
            }
        ).encode()
        response = self._with_retries(body)
        try:
            choice = response["choices"][0]
            content = choice["message"]["content"]
        except (KeyError, IndexError, TypeError):
            raise self.rejected("invalid_response", "no choices[0].message.content in the response") from None
        if choice.get("finish_reason") not in (None, "stop"):
            raise self.rejected("truncated", f"the completion ended with finish_reason={choice.get('finish_reason')!r}")
        if not isinstance(content, str):
            raise self.rejected("invalid_answer", "message content is not text")
        content = content.strip()
        if content.startswith("```"):  # some models fence JSON even when told not to
            content = content.strip("`").removeprefix("json").strip()
        return content

    def _with_retries(self, body: bytes) -> Mapping[str, Any]:
        """The decoded chat-completion response, after retries; raises a domain error."""
        attempts = 1 + self.settings.retries
        what = self.purpose.what
        for attempt in range(attempts):
            try:
                return self._post(body)
            except _CallFailed as exc:
                if not exc.retryable:
                    raise FailedPrecondition(
                        f"the {what} model refused the request: {exc}; check MNEMOSYNE_LLM_BASE_URL "
                        "(it ends with the API version, e.g. /v1), MNEMOSYNE_LLM_MODEL and MNEMOSYNE_LLM_API_KEY",
                        reason=self.purpose.reason,
                        metadata={"cause": exc.cause},
                    ) from None
                if attempt + 1 == attempts:
                    raise Unavailable(
                        f"the {what} model failed {attempts} time(s), last: {exc}; {self.purpose.aftermath}",
                        reason=self.purpose.reason,
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
            raise self.rejected("invalid_response", "the endpoint's response body is not JSON") from None
        if not isinstance(decoded, dict):
            raise self.rejected("invalid_response", "the endpoint's response is not a JSON object")
        return decoded


def rejected(purpose: Purpose, cause: str, message: str) -> FailedPrecondition:
    """The error for a model answer the caller cannot use (FAILED_PRECONDITION)."""
    return FailedPrecondition(
        f"the {purpose.what} model's answer was rejected ({message}); {purpose.aftermath}. Use a "
        "model that follows JSON instructions, or set MNEMOSYNE_LLM_FALLBACK=rules",
        reason=purpose.reason,
        metadata={"cause": cause},
    )


def _retry_after(value: str | None) -> float | None:
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None  # an HTTP date: ignore, the exponential backoff applies
