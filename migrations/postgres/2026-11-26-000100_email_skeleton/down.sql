DROP INDEX users_email_skeleton_idx;
ALTER TABLE users DROP COLUMN email_skeleton;
