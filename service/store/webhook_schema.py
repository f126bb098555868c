"""The webhooks' part of a tenant file's schema (schema.py's migration ``_V_WEBHOOKS``, apart only
for the size of one module): their tables, and the triggers that write the outbox."""

# Webhooks (issue 43, docs/webhooks.md): a tenant's subscriptions (an address, the kinds of change
# it wants, whether it wants a memory's text), their signing secrets (several at once, for
# rotation), and the outbox. The outbox rows are written by triggers on the ledger and the
# operation log's transitions, so every change that appends an entry (whoever appends it: a write
# added later included) writes its deliveries in its own transaction: a rolled-back change has
# none, a committed one has them for good. ``webhook_kind_of_op`` says which ledger entries are
# which kinds (``source``: only entries of that source). A delivery keeps the memory's text
# (``text``) only for a subscription that asked for it, until it is delivered or the memory is
# forgotten; a delivered row stays as the subscription's delivery log, ids and statuses only.
WEBHOOKS = """
CREATE TABLE webhook_subscriptions(
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  url TEXT NOT NULL,
  include_text INTEGER NOT NULL,
  created_at REAL NOT NULL,
  failing_since REAL,
  paused_at REAL,
  pause_reason TEXT
);
CREATE TABLE webhook_secrets(
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  subscription_id INTEGER NOT NULL REFERENCES webhook_subscriptions(id),
  secret TEXT NOT NULL,
  created_at REAL NOT NULL
);
CREATE INDEX webhook_secrets_subscription ON webhook_secrets(subscription_id);
CREATE TABLE webhook_kinds(
  kind TEXT NOT NULL,
  subscription_id INTEGER NOT NULL REFERENCES webhook_subscriptions(id),
  PRIMARY KEY (kind, subscription_id)
) WITHOUT ROWID;
CREATE TABLE webhook_kind_of_op(
  op TEXT NOT NULL,
  source TEXT,
  kind TEXT NOT NULL
);
INSERT INTO webhook_kind_of_op(op, source, kind) VALUES
  ('retain', NULL, 'memory.created'),
  ('update', NULL, 'memory.updated'),
  ('supersede', NULL, 'memory.updated'),
  ('forget', NULL, 'memory.forgotten'),
  ('expire', NULL, 'memory.expired'),
  ('records', NULL, 'record.changed'),
  ('records', 'consolidate', 'consolidation.applied'),
  ('merge', NULL, 'consolidation.applied');
CREATE TABLE webhook_outbox(
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  delivery_id TEXT NOT NULL,
  subscription_id INTEGER NOT NULL,
  kind TEXT NOT NULL,
  at REAL NOT NULL,
  ledger_seq INTEGER,
  event_id INTEGER,
  memory_id INTEGER,
  scope TEXT,
  detail TEXT NOT NULL,
  text TEXT,
  status TEXT NOT NULL CHECK (status IN ('pending', 'delivered')),
  attempts INTEGER NOT NULL DEFAULT 0,
  next_attempt_at REAL NOT NULL,
  last_attempt_at REAL,
  last_status_code INTEGER,
  last_error TEXT,
  delivered_at REAL
);
CREATE INDEX webhook_outbox_due ON webhook_outbox(next_attempt_at, id) WHERE status = 'pending';
CREATE INDEX webhook_outbox_subscription ON webhook_outbox(subscription_id, id);
CREATE INDEX webhook_outbox_text ON webhook_outbox(memory_id) WHERE text IS NOT NULL;
CREATE INDEX webhook_outbox_delivered ON webhook_outbox(delivered_at) WHERE status = 'delivered';

CREATE TRIGGER webhook_ledger_outbox AFTER INSERT ON ledger
WHEN EXISTS (SELECT 1 FROM webhook_kinds)
BEGIN
  INSERT INTO webhook_outbox(delivery_id, subscription_id, kind, at, ledger_seq, memory_id, scope, detail, text,
    status, next_attempt_at)
  SELECT 'msg_' || lower(hex(randomblob(12))), k.subscription_id, k.kind, NEW.at, NEW.seq,
    json_extract(NEW.entry, '$.memory_id'),
    coalesce(json_extract(NEW.entry, '$.scope'),
      (SELECT scope FROM memories WHERE id = json_extract(NEW.entry, '$.memory_id'))),
    json_object(
      'generation', json_extract(NEW.entry, '$.generation'),
      'by', json_extract(NEW.entry, '$.by'),
      'merged', json_extract(NEW.entry, '$.merged'),
      'changes', CASE WHEN json_type(NEW.entry, '$.changes') = 'array' THEN json((SELECT
        json_group_array(json_object('op', json_extract(value, '$.op'), 'key', json_extract(value, '$.key')))
        FROM json_each(NEW.entry, '$.changes'))) END),
    CASE WHEN s.include_text AND k.kind IN ('memory.created', 'memory.updated')
      THEN (SELECT body FROM memories WHERE id = json_extract(NEW.entry, '$.memory_id')) END,
    'pending', NEW.at
  FROM webhook_kind_of_op m
  JOIN webhook_kinds k ON k.kind = m.kind
  JOIN webhook_subscriptions s ON s.id = k.subscription_id
  WHERE m.op = json_extract(NEW.entry, '$.op')
    AND (m.source IS NULL OR m.source IS json_extract(NEW.entry, '$.source'));
END;

CREATE TRIGGER webhook_oplog_outbox AFTER INSERT ON oplog_transitions
WHEN NEW.status IN ('succeeded', 'failed') AND EXISTS (SELECT 1 FROM webhook_kinds)
BEGIN
  INSERT INTO webhook_outbox(delivery_id, subscription_id, kind, at, event_id, memory_id, detail, status,
    next_attempt_at)
  SELECT 'msg_' || lower(hex(randomblob(12))), k.subscription_id, k.kind, NEW.at, NEW.event_id,
    CASE WHEN json_valid(o.result) THEN nullif(json_extract(o.result, '$.memory_id'), 0) END,
    json_object(
      'outcome', CASE WHEN json_valid(o.result) THEN json_extract(o.result, '$.status') END,
      'error_reason', o.error_reason),
    'pending', NEW.at
  FROM webhook_kinds k
  JOIN oplog o ON o.event_id = NEW.event_id
  WHERE k.kind = 'fast_write.' || NEW.status;
END;
"""
