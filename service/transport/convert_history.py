"""The conversions of expiry and revisions (docs/expiry.md, docs/revisions.md), beside
transport/convert.py and by its rules: a flat list of to_/from_ functions, every response of
these RPCs built here (convert.py is at the size limit; tests/test_docs.py holds both to the rule)."""

from __future__ import annotations

from collections.abc import Iterable

from mnemosyne.engine import types
from mnemosyne.transport.convert import fill_memory, to_timestamp
from mnemosyne.v1 import expiry_pb2, revisions_pb2

_REVISION_KINDS = {
    "retained": revisions_pb2.REVISION_KIND_RETAINED,
    "updated": revisions_pb2.REVISION_KIND_UPDATED,
    "reverted": revisions_pb2.REVISION_KIND_REVERTED,
    "superseded": revisions_pb2.REVISION_KIND_SUPERSEDED,
    "merged": revisions_pb2.REVISION_KIND_MERGED,
}


def to_memory_revisions_response(
    revisions: Iterable[types.MemoryRevision],
) -> revisions_pb2.ListMemoryRevisionsResponse:
    response = revisions_pb2.ListMemoryRevisionsResponse()
    for r in revisions:
        message = response.revisions.add(
            revision=r.revision,
            kind=_REVISION_KINDS[r.kind],
            at=to_timestamp(r.at),
            by=revisions_pb2.Changer(surface=r.surface, token_name=r.token_name),
            changed=r.changed,
            version=r.version,
            text=r.text,
            metadata=r.metadata,
            ledger_seq=r.ledger_seq,
            related_memory_id=r.related_memory_id,
            reverted_to=r.reverted_to,
        )
        if r.expires_at is not None:
            message.expires_at.CopyFrom(to_timestamp(r.expires_at))
    return response


def to_revert_memory_response(outcome: types.UpdateOutcome) -> revisions_pb2.RevertMemoryResponse:
    response = revisions_pb2.RevertMemoryResponse(
        revision=outcome.revision, near_duplicate_of=outcome.near_duplicate_of, supersedes=outcome.supersedes
    )
    fill_memory(response.memory, outcome.memory)
    return response


def to_record_revisions_response(
    revisions: Iterable[types.RecordRevision], generation: int
) -> revisions_pb2.ListRecordRevisionsResponse:
    response = revisions_pb2.ListRecordRevisionsResponse(generation=generation)
    for r in revisions:
        response.revisions.add(
            generation=r.generation,
            op=r.op,
            content=r.content,
            at=to_timestamp(r.at),
            by=revisions_pb2.Changer(surface=r.surface, token_name=r.token_name),
            source=r.source,
            ledger_seq=r.ledger_seq,
        )
    return response


def to_revert_record_response(result: types.WriteResult) -> revisions_pb2.RevertRecordResponse:
    return revisions_pb2.RevertRecordResponse(generation=result.generation)


def from_expiry_policy(policy: expiry_pb2.ExpiryPolicy) -> types.ExpiryPolicy:
    """A policy as sent: an unset grace is the default one."""
    grace = policy.grace_seconds if policy.HasField("grace_seconds") else types.ExpiryPolicy().grace_seconds
    return types.ExpiryPolicy(policy.default_ttl_seconds, policy.update_extends, grace)


def to_expiry_policy(policy: types.ExpiryPolicy) -> expiry_pb2.ExpiryPolicy:
    return expiry_pb2.ExpiryPolicy(
        default_ttl_seconds=policy.default_ttl_seconds,
        update_extends=policy.update_extends,
        grace_seconds=policy.grace_seconds,
    )


def to_get_expiry_policy_response(policy: types.ExpiryPolicy) -> expiry_pb2.GetExpiryPolicyResponse:
    return expiry_pb2.GetExpiryPolicyResponse(policy=to_expiry_policy(policy))


def to_set_expiry_policy_response(policy: types.ExpiryPolicy) -> expiry_pb2.SetExpiryPolicyResponse:
    return expiry_pb2.SetExpiryPolicyResponse(policy=to_expiry_policy(policy))
