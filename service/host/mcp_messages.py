"""JSON-RPC messages the MCP SDK cannot answer, and the errors that answer them, the same over
stdio (``client/mcp_host.py``) and streamable HTTP (``transport/http/mcp.py``).

The SDK's stdio transport drops a line it cannot read as a message without a word; its HTTP
transport answers one with its parser's words ("unexpected end of hex escape" for half a surrogate
pair) or pydantic's list of validation errors; both take a request whose id is neither a string
nor a whole number for a notification, which is never answered, so its sender waits for ever.
``refusal`` answers each alike: a parse error for what is not JSON, invalid params for text that
is not Unicode, invalid request for JSON that is no JSON-RPC message or whose id no answer can
carry.
"""

from __future__ import annotations

import json
from typing import Any

from mcp.types import (
    INVALID_PARAMS,
    INVALID_REQUEST,
    PARSE_ERROR,
    ErrorData,
    JSONRPCError,
    JSONRPCNotification,
    RequestId,
    jsonrpc_message_adapter,
)

from mnemosyne.host import json_text
from mnemosyne.host.unicode import unicode_json

# The deepest nesting the SDK's reader (pydantic_core.from_json) takes, arrays and objects alike.
SDK_DEPTH = 200


def unreadable(data: bytes, *, not_json: str) -> JSONRPCError | None:
    """The error answering ``data`` (a line of stdin, an HTTP request's body), or None when the
    SDK reads it as a message it answers (or a notification, which needs none). ``not_json``: the
    parse error's message, naming the transport's framing.

    ``data`` is read once by the JSON API's reader (host/json_text.py), within the limits of the
    SDK's own (pydantic's: 200 levels, integers of 4,300 digits), so that what the SDK would refuse
    in its words ("number out of range", "recursion limit exceeded") or take silently (a key given
    twice: the last) is refused here in ours."""
    try:
        document = json_text.parse(data.decode("utf-8"), max_depth=SDK_DEPTH, huge_integers=False)
    except (UnicodeDecodeError, json_text.NotUnicode):
        return refusal(data, not_json=not_json)
    except json_text.NestedTooDeep:
        return _error(None, PARSE_ERROR, f"Parse error: {json_text.NESTED_TOO_DEEP} (at most {SDK_DEPTH} levels)")
    except (json_text.KeyTwice, json_text.HugeInteger) as exc:
        return _error(_id_despite(data), INVALID_REQUEST, f"Invalid request: {exc}")
    except ValueError:
        if data.startswith(b"\xef\xbb\xbf"):
            return _error(
                None,
                PARSE_ERROR,
                "Parse error: a byte order mark (EF BB BF) comes before the JSON: send it without one",
            )
        return refusal(data, not_json=not_json)
    try:
        message = jsonrpc_message_adapter.validate_python(document, by_name=False)
    except ValueError:  # pydantic's ValidationError
        return refusal(data, not_json=not_json)
    if isinstance(message, JSONRPCNotification):
        misread = unanswerable_id(document)
        return None if misread is None else _error(None, INVALID_REQUEST, misread)
    return None


def refusal(data: bytes, *, not_json: str) -> JSONRPCError:
    r"""The JSON-RPC error answering ``data``, which is not a JSON-RPC message: a parse error
    (id null) if it is not JSON; invalid params if its text is not Unicode (bytes that are not
    UTF-8, a string escape of half a surrogate pair such as ``\ud800``, which no protobuf field
    can hold); else invalid request. The last two carry the request's id when it can be read."""
    try:
        # Bytes that are not UTF-8 become lone surrogates here, found as the escapes are.
        document = json.loads(data.decode("utf-8", errors="surrogateescape"))
    except (ValueError, RecursionError):
        return _error(None, PARSE_ERROR, f"Parse error: {not_json}")
    request_id = _id_of(document)
    if not unicode_json(document):
        return _error(
            request_id,
            INVALID_PARAMS,
            "Invalid params: the message's text is not Unicode (bytes that are not UTF-8, or a string escape of "
            "half a surrogate pair, such as \\ud800, without its other half)",
        )
    misread = unanswerable_id(document)
    if misread is not None:
        return _error(None, INVALID_REQUEST, misread)
    return _error(request_id, INVALID_REQUEST, "Invalid request: not a JSON-RPC 2.0 request, notification or response")


def unanswerable_id(document: object) -> str | None:
    """Why ``document`` is a request no answer can name (the message of an invalid request), or
    None: its ``id`` is neither a string nor a whole number (1.5, true, null, a list, an object;
    MCP allows no null)."""
    if not isinstance(document, dict) or "id" not in document or "method" not in document:
        return None
    request_id = document["id"]
    if isinstance(request_id, str) or (isinstance(request_id, int) and not isinstance(request_id, bool)):
        return None
    shown = json.dumps(request_id)
    return f"Invalid request: a request's id is a string or a whole number, not {shown[:40]}"


def _id_of(document: Any) -> RequestId | None:
    """The id of a request (a whole number or a Unicode string), None if it has none that can be read."""
    request_id = document.get("id") if isinstance(document, dict) else None
    if isinstance(request_id, bool) or not isinstance(request_id, int | str) or not unicode_json(request_id):
        return None
    return request_id


def _id_despite(data: bytes) -> RequestId | None:
    """The id of a message refused for a key given twice or an integer too long to read, when it
    can still be read (JSON-RPC 2.0 answers with it): given once, at the top, a valid id (a whole
    number of digits the SDK reads, a Unicode string); else None."""
    try:  # read on past the refused key or integer: the text after it may be no JSON
        top = json.loads(data, object_pairs_hook=lambda pairs: pairs, parse_int=_integer_or_none)
    except (ValueError, RecursionError):
        return None
    if not isinstance(top, list) or not all(isinstance(pair, tuple) for pair in top):
        return None  # an array (a list of pairs is what an object became)
    ids = [value for key, value in top if key == "id"]
    return _id_of({"id": ids[0]}) if len(ids) == 1 else None


def _integer_or_none(text: str) -> int | None:
    """A JSON integer of the digits the SDK reads, else None (no id)."""
    return int(text) if len(text.lstrip("-")) <= json_text.INTEGER_DIGITS else None


def _error(request_id: RequestId | None, code: int, message: str) -> JSONRPCError:
    return JSONRPCError(jsonrpc="2.0", id=request_id, error=ErrorData(code=code, message=message))


__all__ = ["refusal", "unanswerable_id", "unreadable"]
