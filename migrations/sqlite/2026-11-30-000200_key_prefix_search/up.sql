-- Administrators find keys by the start of their visible prefix (`key_prefix >= p AND
-- key_prefix < p || U+10FFFF`, compared byte by byte under SQLite's BINARY collation); the id
-- after it serves the paging.
CREATE INDEX api_keys_prefix_page_idx ON api_keys (key_prefix, id);
