-- Indexes that keep reads as cheap on a year of data as on an empty
-- database; see the MySQL twin of this file. Safe while instances of the
-- previous release run (expand only: new indexes they do not need).
CREATE INDEX ix_operation_step_id ON operation (step_code, id);
CREATE INDEX ix_operation_target_id ON operation (target_key, id);
CREATE INDEX ix_operation_subject_id ON operation (subject_id, id);
CREATE INDEX ix_delivery_updated ON webhook_delivery (updated_at);
