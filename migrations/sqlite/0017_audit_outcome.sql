-- Whether an audited operator action was done or refused, and why it was
-- refused; see the MySQL twin of this file. Safe while instances of the
-- previous release run (expand only: their rows read `DONE`, and they never
-- read the columns).
ALTER TABLE audit_log ADD COLUMN outcome TEXT NOT NULL DEFAULT 'DONE';
ALTER TABLE audit_log ADD COLUMN refusal_reason TEXT NULL;
