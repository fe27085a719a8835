-- What a requester (or an operator) asks about a request beyond its file
-- (SPEC §12); see the MySQL twin for the design notes.
ALTER TABLE operation ADD COLUMN not_before TEXT NULL;
ALTER TABLE operation ADD COLUMN urgent INTEGER NOT NULL DEFAULT 0;
ALTER TABLE operation ADD COLUMN revert_of TEXT NULL;
CREATE INDEX ix_operation_revert_of ON operation (revert_of);

ALTER TABLE merge_batch_request ADD COLUMN not_before TEXT NULL;
