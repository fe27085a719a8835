-- Inbound callbacks; see the MySQL twin of this file.
CREATE TABLE callback_receipt (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    source       TEXT NOT NULL,
    callback_id  TEXT NOT NULL,
    received_at  TEXT NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now'))
);
CREATE UNIQUE INDEX uk_callback_receipt ON callback_receipt (source, callback_id);

CREATE TABLE deploy_report (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    callback_id  TEXT    NOT NULL,
    mr_iid       INTEGER NOT NULL,
    sha          TEXT    NULL,
    status       TEXT    NOT NULL,
    received_at  TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now'))
);
CREATE INDEX ix_deploy_report_status_mr ON deploy_report (status, mr_iid);

CREATE INDEX ix_operation_mr_iid ON operation (mr_iid);
