-- Inbound callbacks (SPEC §2.2). A callback id is recorded in the same
-- transaction as its effect, so a repeat is answered DUPLICATE and applied
-- at most once, while a callback whose processing failed leaves no record
-- and is applied when the caller retries.
CREATE TABLE callback_receipt (
    id           BIGINT       NOT NULL AUTO_INCREMENT PRIMARY KEY,
    source       VARCHAR(16)  NOT NULL,   -- approval | deploy
    callback_id  VARCHAR(191) NOT NULL,
    received_at  DATETIME(3)  NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
    UNIQUE KEY uk_callback_receipt (source, callback_id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- Every deploy report, append-only: reconciliation of lost deploy callbacks
-- reads the highest successfully deployed MR iid from here (SPEC §8).
CREATE TABLE deploy_report (
    id           BIGINT       NOT NULL AUTO_INCREMENT PRIMARY KEY,
    callback_id  VARCHAR(191) NOT NULL,
    mr_iid       BIGINT       NOT NULL,
    sha          VARCHAR(64)  NULL,
    status       VARCHAR(16)  NOT NULL,   -- success | failed
    received_at  DATETIME(3)  NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
    KEY ix_deploy_report_status_mr (status, mr_iid)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- The deploy callback finds the operations of a merged MR by its iid.
CREATE INDEX ix_operation_mr_iid ON operation (mr_iid);
