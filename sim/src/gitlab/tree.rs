//! `GET /projects/:id/repository/tree` (`lib/api/repositories.rb`, "List repository
//! tree" in `doc/api/repositories.md`), with real git object ids: a client compares a
//! blob's `id` with the SHA-1 of what it would write, so it must be git's blob id.

use std::collections::{BTreeMap, VecDeque};
use std::fmt::Write as _;
use std::ops::Bound;
use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::response::Response;
use serde::Deserialize;
use serde_json::{Value, json};
use sha1::{Digest, Sha1};

use super::SimContext;
use super::auth::Caller;
use super::error::{ApiError, ApiResult};
use super::params::{PageQuery, boolean, paginate};
use super::repo::Tree;

/// Git's id of a blob holding `content`: `sha1("blob <len>\0<content>")`.
pub fn blob_id(content: &str) -> String {
    hex(&object_id("blob", content.as_bytes()))
}

/// The raw SHA-1 of a git object of `kind` with `body`.
fn object_id(kind: &str, body: &[u8]) -> [u8; 20] {
    let mut hasher = Sha1::new();
    hasher.update(format!("{kind} {}\0", body.len()).as_bytes());
    hasher.update(body);
    hasher.finalize().into()
}

fn hex(bytes: &[u8]) -> String {
    bytes
        .iter()
        .fold(String::with_capacity(40), |mut out, byte| {
            let _ = write!(out, "{byte:02x}");
            out
        })
}

/// A directory of a flat [`Tree`]: its files and subdirectories by name.
#[derive(Default)]
struct Dir<'a> {
    files: BTreeMap<&'a str, &'a str>,
    dirs: BTreeMap<&'a str, Dir<'a>>,
}

impl<'a> Dir<'a> {
    /// The directory at `path` of `tree`, if it holds any file (`""`: the root, which
    /// a commit always has). Only
    /// the files under it are read, so listing one directory of a large tree costs that
    /// directory, not the tree.
    fn at(tree: &'a Tree, path: &str) -> Option<Self> {
        let prefix = if path.is_empty() {
            String::new()
        } else {
            format!("{path}/")
        };
        let mut root = Dir::default();
        let under = tree
            .range::<str, _>((Bound::Included(prefix.as_str()), Bound::Unbounded))
            .take_while(|(file, _)| file.starts_with(&prefix));
        for (file, content) in under {
            let mut parts: Vec<&str> = file[prefix.len()..].split('/').collect();
            let name = parts.pop().unwrap_or_default();
            let dir = parts
                .into_iter()
                .fold(&mut root, |dir, part| dir.dirs.entry(part).or_default());
            dir.files.insert(name, content);
        }
        let found = prefix.is_empty() || !(root.files.is_empty() && root.dirs.is_empty());
        found.then_some(root)
    }

    /// Names in git's tree order: bytewise, a directory sorting as if its name ended in
    /// `/`. Each with `Some(dir)` for a directory, `None` for a file.
    fn entries(&self) -> Vec<(&'a str, Option<&Self>)> {
        let mut entries: Vec<(&str, Option<&Self>)> = self
            .files
            .keys()
            .map(|name| (*name, None))
            .chain(self.dirs.iter().map(|(name, dir)| (*name, Some(dir))))
            .collect();
        let key = |(name, dir): &(&str, Option<&Self>)| {
            let mut key = name.as_bytes().to_vec();
            if dir.is_some() {
                key.push(b'/');
            }
            key
        };
        entries.sort_by_key(key);
        entries
    }

    /// The raw id of this directory's git tree object.
    fn tree_id(&self) -> [u8; 20] {
        let mut body = Vec::new();
        for (name, dir) in self.entries() {
            let (mode, id) = match dir {
                Some(dir) => ("40000", dir.tree_id()),
                None => ("100644", object_id("blob", self.files[name].as_bytes())),
            };
            body.extend_from_slice(format!("{mode} {name}\0").as_bytes());
            body.extend_from_slice(&id);
        }
        object_id("tree", &body)
    }

