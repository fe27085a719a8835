//! `GET /projects/:id/repository/tree` (`lib/api/repositories.rb`, "List repository
//! tree" in `doc/api/repositories.md`), with real git object ids: a client compares a
//! blob's `id` with the SHA-1 of what it would write, so it must be git's blob id.

use std::collections::BTreeMap;
use std::fmt::Write as _;

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
    fn of(tree: &'a Tree) -> Self {
        let mut root = Dir::default();
        for (path, content) in tree {
            let mut parts: Vec<&str> = path.split('/').collect();
            let name = parts.pop().unwrap_or_default();
            let dir = parts
                .into_iter()
                .fold(&mut root, |dir, part| dir.dirs.entry(part).or_default());
            dir.files.insert(name, content);
        }
        root
    }

    /// The subdirectory at `path` (`""`: this one).
    fn find(&self, path: &str) -> Option<&Self> {
        path.split('/')
            .filter(|part| !part.is_empty())
            .try_fold(self, |dir, part| dir.dirs.get(part))
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
    let root = Dir::of(&commit.tree);
    let path = query.path.as_deref().unwrap_or_default().trim_matches('/');
    let dir = root
        .find(path)
        .ok_or(ApiError::NotFound("invalid revision or path"))?;
    let mut entries = Vec::new();
    dir.list(path, recursive, &mut entries);
    let (trees, blobs): (Vec<Value>, Vec<Value>) = entries
        .into_iter()
        .partition(|entry| entry["type"] == "tree");
    Ok(paginate(trees.into_iter().chain(blobs).collect(), &page))
}
