-- Indexes that keep reads as cheap on a year of data as on an empty
-- database (benches/data_scale.rs, BENCHMARKS.md "Cost as the data grows"):
-- the operators' listing by step, target or subject reads its page newest
-- first straight from an index instead of sorting every match, and the
-- retention job finds the newest old webhook delivery through its age
-- instead of sorting the table. Safe while instances of the previous
-- release run (expand only: new indexes they do not need; InnoDB builds
-- them in place without blocking writes, and LOCK = NONE makes a server
-- that could not fail the migration rather than block).
ALTER TABLE operation
    ADD KEY ix_operation_step_id (step_code, id),
    ADD KEY ix_operation_target_id (target_key, id),
    ADD KEY ix_operation_subject_id (subject_id, id),
    ALGORITHM = INPLACE, LOCK = NONE;
ALTER TABLE webhook_delivery
    ADD KEY ix_delivery_updated (updated_at),
    ALGORITHM = INPLACE, LOCK = NONE;
