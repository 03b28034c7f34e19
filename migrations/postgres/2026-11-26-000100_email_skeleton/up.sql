-- One account per person: the UTS #39 skeleton of the normalised e-mail address (see
-- crates/domain/src/user.rs), unique, so that look-alike addresses (a Cyrillic `а`, `rn` for
-- `m`) cannot register twice, even concurrently. Filled at start for rows written before it
-- (SQL cannot compute it); a row whose skeleton an earlier row already has keeps NULL.
ALTER TABLE users ADD COLUMN email_skeleton TEXT;
CREATE UNIQUE INDEX users_email_skeleton_idx ON users (email_skeleton);
