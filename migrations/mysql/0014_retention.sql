-- Retention (src/jobs/retention.rs): old rows are deleted in small chunks,
-- each chunk found through an index on its age, by one instance at a time.
-- Safe while instances of the previous release run (expand only: a new
-- table and new indexes; InnoDB builds them in place without blocking
-- writes).
--
-- A lease per background job that only one instance may run at a time,
-- taken by compare-and-swap like an operation's step lease.
CREATE TABLE job_lease (
    name         VARCHAR(64)   NOT NULL PRIMARY KEY,
    lease_owner  VARCHAR(191)  NULL,
    lease_until  DATETIME(3)   NULL
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
INSERT INTO job_lease (name) VALUES ('retention');

CREATE INDEX ix_event_created ON event (created_at);
CREATE INDEX ix_delivery_finished ON webhook_delivery (status, updated_at);
CREATE INDEX ix_callback_receipt_received ON callback_receipt (received_at);
CREATE INDEX ix_deploy_report_received ON deploy_report (received_at);
CREATE INDEX ix_operation_history_created ON operation_history (created_at);
