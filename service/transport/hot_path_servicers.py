"""gRPC servicers of the hot path and its events: convert, call ``engine.hot_path``."""

from __future__ import annotations

from typing import Iterator

import grpc

from mnemosyne.engine import limits as check
from mnemosyne.engine.engine import Engine
from mnemosyne.transport import convert
from mnemosyne.v1 import events_pb2, events_pb2_grpc, hot_path_pb2, hot_path_pb2_grpc


class HotPathServicer(hot_path_pb2_grpc.HotPathServiceServicer):
    def __init__(self, engine: Engine) -> None:
        self._hot_path = engine.hot_path

    def Enable(self, request: hot_path_pb2.HotPathRequest, context: grpc.ServicerContext) -> hot_path_pb2.HotPathStatus:
        check.validate_wait_seconds(request.timeout_seconds)  # not used here, but never a NaN either
        self._hot_path.set_enabled(request.tenant, True)
        return convert.to_hot_path_status(self._hot_path.status(request.tenant))

    def Disable(self, request: hot_path_pb2.HotPathRequest, context: grpc.ServicerContext) -> hot_path_pb2.HotPathStatus:
        return convert.to_hot_path_status(self._hot_path.disable(request.tenant, request.timeout_seconds))

    def Status(self, request: hot_path_pb2.HotPathRequest, context: grpc.ServicerContext) -> hot_path_pb2.HotPathStatus:
        check.validate_wait_seconds(request.timeout_seconds)
        return convert.to_hot_path_status(self._hot_path.status(request.tenant))

    def Flush(self, request: hot_path_pb2.FlushRequest, context: grpc.ServicerContext) -> hot_path_pb2.FlushResponse:
        return convert.to_flush_response(self._hot_path.flush(request.tenant, request.timeout_seconds))


class EventsServicer(events_pb2_grpc.EventsServiceServicer):
    def __init__(self, engine: Engine) -> None:
        self._hot_path = engine.hot_path

    def GetEvent(self, request: events_pb2.GetEventRequest, context: grpc.ServicerContext) -> events_pb2.Event:
        return convert.to_event(self._hot_path.get_event(request.tenant, request.event_id))

    def ListEvents(
        self, request: events_pb2.ListEventsRequest, context: grpc.ServicerContext
    ) -> events_pb2.ListEventsResponse:
        page = self._hot_path.list_events(
            request.tenant,
            status=convert.from_event_status(request.status),
            accepted_after=convert.from_timestamp(
                request.accepted_after, request.HasField("accepted_after"), field="accepted_after"
            ),
            page_size=request.page_size,
            page_token=request.page_token,
        )
        return events_pb2.ListEventsResponse(
            events=[convert.to_event(e) for e in page.events], next_page_token=page.next_page_token
        )

    def WatchEvents(self, request: events_pb2.WatchEventsRequest, context: grpc.ServicerContext) -> Iterator[events_pb2.Event]:
        for event in self._hot_path.watch(
            request.tenant,
            after_event_id=request.after_event_id,
            after_sequence=request.after_sequence,
            active=context.is_active,
        ):
            yield convert.to_event(event)
