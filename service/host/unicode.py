"""Text that UTF-8 cannot carry: half of a UTF-16 surrogate pair on its own (U+D800 to U+DFFF),
which a Python string can hold (JSON's "\\ud800", a file name's undecodable bytes) and no request,
record or memory can. One check and one sentence for every place that refuses it: the host's
arguments (host/protocol.py), the MCP tools' (host/mcp_arguments.py), the client before it sends
(client/unsendable.py) and the framework integrations (integrations/); the same check, on a whole
JSON document, for the MCP messages (host/mcp_messages.py) and the HTTP surfaces' JSON
(transport/http/client_json.py). It imports nothing of Mnemosyne, so that each of them may import
it (pyproject.toml [tool.importlinter])."""

from __future__ import annotations

import json


def _unencodable(text: str) -> UnicodeEncodeError | None:
    """The error encoding ``text`` as UTF-8 raises: the one check."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        return error
    return None


def lone_surrogate(text: str, what: str) -> str | None:
    """The sentence refusing ``text`` (``what`` names it: "content", "the session id") when it
    holds half of a surrogate pair; None when UTF-8 can carry it."""
    error = _unencodable(text)
    return None if error is None else not_unicode(what, error)


def unicode_json(document: object) -> bool:
    """Whether every string of ``document`` (a value Python's ``json`` read; its keys too) is text
    UTF-8 can carry: JSON's escapes can spell half of a surrogate pair alone (``"\\ud800"``)."""
    return _unencodable(json.dumps(document, ensure_ascii=False)) is None


def not_unicode(what: str, error: UnicodeEncodeError) -> str:
    """The sentence for ``error``, raised encoding the text ``what`` names as UTF-8: the half it
    holds, where, and what to do."""
    half = error.object[error.start : error.end][:8]
    return (
        f"{what} holds {half!r} at {error.start}, half of a surrogate pair, which is not Unicode text: send the "
        "character whole (both halves of the pair) or leave it out"
    )


__all__ = ["lone_surrogate", "not_unicode", "unicode_json"]
