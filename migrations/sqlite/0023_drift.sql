-- Drift (SPEC §13); see the MySQL twin for the design notes.
CREATE TABLE drift_finding (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    project      TEXT    NOT NULL,
    path         TEXT    NOT NULL,
    kind         TEXT    NOT NULL,
    target_key   TEXT    NULL,
    subject_id   TEXT    NULL,
    blob_id      TEXT    NULL,
    since_commit TEXT    NULL,
    since        TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now')),
    detected_at  TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now'))
);
CREATE UNIQUE INDEX uk_drift_finding_path ON drift_finding (project, path);
CREATE INDEX ix_drift_finding_binding ON drift_finding (target_key, subject_id);
ALTER TABLE operation ADD COLUMN restores_drift INTEGER NOT NULL DEFAULT 0;
INSERT INTO job_lease (name) VALUES ('drift');

CREATE TABLE drift_acceptance (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    project      TEXT    NOT NULL,
    path         TEXT    NOT NULL,
    action       TEXT    NOT NULL,
    blob_id      TEXT    NULL,
    accepted_by  TEXT    NOT NULL,
    reason       TEXT    NOT NULL,
    created_at   TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now'))
);
CREATE UNIQUE INDEX uk_drift_acceptance_path ON drift_acceptance (project, path);
