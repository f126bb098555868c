"""Arguments that make no request, refused before anything is sent.

Protobuf refuses some values as it builds a request (a text holding a lone surrogate, which UTF-8
cannot encode; a number past its field's range) with Python's UnicodeEncodeError, ValueError or
OverflowError, which name neither the reason nor the fix. Every public method of the client is
wrapped (``refusing_unsendable``): such an error raised before the method's first call is sent
becomes a ``RequestInvalidError`` (an ``InvalidArgumentError`` and a ``ValueError``) with the reason
the server gives the same fault: REQUEST_UNDECODABLE (text that is not valid UTF-8) or
NUMBER_INVALID. One raised after a call was sent is the client's own fault, and left as it is.

An argument of the wrong type (a number for a text, a text, 1.5, True or None for an integer,
None for a text, a text for a list or a mapping of texts) is refused before the method runs: an
``ArgumentTypeError`` (a ``RequestInvalidError`` and a ``TypeError`` too) naming the method, the
argument, what it is and what it takes, with the Node client's reason for it: NUMBER_INVALID for an
integer's, REQUEST_UNDECODABLE for another's. What each argument takes is read from the method's
annotations, once, when the class is wrapped; ``__init__`` is checked too. So are the fields of
the value types a caller builds and passes in (``RetainItem``, ``ThreadRef``, ``RecordChange``,
``Message``, ``ExpiryPolicy``, ``TenantBackup``), read from their annotations in types.py: a field
of another type is an ``ArgumentTypeError`` naming the type and the field. Protobuf failed on some
such values naming no argument, and took others as something the caller did not give (None as the
field's default, True as 1, a text for a list as its characters).
"""

from __future__ import annotations

import contextvars
import dataclasses
import functools
import inspect
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, TypeVar, cast

import grpc

from mnemosyne.client import types
from mnemosyne.client.errors import ArgumentTypeError, MnemosyneClientError, RequestInvalidError
from mnemosyne.host.unicode import not_unicode

C = TypeVar("C", bound=type)

# None outside a public method; in one, whether a call was sent yet.
_SENT: contextvars.ContextVar[bool | None] = contextvars.ContextVar("mnemosyne_client_sent", default=None)


def sending() -> None:
    """Mark that the running public method sent a call (``MemoryClient.call``)."""
    if _SENT.get() is not None:
        _SENT.set(True)


def refusing_unsendable(cls: C) -> C:
    """``cls`` with each public method, and ``__init__``, wrapped (see the module)."""
    for name, member in list(vars(cls).items()):
        if (not name.startswith("_") or name == "__init__") and inspect.isfunction(member):
            setattr(cls, name, _wrapped(member))
    return cls


def _wrapped(method: Callable[..., Any]) -> Callable[..., Any]:
    check = _argument_check(method)
    if inspect.isgeneratorfunction(method):

        @functools.wraps(method)
        def streaming(*args: Any, **kwargs: Any) -> Iterator[Any]:
            check(args, kwargs)
            # Each step in a block of its own: a generator runs in its caller's context, so a
            # block left open while it waits would take in the caller's other calls.
            inner = method(*args, **kwargs)
            sent = False
            while True:
                with _Refusal(method, args, kwargs, sent) as step:
                    try:
                        item = next(inner)
                    except StopIteration:
                        return
                sent = step.sent
                yield item

        return streaming

    @functools.wraps(method)
    def calling(*args: Any, **kwargs: Any) -> Any:
        check(args, kwargs)
        with _Refusal(method, args, kwargs):
            return method(*args, **kwargs)

    return calling


class _Refusal:
    """The block of one public method (nested ones are part of the outermost); ``sent``: whether
    a call was sent in it (or, for a stream's step, before it)."""

    def __init__(
        self, method: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], sent: bool = False
    ) -> None:
        self._call = (method, args, kwargs)
        self.sent = sent
        self._token: contextvars.Token[bool | None] | None = None

    def __enter__(self) -> _Refusal:
        if _SENT.get() is None:
            self._token = _SENT.set(self.sent)
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, _: object) -> None:
        if self._token is None:
            return
        self.sent = bool(_SENT.get())
        _SENT.reset(self._token)
        if self.sent or error is None or isinstance(error, MnemosyneClientError):
            return
        if isinstance(error, UnicodeEncodeError):
            raise refused("REQUEST_UNDECODABLE", not_unicode("a text of the request", error)) from error
        if isinstance(error, OverflowError) or (isinstance(error, ValueError) and "out of range" in str(error)):
            raise refused(
                "NUMBER_INVALID",
                f"{str(error)[:200]}: a number is past its field's range (ids and sizes are 64-bit, k and limits "
                "32-bit integers)",
            ) from error


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_list(value: object) -> bool:
    # A list or tuple first: isinstance of an ABC takes microseconds, and every call checks.
    return type(value) in (list, tuple) or (isinstance(value, Sequence) and not isinstance(value, str | bytes))


