-- Leases by owner, for releasing an instance's leases on shutdown and an
-- earlier life's on start-up; see the MySQL twin of this file.
CREATE INDEX ix_operation_lease_owner ON operation (lease_owner);
CREATE INDEX ix_merge_batch_lease_owner ON merge_batch (lease_owner);
CREATE INDEX ix_delivery_lease_owner ON webhook_delivery (lease_owner);
