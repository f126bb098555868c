"""The unary RPCs of our services called in process: the MCP endpoint's tools
(transport/http/mcp.py, the host flows of host/protocol.py) reach the servicers this way.

Each call takes the path of a gRPC call, without the socket and the serialisation: its envelope
(transport/envelope.py: request id, the one error table, metrics and the access record under the
RPC's name), then the edge (transport/edge.py: the caller's token authenticated and authorised,
admission, the tenant's fair share, forwarding to the tenant's owner), then the servicer method by
its kind. A refusal is raised as the ``ServiceError`` a host reads, with the code, reason, message
and metadata a client would have got.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from google.protobuf import descriptor
from google.rpc import status_pb2

from mnemosyne.host.protocol import Answer, Ask, ServiceError
from mnemosyne.transport.edge import Edge, Kind, kind_of
from mnemosyne.transport.envelope import CallEnvelope
from mnemosyne.transport.errors import error_info

# A call in process is given the deadline a client's call has by default (MemoryClient's), and a
# wait on the server (a flush) that much more than it waits.
_IN_PROCESS_SECONDS = 30.0
_WAIT_MARGIN_SECONDS = 10.0


class InProcess:
    """The unary RPCs of ``services``, answered by ``servicers`` (by service name)."""

    def __init__(
        self, edge: Edge, services: Sequence[descriptor.ServiceDescriptor], servicers: Mapping[str, object]
    ) -> None:
        self._edge = edge
        self._methods: dict[str, tuple[Callable[..., Any], Kind]] = {}
        for service in services:
            for method in service.methods:
                if not (method.client_streaming or method.server_streaming):
                    implementation = getattr(servicers[service.name], method.name)
                    self._methods[f"/{service.full_name}/{method.name}"] = (implementation, kind_of(implementation))

    async def call(self, ask: Ask, metadata: Sequence[tuple[str, str]]) -> Answer:
        """The answer to ``ask``, sent with ``metadata`` (the caller's token) besides its own."""
        implementation, kind = self._methods[ask.method]
        seconds = max(_IN_PROCESS_SECONDS, ask.wait_seconds + _WAIT_MARGIN_SECONDS if ask.wait_seconds else 0.0)
        edge = self._edge
        async with edge.envelope(ask.method, None, _raise) as envelope:
            call = edge.begin(
                ask.method, ask.request, (*metadata, *ask.metadata), time.monotonic() + seconds, surface="mcp"
            )
            response = await edge.answer(kind, implementation, ask.request, call)
            return Answer(response, tuple(call.initial_metadata), tuple(call.trailing_metadata))
        raise AssertionError(f"{envelope.method}: the envelope raised its refusal")


async def _raise(envelope: CallEnvelope, error: BaseException, status: status_pb2.Status) -> None:
    """A refusal in process: the ServiceError a host reads."""
    info = next((info for info in map(error_info, status.details) if info is not None), None)
    outcome = envelope.outcome
    raise ServiceError(outcome.code, outcome.reason, status.message, info.metadata if info is not None else None)
