-- Outbound webhooks (SPEC §9).
--
-- Relay. Every event starts with relayed = 0. A relay round, in one
-- transaction, marks a page of unrelayed events relayed with a guarded
-- UPDATE (`... WHERE id IN (...) AND relayed = 0`, affected rows must equal
-- the rows read, else roll back: another instance relayed them) and inserts
-- one delivery per matching enabled endpoint. Both commit or neither does, so
-- an event is fanned out exactly once and never lost. A cursor over event ids
-- was rejected: AUTO_INCREMENT ids are taken at insert, not at commit, so a
-- slow flip can commit id 10 after id 11 was relayed and a cursor would skip
-- it for ever. The unique (event_id, endpoint_id) key is the second guard.
-- Events older than this migration are marked relayed: enabling webhooks does
-- not flood subscribers with history.
ALTER TABLE event
    ADD COLUMN relayed BOOLEAN NOT NULL DEFAULT FALSE,
    ADD KEY ix_event_unrelayed (relayed, id);
UPDATE event SET relayed = TRUE;

-- Subscribers. event_types is ',a,b,' (matched in code), '' for every type.
-- Secrets are Standard Webhooks `whsec_` strings; previous_secret stays valid
-- (deliveries carry both signatures) until previous_secret_until.
-- Circuit breaker, shared by every instance: breaker_state closed|open|half_open;
-- breaker_until is when an open breaker may be probed, or when a half-open
-- probe is considered lost. Every state change is a guarded UPDATE naming the
-- state read, so exactly one instance wins it and logs it.
CREATE TABLE webhook_endpoint (
    id                     BIGINT        NOT NULL AUTO_INCREMENT PRIMARY KEY,
    url                    VARCHAR(2048) NOT NULL,
    description            VARCHAR(500)  NOT NULL DEFAULT '',
    event_types            VARCHAR(1000) NOT NULL DEFAULT '',
    secret                 VARCHAR(128)  NOT NULL,
    previous_secret        VARCHAR(128)  NULL,
    previous_secret_until  DATETIME(3)   NULL,
    enabled                BOOLEAN       NOT NULL DEFAULT TRUE,
    disabled_reason        VARCHAR(200)  NULL,
    breaker_state          VARCHAR(16)   NOT NULL DEFAULT 'closed',
    breaker_failures       INT           NOT NULL DEFAULT 0,
    breaker_until          DATETIME(3)   NULL,
    created_at             DATETIME(3)   NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
    updated_at             DATETIME(3)   NOT NULL DEFAULT CURRENT_TIMESTAMP(3)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- One event to one endpoint. body holds the exact bytes that are signed and
-- sent, serialised once by the relay. msg_id is the `webhook-id`, the same on
-- every attempt: receivers dedupe on it (delivery is at least once).
-- status: queued -> sending (claimed) -> delivered | queued (retry) | failed;
-- silent when silent mode was on (never sent). A claim is the compare-and-swap
-- `UPDATE ... SET status = 'sending', version = version + 1, lease_until = ...
-- WHERE id = ? AND status = 'queued' AND version = ?` with exactly one row
-- affected; a claim whose lease ran out (its instance died) goes back to
-- queued, with a new version, so the dead owner's late write matches nothing.
CREATE TABLE webhook_delivery (
    id               BIGINT        NOT NULL AUTO_INCREMENT PRIMARY KEY,
    endpoint_id      BIGINT        NOT NULL,
    event_id         BIGINT        NOT NULL,
    event_type       VARCHAR(64)   NOT NULL,
    msg_id           VARCHAR(64)   NOT NULL,
    body             MEDIUMTEXT    NOT NULL,
    status           VARCHAR(16)   NOT NULL,
    version          BIGINT        NOT NULL DEFAULT 0,
    attempts         INT           NOT NULL DEFAULT 0,
    next_attempt_at  DATETIME(3)   NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
    lease_owner      VARCHAR(64)   NULL,
    lease_until      DATETIME(3)   NULL,
    last_status      INT           NULL,
    last_error       VARCHAR(500)  NULL,
    created_at       DATETIME(3)   NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
    updated_at       DATETIME(3)   NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
    UNIQUE KEY ux_delivery_event_endpoint (event_id, endpoint_id),
    -- due work (status = 'queued' AND next_attempt_at <= now) and expired leases
    KEY ix_delivery_due (status, next_attempt_at),
    -- the delivery log of one endpoint, newest first
    KEY ix_delivery_endpoint (endpoint_id, id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
