-- Durable execution (SPEC §6, beyond): waiting is data, and a step in
-- flight holds a lease, so a crash loses nothing. See the MySQL twin for
-- the design notes.

ALTER TABLE operation ADD COLUMN due_at TEXT NULL;
ALTER TABLE operation ADD COLUMN attempts INTEGER NOT NULL DEFAULT 0;
ALTER TABLE operation ADD COLUMN lease_owner TEXT NULL;
ALTER TABLE operation ADD COLUMN lease_until TEXT NULL;
CREATE INDEX ix_operation_due ON operation (due_at);

-- Operations already at a step the workflow moves by itself are due now.
UPDATE operation SET due_at = updated_at
WHERE step_code IN (10001, 10003, 10005, 10008, 10009, 10101, 10201, 10202, 10203, 10301, 10501, 10502, 10503);
