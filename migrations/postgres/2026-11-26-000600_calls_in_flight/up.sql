-- Metered calls still running, written by their node once per usage flush interval: a call
-- is known to the database from (at most one interval after) its start. A budget counter
-- opened while calls run (a new period, Redis restarted) counts their reservations; a call
-- cut by a crash is billed at its reservation once its node stops reporting
-- (docs/budgets.md "Calls in flight"). reserved_micros is micro-USD; the token columns are
-- the call's worst case; node_id is the node's id in credential_feed_nodes.
CREATE TABLE calls_in_flight (
    request_id        TEXT PRIMARY KEY,
    node_id           TEXT NOT NULL,
    api_key_id        TEXT NOT NULL,
    user_id           TEXT NOT NULL,
    model             TEXT NOT NULL,
    provider          TEXT NOT NULL,
    streamed          BOOLEAN NOT NULL,
    reserved_micros   BIGINT NOT NULL,
    priced            BOOLEAN NOT NULL,
    prompt_tokens     BIGINT NOT NULL,
    completion_tokens BIGINT NOT NULL,
    started_at        TIMESTAMP(6) NOT NULL
);
CREATE INDEX calls_in_flight_api_key_idx ON calls_in_flight (api_key_id);
CREATE INDEX calls_in_flight_node_idx ON calls_in_flight (node_id);
