-- Since when an operation's step, or a merge batch's round, has been unable
-- to connect to the system it calls (GitLab): set by the first such failure,
-- kept while the outage lasts, cleared by the next answer. An outage longer
-- than `workflow.unreachable_deadline` fails the step (waiting no longer
-- looks like it will help), counted on the database's clock so that every
-- instance and every restart agree on it.
ALTER TABLE operation ADD COLUMN unreachable_since DATETIME(3) NULL;
ALTER TABLE merge_batch ADD COLUMN unreachable_since DATETIME(3) NULL;
-- How many of a waiting request's batches were settled without merging or
-- failing (for example when GitLab never answered); after
-- `batch.max_attempts` the request fails instead of waiting again. An
-- operator's retry starts the count again.
ALTER TABLE merge_batch_request ADD COLUMN settled_count INT NOT NULL DEFAULT 0;
