-- The W3C traceparent of the request that submitted an operation (when
-- traces are exported), so that its later steps, its batch rounds and its
-- callbacks join or link to that request's trace. Safe while instances of
-- the previous release run (expand only: a nullable column they neither
-- read nor write; InnoDB adds it in place without blocking writes).
ALTER TABLE operation ADD COLUMN trace_parent VARCHAR(64) NULL;