def _is_mapping(value: object) -> bool:
    return type(value) is dict or isinstance(value, Mapping)


def _is_texts(value: object) -> bool:
    """Whether ``value`` is a mapping of texts to texts."""
    return _is_mapping(value) and all(
        isinstance(k, str) and isinstance(x, str) for k, x in cast(Mapping[Any, Any], value).items()
    )


def _list_of(test: Callable[[Any], bool]) -> Callable[[Any], bool]:
    """A test of a list (not a text, a mapping or a set) whose every item passes ``test``."""
    return lambda v: _is_list(v) and all(test(x) for x in v)


# What an argument annotated so takes: a test of its value, and its name for a message.
_TAKES: dict[str, tuple[Callable[[Any], bool], str]] = {
    "str": (lambda v: isinstance(v, str), "a text (str)"),
    "int": (_is_int, "a whole number (int)"),
    "float": (lambda v: isinstance(v, int | float) and not isinstance(v, bool), "a number (float)"),
    "bool": (lambda v: isinstance(v, bool), "True or False"),
    "Mapping[str, str]": (_is_texts, "a mapping of texts to texts (dict[str, str])"),
    "Sequence[str]": (_list_of(lambda x: isinstance(x, str)), "a list of texts"),
    "Sequence[int]": (_list_of(_is_int), "a list of whole numbers"),
    "Sequence[types.RecordChange]": (_list_of(lambda x: _value(types.RecordChange, x)), "a list of RecordChange"),
    "Sequence[types.RetainItem | str]": (
        _list_of(lambda x: isinstance(x, str) or _value(types.RetainItem, x)),
        "a list of texts or RetainItem",
    ),
    "Sequence[types.Message | Mapping[str, str] | tuple[str, str]]": (
        _list_of(
            lambda x: (
                _is_texts(x)
                if _is_mapping(x)
                else (isinstance(x, tuple) and len(x) == 2 and all(isinstance(t, str) for t in x))
                or _value(types.Message, x)
            )
        ),
        "a list of Message, {role, content} mappings of texts or (role, content) pairs of texts",
    ),
    "Mapping[str, tuple[int, int]]": (
        lambda v: (
            _is_mapping(v)
            and all(
                isinstance(k, str) and isinstance(x, tuple) and len(x) == 2 and all(map(_is_int, x))
                for k, x in v.items()
            )
        ),
        "a mapping of tenants to (change counter, inbox sequence) pairs",
    ),
    "types.ThreadRef": (lambda v: _value(types.ThreadRef, v), "a ThreadRef"),
    "types.ExpiryPolicy": (lambda v: _value(types.ExpiryPolicy, v), "an ExpiryPolicy"),
    "types.TenantBackup": (
        lambda v: _value(types.TenantBackup, v),
        "a TenantBackup (export_tenant's manifest)",
    ),
    "Iterable[types.BackupChunk]": (
        lambda v: isinstance(v, Iterable) and not isinstance(v, str | bytes | Mapping),
        "an iterable of BackupChunk",
    ),
    "str | Mapping[str, str]": (
        lambda v: isinstance(v, str | Mapping),
        "a member list (ID=HOST:PORT,... or @FILE) or a mapping of member ids to addresses",
    ),
    "grpc.ChannelCredentials": (
        lambda v: isinstance(v, grpc.ChannelCredentials),
        "gRPC channel credentials (grpc.ssl_channel_credentials(...))",
    ),
    "Sequence[tuple[str, Any]]": (
        _list_of(lambda x: isinstance(x, tuple) and len(x) == 2 and isinstance(x[0], str)),
        "a list of (name, value) gRPC channel options",
    ),
}


# The fields of the value types a caller builds and passes in (types.py), as annotated there.
_TAKES.update(
    {
        "dict[str, str]": _TAKES["Mapping[str, str]"],
        "dict[str, int]": (
            lambda v: _is_mapping(v) and all(isinstance(k, str) and _is_int(x) for k, x in v.items()),
            "a mapping of texts to whole numbers (dict[str, int])",
        ),
        "ThreadRef": _TAKES["types.ThreadRef"],
        "list[BackupFile]": (_list_of(lambda x: _value(types.BackupFile, x)), "a list of BackupFile"),
        "bytes": (lambda v: isinstance(v, bytes), "bytes"),
    }
)

_Check = tuple[str, Callable[[Any], bool], str, bool, str]


def _check_for(name: str, annotation: str) -> _Check:
    """(name, test, what it takes, None allowed, reason) of a parameter or field so annotated."""
    optional = annotation.endswith(" | None")
    test, takes = _TAKES.get(annotation.removesuffix(" | None"), (None, ""))
    if test is None:
        return (name, lambda _: True, "", True, "")
    return (name, test, takes, optional, "NUMBER_INVALID" if annotation.startswith("int") else "REQUEST_UNDECODABLE")


