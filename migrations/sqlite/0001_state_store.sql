-- The two layers of request state (SPEC §1, §5); see the MySQL twin of this
-- file for the design notes. Times are fixed-width UTC text with milliseconds
-- ('YYYY-MM-DD HH:MM:SS.SSS'), which sorts and compares like time.

CREATE TABLE operation (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    operation_id  TEXT    NOT NULL,
    kind          TEXT    NOT NULL,
    subject_id    TEXT    NOT NULL,
    target_key    TEXT    NOT NULL,
    requested_by  TEXT    NOT NULL,
    flow_order    TEXT    NOT NULL,
    step_code     INTEGER NOT NULL,
    message       TEXT    NULL,
    params        TEXT    NOT NULL,
    reason        TEXT    NOT NULL,
    expires_at    TEXT    NULL,
    mr_iid        INTEGER NULL,
    mr_url        TEXT    NULL,
    version       INTEGER NOT NULL DEFAULT 1,
    created_at    TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now')),
    updated_at    TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now'))
);
CREATE UNIQUE INDEX uk_operation_operation_id ON operation (operation_id);
CREATE INDEX ix_operation_step_updated ON operation (step_code, updated_at);
CREATE INDEX ix_operation_requested_by ON operation (requested_by, id);

CREATE TABLE binding (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    subject_id    TEXT    NOT NULL,
    target_key    TEXT    NOT NULL,
    operation_id  TEXT    NOT NULL,
    status        TEXT    NOT NULL,
    requested_by  TEXT    NOT NULL,
    params        TEXT    NOT NULL,
    expires_at    TEXT    NULL,
    version       INTEGER NOT NULL DEFAULT 1,
    created_at    TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now')),
    updated_at    TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now'))
);
CREATE UNIQUE INDEX uk_binding_relation ON binding (subject_id, target_key);
CREATE UNIQUE INDEX uk_binding_operation ON binding (operation_id);
CREATE INDEX ix_binding_status_updated ON binding (status, updated_at);
CREATE INDEX ix_binding_requested_by ON binding (requested_by, id);

CREATE TABLE operation_history (
    id                 INTEGER PRIMARY KEY AUTOINCREMENT,
    operation_id       TEXT    NOT NULL,
    from_step          INTEGER NULL,
    to_step            INTEGER NOT NULL,
    from_status        TEXT    NULL,
    to_status          TEXT    NULL,
    operation_version  INTEGER NOT NULL,
    actor              TEXT    NOT NULL,
    message            TEXT    NULL,
    created_at         TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now'))
);
CREATE INDEX ix_operation_history_operation ON operation_history (operation_id, id);
