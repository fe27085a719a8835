//! The files a failed pipeline's tests name: its test report
//! (`GET /projects/:id/pipelines/:pipeline_id/test_report`, doc/api/pipelines.md,
//! "Get a pipeline's test report"; `lib/api/ci/pipelines.rb` presents
//! `TestReportEntity`, whose cases carry `file` from the JUnit `file`
//! attribute, `app/serializers/test_case_entity.rb`). A project whose CI
//! publishes no JUnit report answers an empty one. GitLab caches a report
//! for two minutes once it has one (`cache_action_if(pipeline.has_test_reports?,
//! …, expires_in: 2.minutes)`), so it is read only once the pipeline has
//! finished.

use reqwest::Method;
use secrecy::SecretString;
use serde::Deserialize;

use super::{GitLabClient, GitLabError, project_ref};

#[derive(Deserialize)]
struct TestReport {
    #[serde(default)]
    test_suites: Vec<TestSuite>,
}

#[derive(Deserialize)]
struct TestSuite {
    #[serde(default)]
    test_cases: Vec<TestCase>,
}

#[derive(Deserialize)]
struct TestCase {
    status: Option<String>,
    file: Option<String>,
}

impl GitLabClient {
    /// The repository paths of the files the failed and errored test
    /// cases of pipeline `pipeline_id` name (`./a/b.yaml` read as
    /// `a/b.yaml`), each once; empty when the report names none.
    pub async fn failed_test_files(
        &self,
        token: &SecretString,
        project: &str,
        pipeline_id: i64,
    ) -> Result<Vec<String>, GitLabError> {
        let path = format!(
            "/projects/{}/pipelines/{pipeline_id}/test_report",
            project_ref(project)
        );
        let report: TestReport = self.call(token, Method::GET, &path, None).await?;
        let mut files: Vec<String> = report
            .test_suites
            .into_iter()
            .flat_map(|suite| suite.test_cases)
            .filter(|case| matches!(case.status.as_deref(), Some("failed" | "error")))
            .filter_map(|case| case.file)
            .map(|file| repository_path(&file).to_owned())
            .filter(|file| !file.is_empty())
            .collect();
        files.sort();
        files.dedup();
        Ok(files)
    }
}

/// A JUnit `file` as a path in the repository: reporters write it relative
/// to the job's checkout, often with a leading `./`.
fn repository_path(file: &str) -> &str {
    let mut path = file;
    while let Some(rest) = path.strip_prefix("./") {
        path = rest;
    }
    path.trim_start_matches('/')
}

#[cfg(test)]
mod tests {
    use super::repository_path;

    #[test]
    fn a_reported_file_is_read_as_a_repository_path() {
        assert_eq!(repository_path("./bindings/a.yaml"), "bindings/a.yaml");
        assert_eq!(repository_path("bindings/a.yaml"), "bindings/a.yaml");
        assert_eq!(repository_path("././a.yaml"), "a.yaml");
    }
}
