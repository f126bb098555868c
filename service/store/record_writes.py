"""The statements that write records under their generations (host-owned generations), and the
bookkeeping of consolidations: applied receipts, journaled proposals, consolidated threads."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from mnemosyne.store import ledger
from mnemosyne.store.bookkeeping import ERASURE_META
from mnemosyne.store.record_reads import RecordReads
from mnemosyne.store.revisions import RevisionWrites


class RecordWrites(RecordReads, RevisionWrites):
    """Records and consolidations written; valid only inside ``TenantStore.write()``."""

    def apply_record_changes(
        self, scope: str, changes: Sequence[tuple[str, str, str]], generation: int, entry: dict[str, Any]
    ) -> bool:
        """Apply (op, key, content) changes ("put" or "delete") to a scope, set its generation and
        append ONE ledger entry naming every change by content hash (never text), and one revision
        per change (store/revisions.py; a delete erases the record's earlier ones). The caller
        decided the generation under this same transaction. A delete erases the record like a
        forgotten memory: overwritten in the file (``secure_delete``) and, once the caller has run
        ``TenantStore.erase_traces``, gone from the WAL with every earlier version of it
        (``ERASURE_META``); returns whether a change deleted one (the caller must erase). A put
        over other content does not empty the WAL: that would cost every agent's memory update a
        TRUNCATE checkpoint and fail it while a backup reads (docs/operations.md#erasure)."""
        c = self.connection
        removed = False
        ledger_changes = []
        for op, key, content in changes:
            before = self.record(scope, key)
            removed = removed or (op == "delete" and before is not None)
            if op == "put":
                ledger_changes.append({"op": "put", "key": key, "content": ledger.sha256_hex(content)})
            else:
                ledger_changes.append({"op": "delete", "key": key})
        seq = self.append_ledger(
            {**entry, "op": "records", "scope": scope, "generation": generation, "changes": ledger_changes}
        )
        # Before the records take the changes: a put's revision before it takes the content it replaces.
        self.add_record_revisions(
            scope, changes, generation=generation, source=str(entry.get("source", "")), ledger_seq=seq
        )
        for op, key, content in changes:
            if op == "put":
                c.execute(
                    "INSERT INTO records(scope, key, content, ledger_seq) VALUES(?, ?, ?, ?) "
                    "ON CONFLICT(scope, key) DO UPDATE SET content = excluded.content, ledger_seq = excluded.ledger_seq",
                    (scope, key, content, seq),
                )
            else:
                c.execute("DELETE FROM records WHERE scope = ? AND key = ?", (scope, key))
        self._fault_point("after_records", "\n".join(content for op, _key, content in changes if op == "put"))
        c.execute(
            "INSERT INTO scopes(scope, generation) VALUES(?, ?) "
            "ON CONFLICT(scope) DO UPDATE SET generation = excluded.generation",
            (scope, generation),
        )
        if removed:
            self.set_meta(ERASURE_META, "1")
        return removed

    def save_receipt(self, receipt_id: str, scope: str, payload_hash: str, result_json: str) -> None:
        self.connection.execute(
            "INSERT INTO receipts(receipt_id, scope, payload_hash, result, created_at) VALUES(?, ?, ?, ?, ?)",
            (receipt_id, scope, payload_hash, result_json, time.time()),
        )

    def journal_proposal(
        self, receipt_id: str, *, thread_id: str, scope: str, section: str, consolidator: str, model_calls: int
    ) -> None:
        """Keep a consolidation's proposed section until its receipt is applied (schema.py)."""
        self.connection.execute(
            "INSERT INTO consolidation_journal(receipt_id, thread_id, scope, section, consolidator, model_calls, "
            "created_at) VALUES(?, ?, ?, ?, ?, ?, ?)",
            (receipt_id, thread_id, scope, section, consolidator, model_calls, time.time()),
        )

    def drop_proposal(self, receipt_id: str) -> None:
        self.connection.execute("DELETE FROM consolidation_journal WHERE receipt_id = ?", (receipt_id,))

    def mark_thread_consolidated(self, thread_id: str, newest_id: int) -> None:
        """The thread is consolidated through memory ``newest_id`` (never moves back)."""
        self.connection.execute(
            "INSERT INTO consolidated_threads(thread_id, newest_id) VALUES(?, ?) "
            "ON CONFLICT(thread_id) DO UPDATE SET newest_id = max(newest_id, excluded.newest_id)",
            (thread_id, newest_id),
        )
