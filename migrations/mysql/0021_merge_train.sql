-- The merge train (SPEC §7): up to `batch.max_in_flight` batches of one
-- partition are in flight at once. Batch k+1's branch starts at batch k's
-- head, so its pipeline tests the tree the target branch will have once k
-- has merged; batches merge in train order only.
--
-- `train_position` orders a partition's active batches: unique among them
-- (`uk_merge_batch_train`, replacing the one-active-batch slot), taken by
-- the claim as one past the last, so two claimers of the same place meet
-- on the index and one of them tries again next round. The default 1 is
-- the place a release without the train takes: it can claim only while
-- nobody holds the front, as before.
--
-- `merging_slot` is the partition while a batch is merging: unique, so at
-- most one merge per target branch is ever in progress.
--
-- `ahead_batch_id` and `base_sha` say what a batch was built on (the batch
-- ahead and its head, or the target branch's head); `head_sha` is the head
-- its pipeline tests. A merge is allowed only when the target branch holds
-- exactly what the batch was built on (see src/batch/train.rs).
--
-- `rebuilds` counts how often the batch was built again, each time on a
-- branch of its own (`changegate/merge-batch-<n>-r<rebuilds>`).
--
-- `opened_at`, `passed_at` and `merging_at` are when its MR opened, its
-- pipeline passed and it started merging (database time): the measured
-- history the queue's expected times come from.
--
-- Expand only, except the slot's index: while instances of the previous
-- release still run, freeze the queue (see the README's upgrade notes),
-- or they may open a batch beside the train's front.
ALTER TABLE merge_batch
    ADD COLUMN train_position BIGINT NOT NULL DEFAULT 1 AFTER partition_key,
    ADD COLUMN ahead_batch_id BIGINT NULL AFTER train_position,
    ADD COLUMN base_sha VARCHAR(64) NULL AFTER ahead_batch_id,
    ADD COLUMN head_sha VARCHAR(64) NULL AFTER base_sha,
    ADD COLUMN rebuilds INT NOT NULL DEFAULT 0 AFTER head_sha,
    ADD COLUMN opened_at DATETIME(3) NULL AFTER rebuilds,
    ADD COLUMN passed_at DATETIME(3) NULL AFTER opened_at,
    ADD COLUMN merging_at DATETIME(3) NULL AFTER passed_at,
    ADD COLUMN merging_slot VARCHAR(191)
        AS (CASE WHEN status = 'RUNNING' AND phase = 'MERGING' THEN partition_key ELSE NULL END) STORED;

ALTER TABLE merge_batch
    ADD UNIQUE KEY uk_merge_batch_train (active_slot, train_position),
    ADD UNIQUE KEY uk_merge_batch_merging (merging_slot),
    DROP INDEX uk_merge_batch_active_slot;
