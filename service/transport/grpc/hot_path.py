"""gRPC servicers of the hot path and its events: convert, call ``engine.hot_path`` — the waiting
calls (Flush, Disable, WatchEvents) through transport/waits.py, holding no thread while they wait."""

from __future__ import annotations

from collections.abc import AsyncIterator

from mnemosyne.engine import limits as check
from mnemosyne.engine.engine import Engine
from mnemosyne.errors import Unavailable
from mnemosyne.transport import convert_hot_path, waits
from mnemosyne.transport.call import Call, reading, waiting
from mnemosyne.transport.consistency import asks_replicated, carried
from mnemosyne.v1 import events_pb2, events_pb2_grpc, hot_path_pb2, hot_path_pb2_grpc


class HotPathServicer(hot_path_pb2_grpc.HotPathServiceServicer):
    def __init__(self, engine: Engine) -> None:
        self._hot_path = engine.hot_path
        self._tokens = engine.consistency

    def Enable(self, request: hot_path_pb2.HotPathRequest, call: Call) -> hot_path_pb2.HotPathStatus:
        check.validate_wait_seconds(request.timeout_seconds)  # not used here, but never a NaN either
        self._hot_path.set_enabled(request.tenant, True)
        return convert_hot_path.to_hot_path_status(self._hot_path.status(request.tenant))

    @waiting
    async def Disable(self, request: hot_path_pb2.HotPathRequest, call: Call) -> hot_path_pb2.HotPathStatus:
        return convert_hot_path.to_hot_path_status(await waits.disable(self._hot_path, call, request.timeout_seconds))

    @reading
    def Status(self, request: hot_path_pb2.HotPathRequest, call: Call) -> hot_path_pb2.HotPathStatus:
        check.validate_wait_seconds(request.timeout_seconds)
        return convert_hot_path.to_hot_path_status(self._hot_path.status(request.tenant))

    @waiting
    async def Flush(self, request: hot_path_pb2.FlushRequest, call: Call) -> hot_path_pb2.FlushResponse:
        # The token as every read takes it: the field's, else the metadata's (an HTTP header).
        token = carried(call, request.consistency_token)
        # The level asked, with a token or without, checked before any wait: never refused after one.
        replicate = asks_replicated(call, self._tokens)
        if token:  # only the writes it names, taken ahead of the backlog
            flushed = await waits.flush_token(self._hot_path, self._tokens, call, token, request.timeout_seconds)
        else:
            flushed = await waits.flush(self._hot_path, call, request.timeout_seconds)
        if replicate:  # those writes (or the whole queue) applied, then in object storage: one timeout for both
            ends = call.answer_by(check.validate_wait_seconds(request.timeout_seconds))
            await waits.replicated(self._hot_path, self._tokens, call, ends)
        return convert_hot_path.to_flush_response(flushed)


class EventsServicer(events_pb2_grpc.EventsServiceServicer):
    def __init__(self, engine: Engine) -> None:
        self._hot_path = engine.hot_path

    @reading
    def GetEvent(self, request: events_pb2.GetEventRequest, call: Call) -> events_pb2.Event:
        return convert_hot_path.to_event(self._hot_path.get_event(request.tenant, request.event_id))

    @reading
    def ListEvents(self, request: events_pb2.ListEventsRequest, call: Call) -> events_pb2.ListEventsResponse:
        page = self._hot_path.list_events(
            request.tenant,
            status=convert_hot_path.from_event_status(request.status),
            accepted_after=convert_hot_path.from_timestamp(
                request.accepted_after, request.HasField("accepted_after"), field="accepted_after"
            ),
            page_size=request.page_size,
            page_token=request.page_token,
        )
        return convert_hot_path.to_list_events_response(page)

    async def WatchEvents(self, request: events_pb2.WatchEventsRequest, call: Call) -> AsyncIterator[events_pb2.Event]:
        async for event in waits.watch(
            self._hot_path, call, after_event_id=request.after_event_id, after_sequence=request.after_sequence
        ):
            yield convert_hot_path.to_event(event)
        if self._hot_path.streams_ended:
            # A watch ends only when the server stops (no deadline ends it well): not an end the
            # caller may take for the stream's, but UNAVAILABLE with a retry delay, so a client
            # opens it again on the server back from the last event it got.
            raise Unavailable(
                "the server is shutting down and ended this watch; open it again with after_sequence, the "
                "sequence of the last event received, once it is back",
                reason="SHUTTING_DOWN",
                retry_after_seconds=1.0,
            )
