-- Append-only audit of operator actions (SPEC §2.3): who did what to which
-- operation, with the parameters as sent (secret-looking keys redacted,
-- values truncated) and the identity the server wrote over
-- `__authenticatedOperator`.
CREATE TABLE audit_log (
    id          BIGINT        NOT NULL AUTO_INCREMENT PRIMARY KEY,
    actor       VARCHAR(191)  NOT NULL,
    action      VARCHAR(64)   NOT NULL,
    subject     VARCHAR(191)  NOT NULL,   -- what the action was on, e.g. an operation id
    params      TEXT          NOT NULL,   -- JSON
    created_at  DATETIME(3)   NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
    KEY ix_audit_subject (subject, id),
    KEY ix_audit_created (created_at)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
