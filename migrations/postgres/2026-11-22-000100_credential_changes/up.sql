-- The change feed: every write that other nodes must see appends a row here in the
-- same transaction. Nodes tail it by id; appends are serialised by a transaction-level advisory
-- lock so that ids become visible in order (see crates/persistence/src/changes.rs).
CREATE TABLE credential_changes (
    id         BIGSERIAL PRIMARY KEY,
    kind       TEXT NOT NULL,
    subject_id TEXT NOT NULL,
    created_at TIMESTAMP(6) NOT NULL
);
CREATE INDEX credential_changes_created_at_idx ON credential_changes (created_at);

-- Each node's progress through the feed, so that a revocation can wait until every live node
-- has applied it before it answers.
CREATE TABLE credential_feed_nodes (
    node_id      TEXT PRIMARY KEY NOT NULL,
    seen_id      BIGINT NOT NULL,
    heartbeat_at TIMESTAMP(6) NOT NULL
);
