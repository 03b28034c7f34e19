DROP TABLE credential_feed_nodes;
DROP TABLE credential_changes;
