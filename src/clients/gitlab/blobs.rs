//! The file on a branch, read for previews: its blob id from a `HEAD`
//! request (`X-Gitlab-Blob-Id`, doc/api/repository_files.md, "Get file
//! metadata only"), its content from a small cache keyed by that id, and
//! from GitLab only on a miss. A blob id names its content, so a cached
//! entry can never be stale; the cache only bounds how long it is kept.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use reqwest::{Method, StatusCode};
use secrecy::SecretString;

use super::{GitLabClient, GitLabError, git_blob_id, project_ref, query_value};

/// How long a blob's content is kept.
const KEEP: Duration = Duration::from_secs(60);
/// How many blobs are kept at most; the oldest go first.
const CAPACITY: usize = 256;

/// A blob's content and when it was read.
type Kept = (Instant, Arc<str>);

/// Blob id → content, each kept for [`KEEP`]; shared by a client's clones.
#[derive(Clone, Default)]
pub(super) struct BlobCache {
    entries: Arc<Mutex<HashMap<String, Kept>>>,
}

impl BlobCache {
    fn get(&self, blob_id: &str) -> Option<Arc<str>> {
        let entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        entries
            .get(blob_id)
            .filter(|(at, _)| at.elapsed() < KEEP)
            .map(|(_, content)| Arc::clone(content))
    }

    fn put(&self, blob_id: String, content: Arc<str>) {
        let mut entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        entries.retain(|_, (at, _)| at.elapsed() < KEEP);
        if entries.len() >= CAPACITY
            && let Some(oldest) = entries
                .iter()
                .min_by_key(|(_, (at, _))| *at)
                .map(|(id, _)| id.clone())
        {
            entries.remove(&oldest);
        }
        entries.insert(blob_id, (Instant::now(), content));
    }
}

impl GitLabClient {
    /// The content of `file_path` at `reference` now, `None` when there is
    /// no such file: the blob id first (a `HEAD`, no content), then the
    /// content from the cache, or read once and kept. A GitLab that answers
    /// the `HEAD` without the blob id is read in full each time.
    pub async fn cached_file(
        &self,
        token: &SecretString,
        project: &str,
        file_path: &str,
        reference: &str,
    ) -> Result<Option<Arc<str>>, GitLabError> {
        let path = format!(
            "/projects/{}/repository/files/{}?ref={}",
            project_ref(project),
            query_value(file_path),
            query_value(reference)
        );
        let blob_id = match self.send(token, Method::HEAD, &path, None).await {
            Ok(response) => response
                .headers()
                .get("x-gitlab-blob-id")
                .and_then(|value| value.to_str().ok())
                .map(str::to_owned),
            Err(GitLabError::Status { status, .. }) if status == StatusCode::NOT_FOUND => {
                return Ok(None);
            }
            Err(err) => return Err(err),
        };
        if let Some(content) = blob_id.as_deref().and_then(|id| self.blobs.get(id)) {
            return Ok(Some(content));
        }
        let Some(content) = self
            .file_content(token, project, file_path, reference)
            .await?
        else {
            return Ok(None);
        };
        // Kept under the id of what was read (the branch may have moved
        // since the HEAD), so an entry always holds its own blob.
        let content: Arc<str> = content.into();
        self.blobs.put(git_blob_id(&content), Arc::clone(&content));
        Ok(Some(content))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cache_keeps_at_most_its_capacity_dropping_the_oldest() {
        let cache = BlobCache::default();
        for i in 0..CAPACITY + 10 {
            cache.put(format!("blob-{i}"), Arc::from(format!("content {i}")));
        }
        let entries = cache.entries.lock().unwrap();
        assert_eq!(entries.len(), CAPACITY);
        assert!(!entries.contains_key("blob-0"));
        assert!(entries.contains_key(&format!("blob-{}", CAPACITY + 9)));
    }

    #[test]
    fn an_entry_is_found_by_its_blob_id() {
        let cache = BlobCache::default();
        cache.put("abc".to_owned(), Arc::from("x"));
        assert_eq!(cache.get("abc").as_deref(), Some("x"));
        assert_eq!(cache.get("abd"), None);
    }
}
