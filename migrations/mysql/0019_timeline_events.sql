-- What a request's timeline shows beside its steps: each pipeline run of
-- its MR, each reviewer bot's approval, rebases and the merge commit,
-- recorded as history entries that change no step. `event` names the kind
-- (NULL for a step), `detail` what it is about (a pipeline's status, a
-- commit's sha), `url` its GitLab page. Safe while instances of the previous
-- release run (expand only: nullable columns they neither read nor write;
-- InnoDB adds them in place without blocking writes).
ALTER TABLE operation_history
    ADD COLUMN event VARCHAR(32) NULL,
    ADD COLUMN detail VARCHAR(191) NULL,
    ADD COLUMN url VARCHAR(1024) NULL;
