-- Idempotency records (SPEC §2.1): a key (the Idempotency-Key header, or the
-- client's operationId) maps to the operation it created, for a limited time.
-- The record is written in the same transaction as the operation, so a
-- record exists exactly when its operation does; a concurrent duplicate hits
-- the unique key and re-reads the winner.
CREATE TABLE idempotency_record (
    id               BIGINT       NOT NULL AUTO_INCREMENT PRIMARY KEY,
    requester        VARCHAR(191) NOT NULL,
    idempotency_key  VARCHAR(191) NOT NULL,
    request_hash     CHAR(64)     NOT NULL,   -- SHA-256 of the canonical request
    operation_id     CHAR(36)     NOT NULL,
    created_at       DATETIME(3)  NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
    expires_at       DATETIME(3)  NOT NULL,
    UNIQUE KEY uk_idempotency_key (requester, idempotency_key),
    -- the cleanup job deletes by expiry
    KEY ix_idempotency_expires (expires_at)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
