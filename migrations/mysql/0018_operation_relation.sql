-- Every operation of one subject and target, newest first: a request's page
-- lists the later applies and removals of its relation, each marked current
-- or superseded. Safe while instances of the previous release run (expand
-- only: a new index; InnoDB builds it in place without blocking writes).
CREATE INDEX ix_operation_relation ON operation (subject_id, target_key, id);
