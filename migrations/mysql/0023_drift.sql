-- Drift (SPEC §13): where the target branch and changegate disagree, as the
-- last pass of the drift job found it. One row per file that differs now:
-- a pass inserts what it sees for the first time (`since` is then), keeps
-- `detected_at` current for what it sees again, and deletes what it no
-- longer sees (the drift is resolved). `kind`: CHANGED (the file is not the
-- binding's rendering), MISSING (a live binding has no file) or UNEXPECTED
-- (a file in a managed directory with no live binding). `blob_id` is what
-- the branch holds (none when missing); `since_commit` the commit that last
-- changed the file when it was first found (read once, for the request's
-- page; the report reads it afresh).
--
-- Expand only: new tables and a defaulted column the previous release never
-- reads.
CREATE TABLE drift_finding (
    id           BIGINT        NOT NULL AUTO_INCREMENT PRIMARY KEY,
    project      VARCHAR(191)  NOT NULL,
    path         VARCHAR(512)  NOT NULL,
    kind         VARCHAR(16)   NOT NULL,
    target_key   VARCHAR(191)  NULL,
    subject_id   VARCHAR(191)  NULL,
    blob_id      VARCHAR(64)   NULL,
    since_commit VARCHAR(64)   NULL,
    since        DATETIME(3)   NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
    detected_at  DATETIME(3)   NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
    UNIQUE KEY uk_drift_finding_path (project, path),
    -- a request's page: the finding of its binding's file
    KEY ix_drift_finding_binding (target_key, subject_id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- `operation.restores_drift`: an operator's restore, a request that writes
-- a live binding's rendering again over a file that drifted; approved by
-- changegate itself when `drift.restore_requires_approval` is false.
ALTER TABLE operation ADD COLUMN restores_drift BOOLEAN NOT NULL DEFAULT FALSE;

-- The drift job runs on one instance at a time, under this lease.
INSERT INTO job_lease (name) VALUES ('drift');

-- An operator's repair that accepts the repository as it is (audited): ADOPT
-- accepts the file's content (`blob_id`; none: its absence) until the file
-- changes again or the binding's next change lands; IGNORE leaves a file no
-- live binding names out of every report.
CREATE TABLE drift_acceptance (
    id           BIGINT        NOT NULL AUTO_INCREMENT PRIMARY KEY,
    project      VARCHAR(191)  NOT NULL,
    path         VARCHAR(512)  NOT NULL,
    action       VARCHAR(16)   NOT NULL,
    blob_id      VARCHAR(64)   NULL,
    accepted_by  VARCHAR(191)  NOT NULL,
    reason       VARCHAR(2000) NOT NULL,
    created_at   DATETIME(3)   NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
    UNIQUE KEY uk_drift_acceptance_path (project, path)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
