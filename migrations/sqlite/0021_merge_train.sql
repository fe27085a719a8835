-- The merge train (SPEC §7); see the MySQL twin for the design notes.
ALTER TABLE merge_batch ADD COLUMN train_position INTEGER NOT NULL DEFAULT 1;
ALTER TABLE merge_batch ADD COLUMN ahead_batch_id INTEGER NULL;
ALTER TABLE merge_batch ADD COLUMN base_sha TEXT NULL;
ALTER TABLE merge_batch ADD COLUMN head_sha TEXT NULL;
ALTER TABLE merge_batch ADD COLUMN rebuilds INTEGER NOT NULL DEFAULT 0;
ALTER TABLE merge_batch ADD COLUMN opened_at TEXT NULL;
ALTER TABLE merge_batch ADD COLUMN passed_at TEXT NULL;
ALTER TABLE merge_batch ADD COLUMN merging_at TEXT NULL;
ALTER TABLE merge_batch ADD COLUMN merging_slot TEXT
    GENERATED ALWAYS AS (CASE WHEN status = 'RUNNING' AND phase = 'MERGING' THEN partition_key ELSE NULL END) VIRTUAL;

CREATE UNIQUE INDEX uk_merge_batch_train ON merge_batch (active_slot, train_position);
CREATE UNIQUE INDEX uk_merge_batch_merging ON merge_batch (merging_slot);
DROP INDEX uk_merge_batch_active_slot;