    /// `TreeObject` entities under `prefix`, in the order `git ls-tree [-r -t]` lists them.
    fn list(&self, prefix: &str, recursive: bool, out: &mut Vec<Value>) {
        for (name, dir) in self.entries() {
            let path = if prefix.is_empty() {
                name.to_owned()
            } else {
                format!("{prefix}/{name}")
            };
            let (kind, mode, id) = match dir {
                Some(dir) => ("tree", "040000", hex(&dir.tree_id())),
                None => ("blob", "100644", blob_id(self.files[name])),
            };
            out.push(json!({ "id": id, "name": name, "type": kind, "path": path, "mode": mode }));
            if let (Some(dir), true) = (dir, recursive) {
                dir.list(&path, recursive, out);
            }
        }
    }
}

/// The listings built most recently. A commit never changes, so the listing of one
/// commit, path and depth is built once and each of its pages is cut from it: a client
/// paging through a directory of 10,000 files makes 100 cheap requests, not 100 builds
/// of the whole directory.
#[derive(Default)]
pub struct Listings {
    recent: VecDeque<(ListingKey, Arc<Vec<Value>>)>,
}

/// A listing's project, commit id, path and whether it is recursive.
type ListingKey = (u64, String, String, bool);

/// How many listings are kept: enough for every directory one client pages through.
const LISTINGS_KEPT: usize = 64;

impl Listings {
    /// The listing under `key`, built by `build` unless kept.
    fn get_or_build(
        &mut self,
        key: ListingKey,
        build: impl FnOnce() -> ApiResult<Vec<Value>>,
    ) -> ApiResult<Arc<Vec<Value>>> {
        if let Some((_, listing)) = self.recent.iter().find(|(kept, _)| *kept == key) {
            return Ok(Arc::clone(listing));
        }
        let listing = Arc::new(build()?);
        if self.recent.len() == LISTINGS_KEPT {
            self.recent.pop_front();
        }
        self.recent.push_back((key, Arc::clone(&listing)));
        Ok(listing)
    }
}

/// Query of the tree listing, besides pagination.
#[derive(Debug, Deserialize)]
pub struct TreeQuery {
    #[serde(rename = "ref")]
    reference: Option<String>,
    path: Option<String>,
    recursive: Option<String>,
}

/// `GET /projects/:id/repository/tree`: `ref` (a branch, commit id or `HEAD`; the default
/// branch when absent), `path`, `recursive`, offset pagination. Trees come before blobs
/// (`sorted_entries` in `app/models/tree.rb`). An unknown ref is `404 Tree Not Found`; a path that is no
/// directory at that ref is `404 invalid revision or path Not Found`, the Gitaly error
/// `not_found!` wraps (`spec/requests/api/repositories_spec.rb`; for a path naming a
/// file rather than a directory this is inferred).
pub async fn list_tree(
    State(ctx): State<SimContext>,
    _caller: Caller,
    Path(project): Path<String>,
    Query(query): Query<TreeQuery>,
    page: PageQuery,
) -> ApiResult<Response> {
    let recursive = boolean(query.recursive.as_deref(), "recursive")?.unwrap_or(false);
    let mut state = ctx.lock();
    let scope = state.scope(&project)?;
    let project = &*scope.project;
    let reference = query
        .reference
        .as_deref()
        .unwrap_or(&project.default_branch);
    let commit = project.resolve(reference);
    let commit = commit.ok_or(ApiError::NotFound("Tree"))?;
    let path = query.path.as_deref().unwrap_or_default().trim_matches('/');
    let key = (project.id, commit.id.clone(), path.to_owned(), recursive);
    let listing = ctx
        .listings
        .lock()
        .expect("tree listings poisoned")
        .get_or_build(key, || {
            let dir = Dir::at(&commit.tree, path)
                .ok_or(ApiError::NotFound("invalid revision or path"))?;
            let mut entries = Vec::new();
            dir.list(path, recursive, &mut entries);
            let (trees, blobs): (Vec<Value>, Vec<Value>) = entries
                .into_iter()
                .partition(|entry| entry["type"] == "tree");
            Ok(trees.into_iter().chain(blobs).collect())
        })?;
    Ok(paginate(&listing, &page))
}
