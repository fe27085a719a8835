//! Integration tests of the GitLab simulator, over real HTTP against a running instance.
//! The cases are split by area into the files of `gitlab/` to keep files small.

mod approvals;
mod commit_list;
mod control;
mod faults;
mod history;
mod merge_methods;
mod merge_requests;
mod merging;
mod repository;
mod schemas;
pub(crate) mod support;
mod test_reports;
mod train;
mod train_pipelines;
mod tree;
mod web;

use self::support::{BOT, Fixture, OUTSIDER};
use reqwest::Method;
use serde_json::json;

#[tokio::test]
async fn missing_or_unknown_token_is_401() {
    let fx = Fixture::start().await;
    let path = fx.root.clone();
    let missing = fx.send(Method::GET, None, &path, None).await;
    assert_eq!(missing.status, 401);
    assert_eq!(missing.body, json!({ "message": "401 Unauthorized" }));
    let unknown = fx.send(Method::GET, Some("nope"), &path, None).await;
    assert_eq!(unknown.status, 401);
    assert_eq!(unknown.body, json!({ "message": "401 Unauthorized" }));
}

#[tokio::test]
async fn project_is_found_by_id_or_encoded_path() {
    let fx = Fixture::start().await;
    let by_path = fx.get(BOT, &fx.root).await;
    assert_eq!(by_path.status, 200);
    assert_eq!(by_path.body["id"], fx.project);
    assert_eq!(by_path.body["path_with_namespace"], "config/repo");
    assert_eq!(by_path.body["default_branch"], "main");
    let by_id = fx.get(OUTSIDER, &format!("/projects/{}", fx.project)).await;
    assert_eq!(by_id.body, by_path.body);
    let unknown = fx.get(BOT, "/projects/nope%2Fnope").await;
    assert_eq!(unknown.status, 404);
    assert_eq!(unknown.body, json!({ "message": "404 Project Not Found" }));
    let no_route = fx.get(BOT, "/nothing/here").await;
    assert_eq!(no_route.status, 404);
}
