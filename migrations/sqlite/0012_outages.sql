-- Outage clocks and settle counts; see the
-- MySQL twin of this file.
ALTER TABLE operation ADD COLUMN unreachable_since TEXT NULL;
ALTER TABLE merge_batch ADD COLUMN unreachable_since TEXT NULL;
ALTER TABLE merge_batch_request ADD COLUMN settled_count INTEGER NOT NULL DEFAULT 0;
