-- The batch merge queue (SPEC §7): approved requests wait in
-- `merge_batch_request`; each round claims the waiting ones into one
-- `merge_batch`, which becomes one MR.
--
-- I1 single active batch: `active_slot` is the partition key while the
-- batch is RUNNING or BLOCKED and NULL otherwise; its unique index lets at
-- most one active batch exist per partition (one in all, with the default
-- empty partition key). A second claimer's slot insert fails (duplicate
-- key, or a deadlock/lock wait the claim reads as "occupied").

CREATE TABLE merge_batch (
    id             BIGINT        NOT NULL AUTO_INCREMENT PRIMARY KEY,
    status         VARCHAR(16)   NOT NULL,               -- RUNNING | SUCCEEDED | FAILED | BLOCKED
    partition_key  VARCHAR(191)  NOT NULL DEFAULT '',
    active_slot    VARCHAR(191)  AS (CASE WHEN status IN ('RUNNING', 'BLOCKED') THEN partition_key ELSE NULL END) PERSISTENT,
    project        VARCHAR(191)  NOT NULL,
    split_group    VARCHAR(191)  NOT NULL DEFAULT '',    -- bisection: the half of a failed batch it retries
    phase          VARCHAR(16)   NOT NULL DEFAULT 'OPENING', -- OPENING | PIPELINE | MERGING
    mr_iid         BIGINT        NULL,
    mr_url         VARCHAR(1024) NULL,
    merge_sha      VARCHAR(64)   NULL,
    merge_commit_sha VARCHAR(64)   NULL,
    polls          INT           NOT NULL DEFAULT 0,
    message        VARCHAR(1024) NULL,
    version        BIGINT        NOT NULL DEFAULT 1,
    lease_owner    VARCHAR(64)   NULL,
    lease_until    DATETIME(3)   NULL,
    created_at     DATETIME(3)   NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
    updated_at     DATETIME(3)   NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
    UNIQUE KEY uk_merge_batch_active_slot (active_slot),
    -- the runner and the timeout sweep: active batches, oldest first
    KEY ix_merge_batch_status_updated (status, updated_at),
    -- reconciliation: the batch a deployed merge commit belongs to
    KEY ix_merge_batch_merge_commit (merge_commit_sha)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- One row per approved request of the approval-first flow. I4: the unique
-- operation id makes enqueue idempotent. `batch_id` is NULL while waiting.
CREATE TABLE merge_batch_request (
    id             BIGINT        NOT NULL AUTO_INCREMENT PRIMARY KEY,
    operation_id   CHAR(36)      NOT NULL,
    partition_key  VARCHAR(191)  NOT NULL DEFAULT '',
    project        VARCHAR(191)  NOT NULL,
    split_group    VARCHAR(191)  NOT NULL DEFAULT '',
    batch_id       BIGINT        NULL,
    merged_sha     VARCHAR(64)   NULL,
    created_at     DATETIME(3)   NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
    UNIQUE KEY uk_merge_batch_request_operation (operation_id),
    -- the waiting scan: unclaimed rows of a partition, oldest first
    KEY ix_merge_batch_request_waiting (partition_key, batch_id, id),
    -- a batch's members
    KEY ix_merge_batch_request_batch (batch_id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- Append-only: who joined, left or was merged with which batch, and splits.
CREATE TABLE merge_batch_history (
    id            BIGINT       NOT NULL AUTO_INCREMENT PRIMARY KEY,
    batch_id      BIGINT       NOT NULL,
    operation_id  CHAR(36)     NOT NULL,
    event         VARCHAR(16)  NOT NULL,   -- CLAIMED | MERGED | RELEASED | SPLIT | FAILED
    detail        VARCHAR(191) NULL,
    created_at    DATETIME(3)  NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
    KEY ix_merge_batch_history_batch (batch_id, id),
    KEY ix_merge_batch_history_operation (operation_id, id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- The operators' freeze switch, shared by every instance (one row).
CREATE TABLE merge_queue_control (
    id          INT           NOT NULL PRIMARY KEY,
    frozen      BOOLEAN       NOT NULL DEFAULT FALSE,
    reason      VARCHAR(1024) NULL,
    updated_by  VARCHAR(191)  NULL,
    updated_at  DATETIME(3)   NOT NULL DEFAULT CURRENT_TIMESTAMP(3)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
INSERT INTO merge_queue_control (id, frozen) VALUES (1, FALSE);

-- Reconciliation matches deploy reports to batches by merge commit.
CREATE INDEX ix_deploy_report_sha ON deploy_report (sha);
