-- What keeps an operation or a merge batch from progressing; see the MySQL
-- twin of this file.
ALTER TABLE operation ADD COLUMN obstacle TEXT NULL;
ALTER TABLE merge_batch ADD COLUMN obstacle TEXT NULL;
