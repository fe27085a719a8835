-- Refused operator actions are audited too (an action the state did not
-- allow, answered 409): `outcome` says whether the action was `DONE` or
-- `REFUSED`, and `refusal_reason` holds the answer's message for a refusal.
-- Safe while instances of the previous release run (expand only: they write
-- rows without these columns, which then read `DONE`, and they audit only
-- actions that were done; they never read the columns; MariaDB adds both in
-- place without blocking writes).
ALTER TABLE audit_log
    ADD COLUMN outcome VARCHAR(16) NOT NULL DEFAULT 'DONE',
    ADD COLUMN refusal_reason VARCHAR(500) NULL;