def _check_of(method: Callable[..., Any]) -> list[_Check]:
    """The check of each parameter of ``method``, in order, ``self`` left out."""
    parameters = list(inspect.signature(method).parameters.values())[1:]
    return [_check_for(parameter.name, str(parameter.annotation)) for parameter in parameters]


@functools.cache
def _field_checks(cls: type) -> list[_Check]:
    """The check of each field of ``cls`` (a dataclass), read once."""
    return [_check_for(f.name, str(f.type)) for f in dataclasses.fields(cls)]


def _value(cls: type, value: object) -> bool:
    """Whether ``value`` is a ``cls`` (a value type of types.py); one whose field holds another type
    (``ThreadRef(id=5)``, ``RecordChange(key=None)``) is an ``ArgumentTypeError`` naming the type
    and the field: protobuf took None as the field's default, True as 1, or failed naming no field."""
    if not isinstance(value, cls):
        return False
    for name, test, takes, optional, reason in _field_checks(cls):
        held = getattr(value, name)
        if not ((optional and held is None) or test(held)):
            _refuse(cls.__name__, name, held, takes, reason)
    return True


def _argument_check(method: Callable[..., Any]) -> Callable[[tuple[Any, ...], dict[str, Any]], None]:
    """The check, before ``method`` runs, of each argument of a call whose annotation ``_TAKES``
    knows: one of another type (None where None is not taken, a bool for an int, a text for a
    list) is an ``ArgumentTypeError`` naming the method, the argument, what it is and what it
    takes, with the Node client's reason: NUMBER_INVALID for an integer's, REQUEST_UNDECODABLE
    for any other. Protobuf took None as the field's default (a memory id of None read memory 0)
    and True as 1, and a text for a list of texts as its characters."""
    checks = _check_of(method)
    by_name = {check[0]: check for check in checks}
    shown_name = method.__qualname__.split(".")[0] if method.__name__ == "__init__" else method.__name__

    def check(args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        for (name, test, takes, optional, reason), value in zip(checks, args[1:], strict=False):
            if not ((optional and value is None) or test(value)):
                _refuse(shown_name, name, value, takes, reason)
        for name, value in kwargs.items():
            found = by_name.get(name)
            if found is not None and not ((found[3] and value is None) or found[1](value)):
                _refuse(shown_name, name, value, found[2], found[4])

    return check


def _refuse(method: str, name: str, value: object, takes: str, reason: str) -> None:
    shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:40] + "..."
    message = f"{method}: {name} is {type(value).__name__} {shown}; it takes {takes}"
    raise ArgumentTypeError(grpc.StatusCode.INVALID_ARGUMENT, reason, message, {})


def checked_chunk(chunk: object, position: int) -> types.BackupChunk:
    """``chunk``, the ``position``-th (from 1) of an import's, if it is a ``BackupChunk`` whose
    fields hold their types, else an ``ArgumentTypeError`` REQUEST_UNDECODABLE naming its position
    and what it takes. The chunks come from the caller's iterable as they are sent: protobuf's
    TypeError there was raised in gRPC's request iterator, logged and answered UNKNOWN."""
    if not isinstance(chunk, types.BackupChunk):
        _refuse("import_tenant", f"chunk {position}", chunk, "a BackupChunk", "REQUEST_UNDECODABLE")
    for name, test, takes, _, reason in _field_checks(types.BackupChunk):
        held = getattr(chunk, name)
        if not test(held):
            _refuse("import_tenant", f"chunk {position}'s {name}", held, takes, reason)
    return cast(types.BackupChunk, chunk)


def refused(reason: str, message: str) -> RequestInvalidError:
    """The client's refusal of arguments that make no request."""
    return RequestInvalidError(grpc.StatusCode.INVALID_ARGUMENT, reason, message, {})


# The longest deadline a call takes (a year): gRPC's deadline arithmetic overflows far beyond it,
# and a call then ends at once with DEADLINE_EXCEEDED.
MAX_TIMEOUT_SECONDS = 365 * 24 * 3600.0


def checked_timeout(timeout: float | None, *, field: str = "timeout") -> float | None:
    """``timeout`` (seconds) when it can be a call's deadline (None: none or the client's), else
    refused: TIMEOUT_INVALID for NaN, an infinity, zero or less, or over a year."""
    if timeout is not None and not 0 < timeout <= MAX_TIMEOUT_SECONDS:  # False for NaN too
        raise refused(
            "TIMEOUT_INVALID",
            f"{field} is {timeout!r} seconds; a call's deadline is more than 0 and at most {MAX_TIMEOUT_SECONDS:.0f} "
            "(a year)",
        )
    return timeout


def unknown_name(reason: str, what: str, names: Iterable[str], given: object) -> RequestInvalidError:
    """The refusal of ``given`` as ``what`` (a mode, an action, a kind), which is one of ``names``."""
    return refused(reason, f"{what} must be one of {', '.join(names)}; got {str(given)[:40]!r}")
