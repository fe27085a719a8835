-- What a requester (or an operator) asks about a request beyond its file
-- (SPEC §12).
--
-- `not_before`: the requester's earliest time for it to land (UTC). An
-- approved apply waits in the merge queue until then; its waiting row
-- carries the same time, so a round's claim skips it without a join. A
-- close waits at its first step (its `due_at` is that time).
--
-- `urgent`: an operator marked it urgent. Its waiting row moves to the
-- partition's urgent lane (`urgent:<partition>`), a train of its own, so
-- a batch of ordinary requests ahead (or failing) never holds it back.
--
-- `revert_of`: the request this one reverts (it restores the binding to
-- its state before that one landed); `ix_operation_revert_of` finds the
-- reverts of a request, the other direction of the link.
--
-- Expand only: instances of the previous release neither read nor write
-- these columns, and their defaults mean "no time, not urgent, no revert".
ALTER TABLE operation
    ADD COLUMN not_before DATETIME(3) NULL,
    ADD COLUMN urgent BOOLEAN NOT NULL DEFAULT FALSE,
    ADD COLUMN revert_of CHAR(36) NULL;
CREATE INDEX ix_operation_revert_of ON operation (revert_of);

ALTER TABLE merge_batch_request ADD COLUMN not_before DATETIME(3) NULL;
