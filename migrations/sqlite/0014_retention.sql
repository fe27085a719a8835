-- Retention (src/jobs/retention.rs): see the MySQL migration of the same
-- number. Safe while instances of the previous release run (expand only).
CREATE TABLE job_lease (
    name         TEXT  NOT NULL PRIMARY KEY,
    lease_owner  TEXT  NULL,
    lease_until  TEXT  NULL
);
INSERT INTO job_lease (name) VALUES ('retention');

CREATE INDEX ix_event_created ON event (created_at);
CREATE INDEX ix_delivery_finished ON webhook_delivery (status, updated_at);
CREATE INDEX ix_callback_receipt_received ON callback_receipt (received_at);
CREATE INDEX ix_deploy_report_received ON deploy_report (received_at);
CREATE INDEX ix_operation_history_created ON operation_history (created_at);
