"""A local HTTP server speaking the OpenAI chat-completions protocol, for the LLM extractor and the
agents of the OpenAI Agents SDK (``respond``).

It stands in for a real model endpoint (the project replaces unreachable models by a local server
speaking their real protocol, never by patching our code). Each POST to ``/v1/chat/completions``
takes the next scripted behaviour from ``script`` (answer, HTTP status, hang, raw content); with
an empty script it answers like a well-behaved model: the facts and triples of the user's text
(computed with the rules extractor, so they depend on the input), as JSON in
``choices[0].message.content`` — or, asked with the session consolidator's prompt, the learned,
decisions and open items of the session's lines (computed with the rules consolidator). Every
request is recorded.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from mnemosyne.engine import consolidator
from mnemosyne.engine.extractor import RulesExtractor


@dataclass
class Behaviour:
    """``kind``: "answer" (default model answer), "content" (this raw message content),
    "status" (this HTTP status, optional Retry-After), "hang" (answer nothing until released)."""

    kind: str = "answer"
    content: str = ""
    status: int = 200
    retry_after: str | None = None
    finish_reason: str = "stop"


def model_answer(text: str) -> dict[str, Any]:
    extraction = RulesExtractor().extract(text)
    return {
        "facts": [{"kind": k, "value": v, "normalized": n} for k, v, n in extraction.facts],
        "triples": [{"subject": s, "predicate": p, "object": o} for s, p, o in extraction.triples],
    }


def consolidation_answer(text: str) -> dict[str, Any]:
    """What a well-behaved model answers the consolidator: the items of the session's lines
    ("[position] text" each), the rules consolidator's reading of them, marked as the model's."""
    lines = [line.partition("] ")[2] for line in text.splitlines()]
    items = consolidator.rules_items(lines)
    return {
        "learned": [f"(model) {e}" for e in items.learned],
        "decisions": [f"(model) {e}" for e in items.decisions],
        "open_items": [f"(model) {e}" for e in items.open_items],
    }


@dataclass
class ChatServer:
    script: list[Behaviour] = field(default_factory=list)
    requests: list[dict[str, Any]] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    answers: list[dict[str, Any]] = field(default_factory=list)
    delay: float = 0.0  # seconds every request takes, like a real model's latency
    # A model that follows a script per conversation: when set, every request is answered with the
    # assistant message it returns for the request's body (its content or its tool_calls); it may
    # block, to order two conversations' turns (requests are answered on threads of their own).
    respond: Callable[[dict[str, Any]], dict[str, Any]] | None = None
    max_in_flight: int = 0  # the most requests it was answering at once

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._in_flight = 0
        self.release = threading.Event()  # set to end every hanging request
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    @property
    def calls(self) -> int:
        with self._lock:
            return len(self.requests)

    def __enter__(self) -> ChatServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release.set()
        self._httpd.shutdown()
        self._httpd.server_close()

    def _next(self, body: dict[str, Any], headers: dict[str, str]) -> Behaviour:
        with self._lock:
            self.requests.append(body)
            self.headers.append(headers)
            return self.script.pop(0) if self.script else Behaviour()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:  # quiet
                pass

            def do_POST(self) -> None:  # noqa: N802 (http.server API)
                length = int(self.headers.get("Content-Length", "0"))
                raw = self.rfile.read(length)
                if self.path != "/v1/chat/completions":
                    self._send(404, {"error": {"message": f"no route {self.path}"}})
                    return
                body = json.loads(raw)
                behaviour = server._next(body, {k.lower(): v for k, v in self.headers.items()})
                with server._lock:
                    server._in_flight += 1
                    server.max_in_flight = max(server.max_in_flight, server._in_flight)
                try:
                    if server.delay:
                        time.sleep(server.delay)
                finally:
                    # Counted out before the answer is written: once the client has it, its next
                    # request may arrive before this thread runs again (a fifth "in flight" of four).
                    with server._lock:
                        server._in_flight -= 1
                self._answer(body, behaviour)

            def _answer(self, body: dict[str, Any], behaviour: Behaviour) -> None:
                if behaviour.kind == "hang":
                    server.release.wait(60)
                    return  # the client timed out long ago; close without an answer
                if behaviour.kind == "status":
                    extra = {"Retry-After": behaviour.retry_after} if behaviour.retry_after is not None else {}
                    self._send(behaviour.status, {"error": {"message": "scripted", "code": behaviour.status}}, extra)
                    return
                if server.respond is not None:
                    message = server.respond(body)
                    finish = "tool_calls" if message.get("tool_calls") else "stop"
                    self._send(200, _completion(len(server.requests), body, message, finish))
                    return
                if behaviour.kind == "content":
                    content = behaviour.content
                else:
                    user = next(m["content"] for m in body["messages"] if m["role"] == "user")
                    system = next((m["content"] for m in body["messages"] if m["role"] == "system"), "")
                    consolidating = system == consolidator.SYSTEM_PROMPT
                    answer = consolidation_answer(user) if consolidating else model_answer(user)
                    with server._lock:
                        server.answers.append(answer)
                    content = json.dumps(answer)
                message = {"role": "assistant", "content": content}
                self._send(200, _completion(len(server.requests), body, message, behaviour.finish_reason))

            def _send(self, status: int, payload: dict[str, Any], extra: dict[str, str] | None = None) -> None:
                data = json.dumps(payload).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    for key, value in (extra or {}).items():
                        self.send_header(key, value)
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass

        return Handler


def _completion(number: int, body: dict[str, Any], message: dict[str, Any], finish_reason: str) -> dict[str, Any]:
    return {
        "id": f"chatcmpl-{number}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": body.get("model", ""),
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }
