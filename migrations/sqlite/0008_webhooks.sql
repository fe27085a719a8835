-- Outbound webhooks; see the MySQL twin of this file for the design notes.
ALTER TABLE event ADD COLUMN relayed INTEGER NOT NULL DEFAULT 0;
CREATE INDEX ix_event_unrelayed ON event (relayed, id);
UPDATE event SET relayed = 1;

CREATE TABLE webhook_endpoint (
    id                     INTEGER PRIMARY KEY AUTOINCREMENT,
    url                    TEXT    NOT NULL,
    description            TEXT    NOT NULL DEFAULT '',
    event_types            TEXT    NOT NULL DEFAULT '',
    secret                 TEXT    NOT NULL,
    previous_secret        TEXT    NULL,
    previous_secret_until  TEXT    NULL,
    enabled                INTEGER NOT NULL DEFAULT 1,
    disabled_reason        TEXT    NULL,
    breaker_state          TEXT    NOT NULL DEFAULT 'closed',
    breaker_failures       INTEGER NOT NULL DEFAULT 0,
    breaker_until          TEXT    NULL,
    created_at             TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now')),
    updated_at             TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now'))
);

CREATE TABLE webhook_delivery (
    id               INTEGER PRIMARY KEY AUTOINCREMENT,
    endpoint_id      INTEGER NOT NULL,
    event_id         INTEGER NOT NULL,
    event_type       TEXT    NOT NULL,
    msg_id           TEXT    NOT NULL,
    body             TEXT    NOT NULL,
    status           TEXT    NOT NULL,
    version          INTEGER NOT NULL DEFAULT 0,
    attempts         INTEGER NOT NULL DEFAULT 0,
    next_attempt_at  TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now')),
    lease_owner      TEXT    NULL,
    lease_until      TEXT    NULL,
    last_status      INTEGER NULL,
    last_error       TEXT    NULL,
    created_at       TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now')),
    updated_at       TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now'))
);
CREATE UNIQUE INDEX ux_delivery_event_endpoint ON webhook_delivery (event_id, endpoint_id);
CREATE INDEX ix_delivery_due ON webhook_delivery (status, next_attempt_at);
CREATE INDEX ix_delivery_endpoint ON webhook_delivery (endpoint_id, id);
