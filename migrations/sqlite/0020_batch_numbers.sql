-- Merge batches are numbered per GitLab project, 1, 2, 3, … without gaps,
-- for what people see; see the MySQL twin for the design notes. Existing
-- batches are numbered per project in id order, and each counter starts
-- from its project's last number.
CREATE TABLE merge_batch_counter (
    project      TEXT    NOT NULL PRIMARY KEY,
    last_number  INTEGER NOT NULL
);

ALTER TABLE merge_batch ADD COLUMN number INTEGER NULL;

UPDATE merge_batch SET number = numbered.n
    FROM (SELECT id, ROW_NUMBER() OVER (PARTITION BY project ORDER BY id) AS n FROM merge_batch) AS numbered
    WHERE numbered.id = merge_batch.id;

INSERT INTO merge_batch_counter (project, last_number)
    SELECT project, MAX(number) FROM merge_batch WHERE number IS NOT NULL GROUP BY project;

CREATE UNIQUE INDEX uk_merge_batch_project_number ON merge_batch (project, number);
