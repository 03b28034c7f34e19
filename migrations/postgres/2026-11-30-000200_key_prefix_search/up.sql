-- Administrators find keys by the start of their visible prefix (`key_prefix >= p AND
-- key_prefix < p || U+10FFFF`); the id after it serves the paging. Compared under the "C"
-- collation (byte order, as on SQLite), whatever the database's own collation is: a
-- linguistic one would neither keep the case of base62 nor give a prefix a contiguous range.
CREATE INDEX api_keys_prefix_page_idx ON api_keys (key_prefix COLLATE "C", id);
