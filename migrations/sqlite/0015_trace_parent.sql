-- The submitting request's traceparent; see the MySQL twin of this file.
-- Safe while instances of the previous release run (expand only: a
-- nullable column they neither read nor write).
ALTER TABLE operation ADD COLUMN trace_parent TEXT NULL;
