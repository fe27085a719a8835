-- Deploy reports per GitLab project: MR iids are numbered per project, so a
-- deploy of one project's MR !7 says nothing about another project's !7,
-- and each project has its own watermark (SPEC §8). `project` is the key of
-- the project the callback named (trimmed, paths lowercased); empty for
-- reports stored before callbacks named projects, and for those an instance
-- of the previous release still writes during a rolling upgrade: both
-- belong to the default project, `gitlab.project`, as they always did.
ALTER TABLE deploy_report
    ADD COLUMN project VARCHAR(191) NOT NULL DEFAULT '' AFTER callback_id,
    -- per-project watermarks and "deployed since", for successful reports
    ADD KEY ix_deploy_report_status_project_mr (status, project, mr_iid);
-- ix_deploy_report_status_mr stays while the previous release may still run
-- (its watermark reads it); a later migration drops it.
