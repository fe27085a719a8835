-- Deploy reports per GitLab project; see the MySQL twin of this file.
ALTER TABLE deploy_report ADD COLUMN project TEXT NOT NULL DEFAULT '';
CREATE INDEX ix_deploy_report_status_project_mr ON deploy_report (status, project, mr_iid);
