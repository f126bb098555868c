"""HEAD on the HTTP port, in one place: every route that answers GET answers HEAD as it answers GET
(RFC 9110 §9.3.2), the same status and headers, no body; and an ``Allow`` names HEAD wherever it
names GET.

A HEAD is served as its GET (``answering_head``): the request is GET to everything behind it (the
guard's checks, authentication, the tenant, admission, rate limits, the access record), so it is
a read wherever a GET is and never writes. Its answer ends with the response's head: what the
route would send as the body is dropped, and a stream (Server-Sent Events) is ended at once,
seeing its client gone, so that the connection serves its next request.
"""

from __future__ import annotations

from collections.abc import Iterable

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mnemosyne.errors import InvalidArgument


def allowed(verbs: Iterable[str]) -> str:
    """The ``Allow`` value of a path that takes ``verbs``: HEAD with GET, sorted, once each."""
    taken = set(verbs)
    if "GET" in taken:
        taken.add("HEAD")
    return ", ".join(sorted(taken))


def method_not_allowed(what: str, verbs: Iterable[str]) -> InvalidArgument:
    """405 METHOD_NOT_ALLOWED for ``what`` ("/v1/ping", "the console's files"), taking ``verbs``
    only; its ``allow`` (the ``Allow`` header) from ``allowed``."""
    allow = allowed(verbs)
    return InvalidArgument(
        f"{what[:200]} takes {allow.replace(', ', ' or ')} only", reason="METHOD_NOT_ALLOWED", metadata={"allow": allow}
    )


def answering_head(app: ASGIApp) -> ASGIApp:
    """``app``, with a HEAD served as its GET and answered by the GET's status and headers alone."""

    async def serve(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "HEAD":
            await app(scope, receive, send)
            return
        ended = False

        async def send_head(message: Message) -> None:
            nonlocal ended
            if ended:  # the body, or a stream's events: not sent
                return
            ended = True
            await send(message)
            # The answer is whole: the connection may serve its next request, and the route, if it
            # still waits (a stream), sees its client gone (uvicorn's receive after the answer).
            await send({"type": "http.response.body", "body": b"", "more_body": False})

        await app({**scope, "method": "GET"}, receive, send_head)

    return serve
