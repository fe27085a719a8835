//! Approve with a checklist, the upstream extension of GITLAB.md: the
//! project's checklist is fetched once and cached; an approve answered 422
//! with the current checklist rebuilds the request from it and tries once
//! more. Both approve implementations report failures as the same
//! [`GitLabError`] with GitLab's real status.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use reqwest::{Method, StatusCode};
use secrecy::SecretString;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{GitLabClient, GitLabError, error_body, project_ref, status_error};
use crate::config::resolve::ApproveImpl;

/// One checklist item.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct ChecklistItem {
    /// What the approver confirms.
    pub id: String,
}

#[derive(Debug, Deserialize)]
struct Checklist {
    #[serde(default)]
    items: Vec<ChecklistItem>,
}

/// Checklists by project, shared by every clone of a client.
#[derive(Clone, Default)]
pub(super) struct ChecklistCache(Arc<Mutex<HashMap<String, Vec<ChecklistItem>>>>);

impl ChecklistCache {
    fn get(&self, project: &str) -> Option<Vec<ChecklistItem>> {
        let cache = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        cache.get(project).cloned()
    }

    fn put(&self, project: &str, items: Vec<ChecklistItem>) {
        let mut cache = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        cache.insert(project.to_owned(), items);
    }
}

impl GitLabClient {
    /// Approves as the token's user with the implementation the
    /// configuration names for this call.
    pub async fn approve_with(
        &self,
        implementation: ApproveImpl,
        token: &SecretString,
        project: &str,
        iid: i64,
    ) -> Result<(), GitLabError> {
        match implementation {
            ApproveImpl::Standard => self.approve(token, project, iid).await,
            ApproveImpl::Checklist => self.approve_with_checklist(token, project, iid).await,
        }
    }

    /// The project's approval checklist, from the cache or from GitLab.
    async fn checklist(
        &self,
        token: &SecretString,
        project: &str,
    ) -> Result<Vec<ChecklistItem>, GitLabError> {
        if let Some(items) = self.checklists.get(project) {
            return Ok(items);
        }
        let path = format!("/projects/{}/approval_checklist", project_ref(project));
        let checklist: Checklist = self.call(token, Method::GET, &path, None).await?;
        self.checklists.put(project, checklist.items.clone());
        Ok(checklist.items)
    }

    async fn approve_with_checklist(
        &self,
        token: &SecretString,
        project: &str,
        iid: i64,
    ) -> Result<(), GitLabError> {
        let path = format!(
            "/projects/{}/merge_requests/{iid}/approve",
            project_ref(project)
        );
        let mut items = self.checklist(token, project).await?;
        let mut healed = false;
        loop {
            let answers: Vec<Value> = items
                .iter()
                .map(|item| json!({ "id": item.id, "checked": true }))
                .collect();
            let body = json!({ "checklist": answers });
            let response = self
                .exchange(token, Method::POST, &path, Some(&body))
                .await?;
            if response.status().is_success() {
                return Ok(());
            }
            let (status, _, body) = error_body(response).await;
            let current = body
                .as_ref()
                .and_then(|body| body.get("checklist"))
                .and_then(|checklist| Checklist::deserialize(checklist).ok());
            match current {
                // The checklist changed since it was cached: rebuild once.
                Some(current) if status == StatusCode::UNPROCESSABLE_ENTITY && !healed => {
                    tracing::info!(
                        project,
                        "approval checklist changed; approving with the new one"
                    );
                    self.checklists.put(project, current.items.clone());
                    items = current.items;
                    healed = true;
                }
                _ => return Err(status_error(status, body.as_ref())),
            }
        }
    }
}
