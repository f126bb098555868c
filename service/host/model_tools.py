"""The model's two memory tools, ``memory_update`` and ``update_workspace`` (docs/host-protocol.md):
their table for function calling (``tool_schemas``) and the reading of the arguments a model sends
(``parse_arguments``), for ``write_memory`` (host/protocol.py) in every host of this repository.

A mistake in the arguments has the reason every surface gives it (docs/http-api.md, "One mistake,
one reason"; host/mcp_arguments.py for the MCP tools): what cannot be read as the argument (not
JSON, no object, a value of another JSON type, an argument or field a tool does not take, text
no request carries) is REQUEST_UNDECODABLE; a field read but outside its own limits has the reason
gRPC gives it (CHANGES_EMPTY, CHANGE_OP_INVALID, RECORD_KEY_INVALID); ARGUMENTS_INVALID where no
surface has one (an unknown tool; a content left out, which gRPC reads as empty). ``null`` is a
field not given, as everywhere a request is JSON.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from mnemosyne.host.unicode import lone_surrogate
from mnemosyne.v1 import workspace_pb2

MEMORY_UPDATE = "memory_update"
UPDATE_WORKSPACE = "update_workspace"
ARGUMENTS_INVALID = "ARGUMENTS_INVALID"
UNDECODABLE = "REQUEST_UNDECODABLE"
_CHANGE_OPS = {"put": workspace_pb2.RecordChange.PUT, "delete": workspace_pb2.RecordChange.DELETE}
# What each field of a change takes, for the refusal of a value of another JSON type.
_CHANGE_TAKES = {"op": '"put" or "delete"', "key": "a record name such as plan.md", "content": "the record's text"}
_EXAMPLE = '[{"op": "put", "key": "plan.md", "content": "..."}]'

_PARAMETERS: dict[str, dict[str, Any]] = {
    MEMORY_UPDATE: {
        "type": "object",
        "properties": {
            "content": {
                "type": "string",
                "description": "The complete new text of the global memory document MEMORY.md. It replaces the "
                "whole document, so include everything that should remain.",
            }
        },
        "required": ["content"],
        "additionalProperties": False,
    },
    UPDATE_WORKSPACE: {
        "type": "object",
        "properties": {
            "changes": {
                "type": "array",
                "minItems": 1,
                "maxItems": 100,
                "description": "Changes applied together, all or nothing.",
                "items": {
                    "type": "object",
                    "properties": {
                        "op": {
                            "type": "string",
                            "enum": ["put", "delete"],
                            "description": "put: create or replace the record; delete: remove it.",
                        },
                        "key": {
                            "type": "string",
                            "description": "Record name, a relative path such as plan.md or notes/plan.md.",
                        },
                        "content": {"type": "string", "description": "The complete new text of the record (put only)."},
                    },
                    "required": ["op", "key"],
                    "additionalProperties": False,
                },
            }
        },
        "required": ["changes"],
        "additionalProperties": False,
    },
}
_DESCRIPTIONS = {
    MEMORY_UPDATE: "Replace the global memory document (MEMORY.md) shown in your context with new complete content.",
    UPDATE_WORKSPACE: "Create, replace or delete records of the current workspace shown in your context. "
    "All changes of one call are applied together.",
}


def tool_schemas(format: str = "openai") -> list[dict[str, Any]]:
    """Function-calling schemas of the memory tools: ``openai`` (Chat Completions ``tools``) or
    ``anthropic`` (Messages API ``tools``). No revision, generation, hash or etag field."""
    names = (MEMORY_UPDATE, UPDATE_WORKSPACE)
    if format == "openai":
        return [
            {"type": "function", "function": {"name": n, "description": _DESCRIPTIONS[n], "parameters": _PARAMETERS[n]}}
            for n in names
        ]
    if format == "anthropic":
        return [{"name": n, "description": _DESCRIPTIONS[n], "input_schema": _PARAMETERS[n]} for n in names]
    raise ValueError(f"format must be 'openai' or 'anthropic', not {format!r}")


class ArgumentsInvalid(Exception):
    """Arguments from the model that cannot be sent: becomes an ``error`` result with ``reason``,
    not an exception (the module says which reason)."""

    def __init__(self, message: str, reason: str = ARGUMENTS_INVALID) -> None:
        super().__init__(message)
        self.reason = reason


def parse_arguments(name: str, arguments: Mapping[str, Any] | str | None) -> str | list[workspace_pb2.RecordChange]:
    """The content of a ``memory_update``, or the changes of an ``update_workspace``; raises
    ArgumentsInvalid, naming what the tool takes (never echoing an unknown name back)."""
    if name not in _PARAMETERS:
        raise ArgumentsInvalid(
            f"unknown tool {str(name)[:80]!r}; the memory tools are {MEMORY_UPDATE} and {UPDATE_WORKSPACE}"
        )
    if isinstance(arguments, (str, bytes)):
        try:
            arguments = json.loads(arguments or "{}")
        except (ValueError, RecursionError):  # RecursionError: nested deeper than Python reads
            raise ArgumentsInvalid(f"the arguments of {name} are not valid JSON", UNDECODABLE) from None
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, Mapping):
        raise ArgumentsInvalid(f"the arguments of {name} must be a JSON object, not {_kind(arguments)}", UNDECODABLE)
    allowed = set(_PARAMETERS[name]["properties"])
    if any(k not in allowed for k in arguments):
        raise ArgumentsInvalid(
            f"{name} takes exactly one argument, {', '.join(sorted(allowed))}, and nothing else", UNDECODABLE
        )
    if name == MEMORY_UPDATE:
        content = _text(arguments.get("content"), "memory_update: content", "the complete new text of MEMORY.md")
        if content is None:
            raise ArgumentsInvalid("memory_update needs content: the complete new text of MEMORY.md, as a string")
        return _unicode(content, "content")
    changes = arguments.get("changes")
    if changes is None or changes == []:
        raise ArgumentsInvalid(f"update_workspace needs changes: a non-empty list like {_EXAMPLE}", "CHANGES_EMPTY")
    if not isinstance(changes, list):
        raise ArgumentsInvalid(
            f"update_workspace: changes is {_kind(changes)}; it takes a non-empty list like {_EXAMPLE}", UNDECODABLE
        )
    return [_change(position, change) for position, change in enumerate(changes)]


def _change(position: int, change: object) -> workspace_pb2.RecordChange:
    if not isinstance(change, Mapping):
        raise ArgumentsInvalid(
            f"change {position} is {_kind(change)}; it takes an object with op, key and (for put) content", UNDECODABLE
        )
    if any(k not in _CHANGE_TAKES for k in change):
        raise ArgumentsInvalid(f"change {position} may only have op, key and content", UNDECODABLE)
    where = f"change {position}:"
    op, key, content = (_text(change.get(f), f"{where} {f}", takes) for f, takes in _CHANGE_TAKES.items())
    if op is None or op not in _CHANGE_OPS:
        raise ArgumentsInvalid(f'{where} op must be "put" or "delete"', "CHANGE_OP_INVALID")
    if not key:
        raise ArgumentsInvalid(f"{where} key must be a record name such as plan.md", "RECORD_KEY_INVALID")
    if op == "put" and content is None:
        raise ArgumentsInvalid(f"{where} a put needs content, the complete text of the record, as a string")
    if op == "delete" and content:
        raise ArgumentsInvalid(f"{where} a delete takes no content", "CHANGE_OP_INVALID")
    key, content = _unicode(key, f"{where} key"), _unicode(content or "", f"{where} content")
    return workspace_pb2.RecordChange(op=_CHANGE_OPS[op], key=key, content=content if op == "put" else "")


def _text(value: object, what: str, takes: str) -> str | None:
    """``value`` when it is a string or not given (None), else refused REQUEST_UNDECODABLE."""
    if value is not None and not isinstance(value, str):
        raise ArgumentsInvalid(f"{what} is {_kind(value)}; it takes {takes}, as a string", UNDECODABLE)
    return value


def _kind(value: object) -> str:
    """The JSON type of ``value`` as a refusal names it."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true or false"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    return "a list" if isinstance(value, list | tuple) else "an object"


def _unicode(text: str, what: str) -> str:
    """``text``, refused when it holds half of a surrogate pair (which UTF-8, so no request, can carry)."""
    refusal = lone_surrogate(text, what)
    if refusal is not None:
        raise ArgumentsInvalid(refusal, UNDECODABLE)
    return text
