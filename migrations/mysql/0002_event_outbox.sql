-- Transactional outbox: every real binding status flip appends one event in
-- the same transaction as the flip, so an event exists if and only if the
-- flip committed. Outbound webhooks fan out from here.
CREATE TABLE event (
    id            BIGINT       NOT NULL AUTO_INCREMENT PRIMARY KEY,
    event_type    VARCHAR(64)  NOT NULL,
    operation_id  CHAR(36)     NOT NULL,
    subject_id    VARCHAR(191) NOT NULL,
    target_key    VARCHAR(191) NOT NULL,
    from_status   VARCHAR(32)  NULL,
    to_status     VARCHAR(32)  NOT NULL,
    payload       TEXT         NOT NULL,   -- JSON
    created_at    DATETIME(3)  NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
    KEY ix_event_operation (operation_id, id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
