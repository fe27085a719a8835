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
    /// cases of pipeline `pipeline_id` name, each once (a `./` in front
    /// dropped, absolute paths left out); empty when the report names none.
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
        Ok(failed_files(report))
    }
}

/// The repository paths the failed and errored cases of `report` name,
/// sorted, each once.
fn failed_files(report: TestReport) -> Vec<String> {
    let mut files: Vec<String> = report
        .test_suites
        .into_iter()
        .flat_map(|suite| suite.test_cases)
        .filter(|case| matches!(case.status.as_deref(), Some("failed" | "error")))
        .filter_map(|case| case.file)
        .filter_map(|file| repository_path(&file).map(str::to_owned))
        .collect();
    files.sort();
    files.dedup();
    files
}

/// A JUnit `file` as a path in the repository: reporters write it relative
/// to the job's checkout, often with a leading `./`. An absolute path (the
/// runner's checkout directory in front) names no file changegate wrote.
fn repository_path(file: &str) -> Option<&str> {
    let mut path = file;
    while let Some(rest) = path.strip_prefix("./") {
        path = rest;
    }
    (!path.is_empty() && !path.starts_with('/')).then_some(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reported_file_is_read_as_a_repository_path() {
        assert_eq!(
            repository_path("./bindings/a.yaml"),
            Some("bindings/a.yaml")
        );
        assert_eq!(repository_path("bindings/a.yaml"), Some("bindings/a.yaml"));
        assert_eq!(repository_path("././a.yaml"), Some("a.yaml"));
        assert_eq!(repository_path("/builds/g/p/a.yaml"), None);
        assert_eq!(repository_path("./"), None);
    }

    #[test]
    fn the_failed_and_errored_cases_name_the_files_each_once() {
        let report: TestReport = serde_json::from_value(serde_json::json!({
            "total_count": 5,
            "test_suites": [
                { "name": "check", "test_cases": [
                    { "status": "success", "name": "a", "file": "./a.yaml" },
                    { "status": "failed", "name": "b", "file": "./b.yaml" },
                    { "status": "failed", "name": "b again", "file": "b.yaml" },
                    { "status": "skipped", "name": "c", "file": "./c.yaml" },
                ]},
                { "name": "lint", "test_cases": [
                    { "status": "error", "name": "d", "file": "d/e.yaml" },
                    { "status": "failed", "name": "no file" },
                ]},
            ],
        }))
        .unwrap();
        assert_eq!(failed_files(report), ["b.yaml", "d/e.yaml"]);
        let empty: TestReport =
            serde_json::from_value(serde_json::json!({ "total_count": 0, "test_suites": [] }))
                .unwrap();
        assert!(failed_files(empty).is_empty());
    }
}
