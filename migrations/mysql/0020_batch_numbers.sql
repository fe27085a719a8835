-- Merge batches are numbered per GitLab project, 1, 2, 3, … without gaps,
-- for what people see (MR titles, branch names, messages): the id is an
-- AUTO_INCREMENT, which a rolled-back claim skips and a Galera cluster
-- steps by its size. `merge_batch_counter` holds each project's last
-- number; a claim increments it in its own transaction, so a claim that
-- rolls back uses none, and claims of one project wait for each other on
-- that row. The unique (project, number) index makes a duplicate
-- impossible. Existing batches are numbered per project in id order, and
-- each counter starts from its project's last number.
--
-- Safe while instances of the previous release run (expand only): they
-- neither read nor write the new table and column, and a batch one of them
-- claims meanwhile has no number (NULL, which the unique index allows
-- any number of times) and goes by its id, as that release named it. The
-- numbering UPDATE locks `merge_batch` for its run, a moment on a table of
-- batches: a write of theirs that meets it waits for it (a claim picked as
-- a deadlock victim reads as "slot occupied" and is tried next round).
CREATE TABLE merge_batch_counter (
    project      VARCHAR(191) NOT NULL PRIMARY KEY,
    last_number  BIGINT       NOT NULL
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

ALTER TABLE merge_batch ADD COLUMN number BIGINT NULL AFTER id;

UPDATE merge_batch b
    JOIN (SELECT id, ROW_NUMBER() OVER (PARTITION BY project ORDER BY id) AS n FROM merge_batch) numbered
        ON numbered.id = b.id
    SET b.number = numbered.n;

INSERT INTO merge_batch_counter (project, last_number)
    SELECT project, MAX(number) FROM merge_batch WHERE number IS NOT NULL GROUP BY project;

ALTER TABLE merge_batch
    ADD UNIQUE KEY uk_merge_batch_project_number (project, number),
    ALGORITHM = INPLACE, LOCK = NONE;
