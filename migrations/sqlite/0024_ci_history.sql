-- A project's CI history in GitLab (SPEC §7.1); see the MySQL twin for the
-- design notes.
CREATE TABLE ci_pipeline (
    project      TEXT    NOT NULL,
    pipeline_id  INTEGER NOT NULL,
    seconds      REAL    NOT NULL,
    finished_at  TEXT    NOT NULL,
    PRIMARY KEY (project, pipeline_id)
);
CREATE INDEX ix_ci_pipeline_finished ON ci_pipeline (project, finished_at);
