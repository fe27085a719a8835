-- What currently keeps an operation, or a merge batch, from progressing,
-- in words a requester can pass on (for example "GitLab's certificate is
-- not trusted"); NULL when nothing does. Set while a call to another system
-- cannot connect, cleared by the next answered round or the next step, and
-- shown as the operation's message meanwhile. Kept apart from `message`,
-- which explains the step itself and must come back once the obstacle goes.
ALTER TABLE operation ADD COLUMN obstacle VARCHAR(255) NULL;
ALTER TABLE merge_batch ADD COLUMN obstacle VARCHAR(255) NULL;
