"""The one sentence an MCP tool error says for arguments its input schema refuses (host/mcp_tools.py):
the argument, what was given (its length or type) and the limit, then the ErrorInfo reason the
gRPC surface gives for that limit (TEXT_TOO_LONG, QUERY_TOO_LONG, K_OUT_OF_RANGE, ...; a text
left out is empty, TEXT_EMPTY), the JSON API's for a value of another type (REQUEST_UNDECODABLE:
docs/http-api.md, "One mistake, one reason"), or ARGUMENTS_INVALID where neither has one
(MemoryHost's reason for arguments it cannot send). Never
pydantic's text: a model reads "query has 5000 characters; the limit is 4096", not "1 validation
error for recallArguments" and a link to pydantic's documentation."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import ValidationError

from mnemosyne.host.unicode import lone_surrogate

ARGUMENTS_INVALID = "ARGUMENTS_INVALID"
# An argument a tool does not take, as the JSON API refuses a field a request does not have.
UNKNOWN_ARGUMENT = "REQUEST_UNDECODABLE"
# The gRPC surface's reason for each argument's limit (engine/limits.py, engine/workspace.py,
# engine/consistency.py, engine/hot_path/events.py), by the pydantic error that broke it.
_REASONS: dict[str, dict[str, str]] = {
    "text": {"string_too_long": "TEXT_TOO_LONG", "string_too_short": "TEXT_EMPTY", "missing": "TEXT_EMPTY"},
    "query": {"string_too_long": "QUERY_TOO_LONG", "string_too_short": "QUERY_EMPTY", "missing": "QUERY_EMPTY"},
    "content": {"string_too_long": "RECORD_TOO_LARGE"},
    "key": {
        "string_too_long": "RECORD_KEY_INVALID",
        "string_too_short": "RECORD_KEY_INVALID",
        "missing": "RECORD_KEY_INVALID",
    },
    "changes": {"missing": "CHANGES_EMPTY"},
    "op": {"literal_error": "CHANGE_OP_INVALID", "missing": "CHANGE_OP_INVALID"},
    "consistency_token": {"string_too_long": "TOKEN_INVALID"},
    "k": {"number_out_of_range": "K_OUT_OF_RANGE"},
    "page_size": {"number_out_of_range": "PAGE_SIZE_OUT_OF_RANGE"},
    "timeout_seconds": {"number_out_of_range": "TIMEOUT_INVALID"},
    "status": {"literal_error": "EVENT_STATUS_INVALID"},
}
# Reasons of any argument: a number no surface reads (the JSON API's, transport/http/mapping.py),
# text holding half of a surrogate pair (the clients' and the Node host's), and a value of another
# JSON type or a field an object does not have (the JSON API's).
_ANY_ARGUMENT = {"number_invalid": "NUMBER_INVALID", "string_unicode": "REQUEST_UNDECODABLE"}
_ANY_ARGUMENT |= dict.fromkeys(
    ("string_type", "list_type", "bool_type", "bool_parsing", "model_type", "model_attributes_type", "dict_type"),
    "REQUEST_UNDECODABLE",
)
_ANY_ARGUMENT["extra_forbidden"] = UNKNOWN_ARGUMENT
# What to do about an argument that is too long ("shorten it" unless said here).
_TOO_LONG = {"consistency_token": "pass the consistency_token of a write's result unchanged"}
_TYPES = {
    "string_type": "a string",
    "list_type": "a list",
    "bool_type": "true or false",
    "bool_parsing": "true or false",
}


def refusal(tool: str, schema: Mapping[str, Any], error: ValidationError) -> str:
    """The tool error for ``error``, raised validating the arguments of ``tool`` whose input schema
    is ``schema``: its first refusal, naming any other argument refused with it."""
    errors = error.errors()
    first = errors[0]
    loc = tuple(first["loc"])
    leaf = next((str(part) for part in reversed(loc) if isinstance(part, str)), "")
    kind = first["type"]
    reason = _REASONS.get(leaf, {}).get(kind) or _ANY_ARGUMENT.get(kind, ARGUMENTS_INVALID)
    if kind == "literal_error" and not isinstance(first["input"], str):
        reason = "REQUEST_UNDECODABLE"  # no other value's name: a value of another JSON type
    others = sorted({_name(e["loc"]) for e in errors[1:]} - {_name(loc)})
    also = f"; {', '.join(others[:5])} refused too" if others else ""
    return f"{_sentence(tool, schema, loc, first)}{also} ({reason})"


def _sentence(tool: str, schema: Mapping[str, Any], loc: tuple[Any, ...], error: Any) -> str:
    name, kind, given, ctx = _name(loc), error["type"], error["input"], error.get("ctx") or {}
    leaf = str(loc[-1]) if loc else ""
    node = _node(schema, loc)
    if kind == "string_too_long":
        return (
            f"{name} has {len(given)} characters; the limit is {ctx['max_length']}: {_TOO_LONG.get(leaf, 'shorten it')}"
        )
    if kind == "string_too_short":
        return f"{name} is empty; give 1 to {node.get('maxLength', 'any number of')} characters"
    if kind in ("number_invalid", "number_out_of_range"):
        return str(error["msg"])  # the number checks' own sentence names the argument and its limit
    if kind == "missing":
        where = f"{_name(loc[:-1])} needs" if len(loc) > 1 else f"{tool} needs the argument"
        return f"{where} {loc[-1]}{_description(node)}"
    if kind == "extra_forbidden":
        fields = ", ".join(_node(schema, loc[:-1]).get("properties", {}))
        return f"{_name(loc[:-1])} has no field {str(loc[-1])[:40]}: it takes only {fields}"
    if kind == "literal_error":
        return f"{name} must be one of {ctx.get('expected', '')}, not {described(given)}"
    if kind in ("model_type", "model_attributes_type", "dict_type"):
        fields = ", ".join(node.get("properties", {}))
        return f"{name} must be an object with {fields}, not {described(given)}"
    if kind == "string_unicode" and isinstance(given, str):
        return lone_surrogate(given, name) or f"{name} is refused: {error['msg']}"
    if kind in _TYPES:
        return f"{name} must be {_TYPES[kind]}, not {described(given)}"
    return f"{name} is refused: {error['msg']}, not {described(given)}"


def params_refusal(method: str, error: ValidationError) -> str:
    """The message of the invalid-params error answering a request whose params the SDK's own
    validation refuses (``tools/call`` without a name, ``resources/read`` with a number for its
    uri), where the SDK said "Invalid request parameters", naming nothing: the first field at
    fault, what it must be and what was given."""
    first = error.errors()[0]
    name, kind, given = _name(tuple(first["loc"])), first["type"], first["input"]
    if kind == "missing":
        return f"Invalid params: {method} needs {name}"
    wanted = _TYPES.get(kind) or ("an object" if kind in ("model_type", "dict_type") else "")
    if wanted:
        return f"Invalid params: {name} of {method} must be {wanted}, not {described(given)}"
    return f"Invalid params: {name} of {method} is refused ({kind}), not {described(given)}"


def _name(loc: Sequence[Any]) -> str:
    """``changes[0].key`` for the location (changes, 0, key)."""
    name = ""
    for part in loc:
        name += f"[{part}]" if isinstance(part, int) else f"{'.' if name else ''}{str(part)[:40]}"
    return name


def _node(schema: Mapping[str, Any], loc: Sequence[Any]) -> Mapping[str, Any]:
    """The part of ``schema`` that describes the argument at ``loc`` ({} when it has none)."""
    node: Mapping[str, Any] = schema
    for part in (*loc, None):
        node = _resolved(schema, node)
        if part is not None:
            node = node.get("items", {}) if isinstance(part, int) else node.get("properties", {}).get(part, {})
    return node


def _resolved(schema: Mapping[str, Any], node: Mapping[str, Any]) -> Mapping[str, Any]:
    """``node`` without its ``$ref`` (to ``schema``'s ``$defs``) or its null alternative."""
    alternatives = [a for a in node.get("anyOf", ()) if a.get("type") != "null"]
    if len(alternatives) == 1:
        node = {**node, **alternatives[0]}
    ref = node.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        node = {**node, **schema.get("$defs", {}).get(ref.removeprefix("#/$defs/"), {})}
    return node


def _description(node: Mapping[str, Any]) -> str:
    description = str(node.get("description", "")).rstrip(".")
    return f": {description[:200]}" if description else ""


def described(value: object) -> str:
    """What a model sent, shortly: its JSON type and, for a short value, the value."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return f"the number {value!r}"[:60]
    if isinstance(value, str):
        return f"the string {value!r}" if len(value) <= 40 else f"a string of {len(value)} characters"
    if isinstance(value, (list, tuple)):
        return f"a list of {len(value)} item(s)"
    if isinstance(value, Mapping):
        return "an object"
    return type(value).__name__
