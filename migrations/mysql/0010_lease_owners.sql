-- Leases by owner: an owner id is `<seat>-<life>-<role>`, where the seat
-- names the host and port an instance serves on and the life one run of it.
-- On a graceful shutdown an instance releases what its life holds, and on
-- start-up what an earlier life on the same seat left behind (it died: no
-- two live instances share a seat, they could not bind the same port). Both
-- are prefix matches on lease_owner, which these indexes serve, so neither
-- scans (nor locks) whole tables.
ALTER TABLE operation ADD KEY ix_operation_lease_owner (lease_owner);
ALTER TABLE merge_batch ADD KEY ix_merge_batch_lease_owner (lease_owner);
ALTER TABLE webhook_delivery ADD KEY ix_delivery_lease_owner (lease_owner);
