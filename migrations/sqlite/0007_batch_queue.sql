-- The batch merge queue (SPEC §7); see the MySQL twin for the design notes.
-- `active_slot` is a generated column with a unique index (I1).

CREATE TABLE merge_batch (
    id             INTEGER PRIMARY KEY AUTOINCREMENT,
    status         TEXT    NOT NULL,
    partition_key  TEXT    NOT NULL DEFAULT '',
    active_slot    TEXT    GENERATED ALWAYS AS (CASE WHEN status IN ('RUNNING', 'BLOCKED') THEN partition_key ELSE NULL END) VIRTUAL,
    project        TEXT    NOT NULL,
    split_group    TEXT    NOT NULL DEFAULT '',
    phase          TEXT    NOT NULL DEFAULT 'OPENING',
    mr_iid         INTEGER NULL,
    mr_url         TEXT    NULL,
    merge_sha      TEXT    NULL,
    merge_commit_sha TEXT    NULL,
    polls          INTEGER NOT NULL DEFAULT 0,
    message        TEXT    NULL,
    version        INTEGER NOT NULL DEFAULT 1,
    lease_owner    TEXT    NULL,
    lease_until    TEXT    NULL,
    created_at     TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now')),
    updated_at     TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now'))
);
CREATE UNIQUE INDEX uk_merge_batch_active_slot ON merge_batch (active_slot);
CREATE INDEX ix_merge_batch_status_updated ON merge_batch (status, updated_at);
CREATE INDEX ix_merge_batch_merge_commit ON merge_batch (merge_commit_sha);

CREATE TABLE merge_batch_request (
    id             INTEGER PRIMARY KEY AUTOINCREMENT,
    operation_id   TEXT    NOT NULL,
    partition_key  TEXT    NOT NULL DEFAULT '',
    project        TEXT    NOT NULL,
    split_group    TEXT    NOT NULL DEFAULT '',
    batch_id       INTEGER NULL,
    merged_sha     TEXT    NULL,
    created_at     TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now'))
);
CREATE UNIQUE INDEX uk_merge_batch_request_operation ON merge_batch_request (operation_id);
CREATE INDEX ix_merge_batch_request_waiting ON merge_batch_request (partition_key, batch_id, id);
CREATE INDEX ix_merge_batch_request_batch ON merge_batch_request (batch_id);

CREATE TABLE merge_batch_history (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    batch_id      INTEGER NOT NULL,
    operation_id  TEXT    NOT NULL,
    event         TEXT    NOT NULL,
    detail        TEXT    NULL,
    created_at    TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now'))
);
CREATE INDEX ix_merge_batch_history_batch ON merge_batch_history (batch_id, id);
CREATE INDEX ix_merge_batch_history_operation ON merge_batch_history (operation_id, id);

CREATE TABLE merge_queue_control (
    id          INTEGER PRIMARY KEY,
    frozen      INTEGER NOT NULL DEFAULT 0,
    reason      TEXT    NULL,
    updated_by  TEXT    NULL,
    updated_at  TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now'))
);
INSERT INTO merge_queue_control (id, frozen) VALUES (1, 0);

CREATE INDEX ix_deploy_report_sha ON deploy_report (sha);
