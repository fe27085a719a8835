-- Durable execution (SPEC §6, beyond): waiting is data, and a step in
-- flight holds a lease, so a crash loses nothing.
--
-- `due_at`: when a worker should next run the operation's step; NULL while
-- it waits for something outside (a decision, a deploy, an operator) or is
-- finished. Every step write sets it from the new step, in the same UPDATE.
-- `attempts`: polls of the current step so far (stepped polling), reset by
-- every step write.
-- `lease_owner`/`lease_until`: the instance running the step, taken by
-- compare-and-swap on an expired (or absent) lease and renewed while the
-- step runs; after a crash the lease runs out and any instance takes over.

ALTER TABLE operation
    ADD COLUMN due_at      DATETIME(3)  NULL,
    ADD COLUMN attempts    INT          NOT NULL DEFAULT 0,
    ADD COLUMN lease_owner VARCHAR(64)  NULL,
    ADD COLUMN lease_until DATETIME(3)  NULL,
    -- the dispatcher: due operations, earliest first
    ADD KEY ix_operation_due (due_at);

-- Operations already at a step the workflow moves by itself are due now.
UPDATE operation SET due_at = updated_at
WHERE step_code IN (10001, 10003, 10005, 10008, 10009, 10101, 10201, 10202, 10203, 10301, 10501, 10502, 10503);
