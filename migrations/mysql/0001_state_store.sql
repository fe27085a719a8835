-- The two layers of request state (SPEC §1, §5).
--
-- `operation` is one attempt (apply or close) with its fine-grained step;
-- `binding` is what the requester sees, one row per (subject, target).
-- Every state write names the expected `version` and checks affected rows
-- (I6); `version` only ever grows, so a row that leaves a state and returns
-- to it is still detected as changed (no ABA).
--
-- utf8mb4_bin: keys compare byte for byte, as on SQLite, so "Alice" and
-- "alice" are never the same subject on one backend and different on the
-- other. (It pads: 'x' equals 'x ' here but not on SQLite, so the service
-- never stores keys with trailing spaces: subjects, keys and ids are validated.)
-- Times: DATETIME(3) from the database clock (the connection runs in UTC).

CREATE TABLE operation (
    id            BIGINT        NOT NULL AUTO_INCREMENT PRIMARY KEY,
    operation_id  CHAR(36)      NOT NULL,
    kind          VARCHAR(16)   NOT NULL,   -- APPLY | CLOSE
    subject_id    VARCHAR(191)  NOT NULL,
    target_key    VARCHAR(191)  NOT NULL,
    requested_by  VARCHAR(191)  NOT NULL,
    flow_order    VARCHAR(16)   NOT NULL,   -- fixed at creation: a switch never strands a request
    step_code     INT           NOT NULL,
    message       VARCHAR(1024) NULL,
    params        TEXT          NOT NULL,   -- JSON
    reason        VARCHAR(2000) NOT NULL,
    expires_at    DATETIME(3)   NULL,
    mr_iid        BIGINT        NULL,
    mr_url        VARCHAR(1024) NULL,
    version       BIGINT        NOT NULL DEFAULT 1,
    created_at    DATETIME(3)   NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
    updated_at    DATETIME(3)   NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
    UNIQUE KEY uk_operation_operation_id (operation_id),
    -- operators: operations by step and age
    KEY ix_operation_step_updated (step_code, updated_at),
    -- requesters: my operations, newest first
    KEY ix_operation_requested_by (requested_by, id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE TABLE binding (
    id            BIGINT        NOT NULL AUTO_INCREMENT PRIMARY KEY,
    subject_id    VARCHAR(191)  NOT NULL,
    target_key    VARCHAR(191)  NOT NULL,
    operation_id  CHAR(36)      NOT NULL,   -- the current attempt
    status        VARCHAR(32)   NOT NULL,
    requested_by  VARCHAR(191)  NOT NULL,
    params        TEXT          NOT NULL,   -- JSON
    expires_at    DATETIME(3)   NULL,
    version       BIGINT        NOT NULL DEFAULT 1,
    created_at    DATETIME(3)   NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
    updated_at    DATETIME(3)   NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
    -- I5: one row per relation; re-apply resets this row in place
    UNIQUE KEY uk_binding_relation (subject_id, target_key),
    UNIQUE KEY uk_binding_operation (operation_id),
    -- reconciliation (MERGED within a time window) and expiry sweeps
    KEY ix_binding_status_updated (status, updated_at),
    -- requesters: my bindings, newest first, cursor-paginated by id
    KEY ix_binding_requested_by (requested_by, id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- Append-only: every step and status change of an operation, in order.
CREATE TABLE operation_history (
    id                 BIGINT        NOT NULL AUTO_INCREMENT PRIMARY KEY,
    operation_id       CHAR(36)      NOT NULL,
    from_step          INT           NULL,
    to_step            INT           NOT NULL,
    from_status        VARCHAR(32)   NULL,
    to_status          VARCHAR(32)   NULL,
    operation_version  BIGINT        NOT NULL,
    actor              VARCHAR(191)  NOT NULL,
    message            VARCHAR(1024) NULL,
    created_at         DATETIME(3)   NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
    KEY ix_operation_history_operation (operation_id, id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
