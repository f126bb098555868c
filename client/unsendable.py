"""Arguments that make no request, refused before anything is sent.

Protobuf refuses some values as it builds a request (a text holding a lone surrogate, which UTF-8
cannot encode; a number past its field's range) with Python's UnicodeEncodeError, ValueError or
OverflowError, which name neither the reason nor the fix. Every public method of the client is
wrapped (``refusing_unsendable``): such an error raised before the method's first call is sent
becomes a ``RequestInvalidError`` (an ``InvalidArgumentError`` and a ``ValueError``) with the reason
the server gives the same fault: REQUEST_UNDECODABLE (text that is not valid UTF-8) or
NUMBER_INVALID. One raised after a call was sent is the client's own fault, and left as it is.

An argument of the wrong type (a number for a text, a text or 1.5 for an integer, a text for a
mapping of texts) fails as protobuf builds the request with a TypeError, ValueError or
AttributeError that names no argument ("bad argument type for built-in operation"); it becomes a
``RequestInvalidError`` (an ``ArgumentTypeError``, a ``TypeError`` too) naming the argument, what it
is and what it takes, with the Node client's reason for it: NUMBER_INVALID for an integer's (1.5,
NaN, "1"), REQUEST_UNDECODABLE for another's. The argument is found from the method's
annotations, only once such an error was raised.
"""

from __future__ import annotations

import contextvars
import functools
import inspect
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

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
    """``cls`` with each public method wrapped (see the module)."""
    for name, member in list(vars(cls).items()):
        if not name.startswith("_") and inspect.isfunction(member):
            setattr(cls, name, _wrapped(member))
    return cls


def _wrapped(method: Callable[..., Any]) -> Callable[..., Any]:
    if inspect.isgeneratorfunction(method):

        @functools.wraps(method)
        def streaming(*args: Any, **kwargs: Any) -> Iterator[Any]:
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
        if isinstance(error, TypeError | ValueError | AttributeError):
            mistyped = wrong_argument(*self._call)
            if mistyped is not None:
                raise ArgumentTypeError(grpc.StatusCode.INVALID_ARGUMENT, *mistyped, {}) from error


# What an argument annotated so takes: a test of its value, and its name for a message.
_TAKES: dict[str, tuple[Callable[[Any], bool], str]] = {
    "str": (lambda v: isinstance(v, str), "a text (str)"),
    "int": (lambda v: isinstance(v, int) and not isinstance(v, bool), "a whole number (int)"),
    "float": (lambda v: isinstance(v, int | float) and not isinstance(v, bool), "a number (float)"),
    "bool": (lambda v: isinstance(v, bool), "True or False"),
    "Mapping[str, str]": (
        lambda v: isinstance(v, Mapping) and all(isinstance(k, str) and isinstance(x, str) for k, x in v.items()),
        "a mapping of texts to texts (dict[str, str])",
    ),
    "Sequence[str]": (
        lambda v: isinstance(v, Sequence) and not isinstance(v, str) and all(isinstance(x, str) for x in v),
        "a list of texts",
    ),
    "Sequence[int]": (
        lambda v: isinstance(v, Sequence) and all(isinstance(x, int) and not isinstance(x, bool) for x in v),
        "a list of whole numbers",
    ),
    "Sequence[types.RecordChange]": (
        lambda v: isinstance(v, Sequence) and all(isinstance(x, types.RecordChange) for x in v),
        "a list of RecordChange",
    ),
}


def wrong_argument(method: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[str, str] | None:
    """The reason and message of the first argument of a call of ``method`` whose value its
    annotation does not take (None: none such, or no annotation ``_TAKES`` knows): NUMBER_INVALID
    for an integer's, REQUEST_UNDECODABLE for any other, as the Node client says."""
    signature = inspect.signature(method)
    try:
        bound = signature.bind(*args, **kwargs)
    except TypeError:
        return None
    for name, value in bound.arguments.items():
        annotation = str(signature.parameters[name].annotation)
        optional = annotation.endswith(" | None")
        test, takes = _TAKES.get(annotation.removesuffix(" | None"), (None, ""))
        if test is None or (optional and value is None) or test(value):
            continue
        shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:40] + "..."
        reason = "NUMBER_INVALID" if annotation.startswith("int") else "REQUEST_UNDECODABLE"
        return reason, f"{method.__name__}: {name} is {type(value).__name__} {shown}; it takes {takes}"
    return None


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
