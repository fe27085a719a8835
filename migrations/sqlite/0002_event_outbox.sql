-- Transactional outbox; see the MySQL twin of this file.
CREATE TABLE event (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    event_type    TEXT NOT NULL,
    operation_id  TEXT NOT NULL,
    subject_id    TEXT NOT NULL,
    target_key    TEXT NOT NULL,
    from_status   TEXT NULL,
    to_status     TEXT NOT NULL,
    payload       TEXT NOT NULL,
    created_at    TEXT NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now'))
);
CREATE INDEX ix_event_operation ON event (operation_id, id);
