"""Conversion between protobuf messages and engine values for the hot path and its events (the
part of transport/convert.py kept apart for the size of one module)."""

from __future__ import annotations

from google.protobuf import timestamp_pb2

from mnemosyne.engine import types
from mnemosyne.engine.hot_path.events import EVENT_STATUSES
from mnemosyne.errors import InvalidArgument
from mnemosyne.transport.convert import to_timestamp
from mnemosyne.v1 import events_pb2, hot_path_pb2

_EVENT_STATUS_TO_PROTO: dict[str, events_pb2.EventStatus] = {s: getattr(events_pb2, s.upper()) for s in EVENT_STATUSES}
_EVENT_STATUS_FROM_PROTO: dict[int, str] = {v: k for k, v in _EVENT_STATUS_TO_PROTO.items()}


def from_event_status(status: int) -> str | None:
    """None (any status) for EVENT_STATUS_UNSPECIFIED."""
    if status == events_pb2.EVENT_STATUS_UNSPECIFIED:
        return None
    if status not in _EVENT_STATUS_FROM_PROTO:
        raise InvalidArgument(
            f"status {status} is not an EventStatus; use PENDING (1), RUNNING (2), SUCCEEDED (3) or FAILED (4), "
            "or leave it unset for every status",
            reason="EVENT_STATUS_INVALID",
        )
    return _EVENT_STATUS_FROM_PROTO[status]


# google.protobuf.Timestamp's valid range: 0001-01-01T00:00:00Z to 9999-12-31T23:59:59.999999999Z.
_TIMESTAMP_SECONDS = range(-62_135_596_800, 253_402_300_800)


def from_timestamp(stamp: timestamp_pb2.Timestamp, present: bool, *, field: str) -> float | None:
    if not present:
        return None
    if stamp.seconds not in _TIMESTAMP_SECONDS or not 0 <= stamp.nanos <= 999_999_999:
        raise InvalidArgument(
            f"{field} is outside google.protobuf.Timestamp's range (years 1 to 9999, nanos 0 to 999,999,999)",
            reason="TIMESTAMP_INVALID",
        )
    return stamp.seconds + stamp.nanos / 1e9


def to_event(event: types.Event) -> events_pb2.Event:
    message = events_pb2.Event(
        event_id=event.event_id,
        status=_EVENT_STATUS_TO_PROTO[event.status],
        kind=event.kind,
        accepted_at=to_timestamp(event.accepted_at),
        created_memory_ids=list(event.created_memory_ids),
        duplicate_of_memory_ids=list(event.duplicate_of_memory_ids),
        merged_into_memory_ids=list(event.merged_into_memory_ids),
        near_duplicate_of=list(event.near_duplicate_of),
        error_reason=event.error_reason,
        error_message=event.error_message,
        attempts=event.attempts,
        latency_ms=event.latency_ms,
        sequence=event.sequence,
        extracted=event.extracted,
    )
    if event.finished_at is not None:
        message.finished_at.CopyFrom(to_timestamp(event.finished_at))
    return message


def to_list_events_response(page: types.EventPage) -> events_pb2.ListEventsResponse:
    return events_pb2.ListEventsResponse(
        events=[to_event(e) for e in page.events], next_page_token=page.next_page_token
    )


def to_hot_path_status(state: types.HotPathState) -> hot_path_pb2.HotPathStatus:
    return hot_path_pb2.HotPathStatus(
        enabled=state.enabled,
        queue_depth=state.queue_depth,
        oldest_pending_seconds=state.oldest_pending_seconds,
        accepted=state.accepted,
        succeeded=state.succeeded,
        failed=state.failed,
        duplicates=state.duplicates,
        writes=state.writes,
        model_calls=state.model_calls,
        awaited=state.awaited,
    )


def to_flush_response(outcome: types.FlushOutcome) -> hot_path_pb2.FlushResponse:
    return hot_path_pb2.FlushResponse(
        flushed=outcome.flushed,
        succeeded=outcome.succeeded,
        failed=outcome.failed,
        failed_event_ids=list(outcome.failed_event_ids),
    )
