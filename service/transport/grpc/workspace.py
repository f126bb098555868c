"""The WorkspaceService servicer: generations travel in gRPC metadata, never in message fields.

* AssembleContext sends both generations in its initial (response) metadata.
* UpdateGlobal / UpdateWorkspace take the observed generation of the scope they write ONLY from
  request metadata (no message field carries it) and return the new one in trailing metadata.
* EditRecords / Consolidate (browser, consolidator) carry ``expected_generation`` as a field.
* ConsolidateSession runs the server's own consolidator (engine/consolidator.py), which commits
  through Consolidate's engine call.

The keys and their format are specified in docs/host-protocol.md.
"""

from __future__ import annotations

from mnemosyne.engine import limits as check
from mnemosyne.engine.consistency import Consistency
from mnemosyne.engine.consolidator import SessionConsolidator
from mnemosyne.engine.workspace import Workspaces
from mnemosyne.errors import InvalidArgument
from mnemosyne.host.protocol import GLOBAL_GENERATION_KEY, MAX_GENERATION, WORKSPACE_GENERATION_KEY
from mnemosyne.transport import convert, convert_history
from mnemosyne.transport.call import Call, snapshot_read
from mnemosyne.transport.consistency import for_read, for_write, writing
from mnemosyne.v1 import revisions_pb2, workspace_pb2, workspace_pb2_grpc


def observed_generation(call: Call, key: str) -> int | None:
    """The generation the host sent under ``key``: None when absent, never a default."""
    values = call.metadata_values(key)
    if not values:
        return None
    try:
        if len(values) > 1:
            raise InvalidArgument(f"metadata {key!r} appears {len(values)} times")
        return check.parse_integer(values[0], field=f"metadata {key!r}", minimum=0, maximum=MAX_GENERATION)
    except InvalidArgument as exc:
        raise InvalidArgument(
            f"{exc.message}: it must appear once, as a decimal integer between 0 and 2^63-1 (ASCII digits only)",
            reason="OBSERVATION_INVALID",
            metadata={"metadata_key": key},
        ) from None


class WorkspaceServicer(workspace_pb2_grpc.WorkspaceServiceServicer):
    def __init__(self, workspaces: Workspaces, consolidator: SessionConsolidator, tokens: Consistency) -> None:
        self._workspaces = workspaces
        self._consolidator = consolidator
        self._tokens = tokens

    @snapshot_read
    def AssembleContext(
        self, request: workspace_pb2.AssembleContextRequest, call: Call
    ) -> workspace_pb2.AssembleContextResponse:
        report = for_read(self._tokens, call, request.tenant, request.consistency_token)
        assembled = self._workspaces.assemble_context(
            request.tenant, request.workspace, query=request.query, k=request.k
        )
        call.send_initial_metadata(
            (
                (GLOBAL_GENERATION_KEY, str(assembled.global_generation)),
                (WORKSPACE_GENERATION_KEY, str(assembled.workspace_generation)),
            )
        )
        return convert.with_report(convert.to_assemble_context(assembled), report)

    @writing
    def UpdateGlobal(
        self, request: workspace_pb2.UpdateGlobalRequest, call: Call
    ) -> workspace_pb2.UpdateGlobalResponse:
        result = self._workspaces.update_global(
            request.tenant,
            request.content,
            observed=observed_generation(call, GLOBAL_GENERATION_KEY),
            request_id=request.request_id or None,
        )
        call.set_trailing_metadata(((GLOBAL_GENERATION_KEY, str(result.generation)),))
        return convert.with_token(convert.to_update_global_response(), for_write(self._tokens, call, request.tenant))

    @writing
    def UpdateWorkspace(
        self, request: workspace_pb2.UpdateWorkspaceRequest, call: Call
    ) -> workspace_pb2.UpdateWorkspaceResponse:
        result = self._workspaces.update_workspace(
            request.tenant,
            request.workspace,
            convert.from_record_changes(request.changes),
            observed=observed_generation(call, WORKSPACE_GENERATION_KEY),
            request_id=request.request_id or None,
        )
        call.set_trailing_metadata(((WORKSPACE_GENERATION_KEY, str(result.generation)),))
        token = for_write(self._tokens, call, request.tenant)
        return convert.with_token(convert.to_update_workspace_response(result), token)

    @snapshot_read
    def GetRecord(self, request: workspace_pb2.GetRecordRequest, call: Call) -> workspace_pb2.GetRecordResponse:
        content, generation = self._workspaces.get_record(request.tenant, request.scope, request.key)
        return convert.to_get_record_response(request.key, content, generation)

    @snapshot_read
    def ListScopes(self, request: workspace_pb2.ListScopesRequest, call: Call) -> workspace_pb2.ListScopesResponse:
        return convert.to_list_scopes_response(self._workspaces.list_scopes(request.tenant))

    @snapshot_read
    def ListRecords(self, request: workspace_pb2.ListRecordsRequest, call: Call) -> workspace_pb2.ListRecordsResponse:
        listed = self._workspaces.list_records(
            request.tenant, request.scope, page_size=request.page_size, page_token=request.page_token
        )
        return convert.to_list_records_response(listed)

    @writing
    def EditRecords(self, request: workspace_pb2.EditRecordsRequest, call: Call) -> workspace_pb2.EditRecordsResponse:
        result = self._workspaces.edit_records(
            request.tenant,
            request.scope,
            convert.from_record_changes(request.changes),
            expected_generation=request.expected_generation,
            request_id=request.request_id or None,
        )
        token = for_write(self._tokens, call, request.tenant)
        return convert.with_token(convert.to_edit_records_response(result), token)

    @writing
    def Consolidate(self, request: workspace_pb2.ConsolidateRequest, call: Call) -> workspace_pb2.ConsolidateResponse:
        result = self._workspaces.consolidate(
            request.tenant,
            request.scope,
            convert.from_record_changes(request.changes),
            expected_generation=request.expected_generation,
            receipt_id=request.receipt_id,
        )
        token = for_write(self._tokens, call, request.tenant)
        return convert.with_token(convert.to_consolidate_response(result), token)

    @writing
    def ConsolidateSession(
        self, request: workspace_pb2.ConsolidateSessionRequest, call: Call
    ) -> workspace_pb2.ConsolidateSessionResponse:
        outcomes = self._consolidator.consolidate(request.tenant, request.thread)
        token = for_write(self._tokens, call, request.tenant)
        return convert.with_token(convert.to_consolidate_session_response(outcomes), token)

    @snapshot_read
    def ListRecordRevisions(
        self, request: revisions_pb2.ListRecordRevisionsRequest, call: Call
    ) -> revisions_pb2.ListRecordRevisionsResponse:
        revisions, generation = self._workspaces.record_revisions(request.tenant, request.scope, request.key)
        return convert_history.to_record_revisions_response(revisions, generation)

    @writing
    def RevertRecord(
        self, request: revisions_pb2.RevertRecordRequest, call: Call
    ) -> revisions_pb2.RevertRecordResponse:
        result = self._workspaces.revert_record(
            request.tenant,
            request.scope,
            request.key,
            generation=request.generation,
            expected_generation=request.expected_generation,
            request_id=request.request_id or None,
        )
        token = for_write(self._tokens, call, request.tenant)
        return convert.with_token(convert_history.to_revert_record_response(result), token)
