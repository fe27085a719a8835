-- Idempotency records; see the MySQL twin of this file.
CREATE TABLE idempotency_record (
    id               INTEGER PRIMARY KEY AUTOINCREMENT,
    requester        TEXT NOT NULL,
    idempotency_key  TEXT NOT NULL,
    request_hash     TEXT NOT NULL,
    operation_id     TEXT NOT NULL,
    created_at       TEXT NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now')),
    expires_at       TEXT NOT NULL
);
CREATE UNIQUE INDEX uk_idempotency_key ON idempotency_record (requester, idempotency_key);
CREATE INDEX ix_idempotency_expires ON idempotency_record (expires_at);
