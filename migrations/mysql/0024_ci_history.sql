-- A project's CI history in GitLab (SPEC §7.1): its last successful merge
-- request pipelines, read while changegate has measured too few batches of
-- its own. They fill the samples the pipeline median of the merge queue's
-- pace and expected times is taken over, older than changegate's own, so a
-- project's first estimates do not rest on its first three batches alone.
-- One row per pipeline (GitLab's id), the newest twenty per project kept.
--
-- Expand only: a new table the previous release never reads.
CREATE TABLE ci_pipeline (
    project      VARCHAR(191)  NOT NULL,
    pipeline_id  BIGINT        NOT NULL,
    seconds      DOUBLE        NOT NULL,
    finished_at  DATETIME(3)   NOT NULL,
    PRIMARY KEY (project, pipeline_id),
    -- a project's newest first
    KEY ix_ci_pipeline_finished (project, finished_at)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
