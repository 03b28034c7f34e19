-- Who may read a stored response (OpenAI's Responses API) back through the gateway: the API
-- key that created it, and the provider that holds it. A row is written when the provider's
-- answer names the response's id, before the caller sees that id; it is removed when the
-- response is deleted through the gateway, and once older than the usage ledger's retention.
CREATE TABLE response_owners (
    response_id TEXT PRIMARY KEY NOT NULL,
    api_key_id  TEXT NOT NULL,
    provider    TEXT NOT NULL,
    created_at  TIMESTAMP(6) NOT NULL
);
CREATE INDEX response_owners_created_at_idx ON response_owners (created_at);
