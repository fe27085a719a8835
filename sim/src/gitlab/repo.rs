//! The git model: commits holding whole-tree snapshots, branches as movable heads, and the
//! tree arithmetic (file actions, merge base, replaying one side onto another) that the
//! commit, merge and rebase endpoints build on.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap, HashSet, VecDeque};

use chrono::{DateTime, Utc};
use serde_json::{Value, json};

use super::state::{Ids, timestamp};

/// Every file of a commit, path → content. Whole snapshots keep merge and rebase simple to
/// express, and the simulated repositories hold a handful of small files.
pub type Tree = BTreeMap<String, String>;

/// One commit, with the whole tree it points at.
#[derive(Clone, Debug)]
pub struct Commit {
    pub id: String,
    pub parent_ids: Vec<String>,
    pub message: String,
    pub author_name: String,
    pub created_at: DateTime<Utc>,
    pub tree: Tree,
}

impl Commit {
    /// The first line of the message.
    pub fn title(&self) -> &str {
        self.message.lines().next().unwrap_or_default()
    }

    /// The `Commit` entity (`API::Entities::Commit`).
    pub fn json(&self, project_web_url: &str) -> Value {
        let email = format!("{}@example.com", self.author_name);
        let at = timestamp(self.created_at);
        json!({
            "id": self.id,
            "short_id": &self.id[..11],
            "created_at": at,
            "parent_ids": self.parent_ids,
            "title": self.title(),
            "message": self.message,
            "author_name": self.author_name,
            "author_email": email,
            "authored_date": at,
            "committer_name": self.author_name,
            "committer_email": email,
            "committed_date": at,
            "trailers": {},
            "extended_trailers": {},
            "web_url": format!("{project_web_url}/-/commit/{}", self.id),
        })
    }
}

/// One validated commit action (`move` keeps the old content unless new is given).
#[derive(Clone, Debug)]
pub enum Change {
    Create {
        path: String,
        content: String,
    },
    Update {
        path: String,
        content: String,
    },
    Delete {
        path: String,
    },
    Move {
        from: String,
        to: String,
        content: Option<String>,
    },
    /// Accepted for fidelity; file modes are not modelled.
    Chmod {
        path: String,
    },
}

/// The messages GitLab's `Files::MultiService` answers with.
const FILE_EXISTS: &str = "A file with this name already exists";
const FILE_MISSING: &str = "A file with this name doesn't exist";

/// Applies actions in order to a copy of `tree`, or answers GitLab's 400 message.
pub fn apply(tree: &Tree, changes: &[Change]) -> Result<Tree, String> {
    let mut tree = tree.clone();
    for change in changes {
        match change {
            Change::Create { path, content } => {
                if tree.insert(path.clone(), content.clone()).is_some() {
                    return Err(FILE_EXISTS.to_owned());
                }
            }
            Change::Update { path, content } => match tree.get_mut(path) {
                Some(existing) => existing.clone_from(content),
                None => return Err(FILE_MISSING.to_owned()),
            },
            Change::Delete { path } => {
                tree.remove(path).ok_or(FILE_MISSING)?;
            }
            Change::Move { from, to, content } => {
                let previous = tree.remove(from).ok_or(FILE_MISSING)?;
                let moved = content.clone().unwrap_or(previous);
                if tree.insert(to.clone(), moved).is_some() {
                    return Err(FILE_EXISTS.to_owned());
                }
            }
            Change::Chmod { path } => {
                tree.get(path).ok_or(FILE_MISSING)?;
            }
        }
    }
    Ok(tree)
}

/// path → new content (`None`: deleted) for every path that differs from `base` to `head`.
pub fn diff<'a>(base: &'a Tree, head: &'a Tree) -> BTreeMap<&'a str, Option<&'a str>> {
    let mut changes = BTreeMap::new();
    for (path, content) in head {
        if base.get(path) != Some(content) {
            changes.insert(path.as_str(), Some(content.as_str()));
        }
    }
    for path in base.keys() {
        if !head.contains_key(path) {
            changes.insert(path.as_str(), None);
        }
    }
    changes
}

/// How many files differ from `base` to `head` (the MR's `changes_count`).
pub fn diff_len(base: &Tree, head: &Tree) -> usize {
    diff(base, head).len()
}

/// Replays the changes `base → source` onto `target`, as a rebase does. `None` when both
/// sides changed the same file differently: a conflict git cannot resolve on its own.
pub fn replay(base: &Tree, source: &Tree, target: &Tree) -> Option<Tree> {
    let theirs = diff(base, target);
    let mut result = target.clone();
    for (path, content) in diff(base, source) {
        if theirs.get(path).is_some_and(|other| *other != content) {
            return None;
        }
        match content {
            Some(content) => result.insert(path.to_owned(), content.to_owned()),
            None => result.remove(path),
        };
    }
    Some(result)
}

/// Line additions and deletions from `old` to `new`, counted as a multiset difference
/// (close enough to git's numstat for the `stats` field).
pub fn line_stats(old: &Tree, new: &Tree) -> (usize, usize) {
    let mut additions = 0;
    let mut deletions = 0;
    for (path, content) in diff(old, new) {
        let mut before: HashMap<&str, usize> = HashMap::new();
        for line in old
            .get(path)
            .map(String::as_str)
            .unwrap_or_default()
            .lines()
        {
            *before.entry(line).or_default() += 1;
        }
        for line in content.unwrap_or_default().lines() {
            match before.get_mut(line) {
                Some(count) if *count > 0 => *count -= 1,
                _ => additions += 1,
            }
        }
        deletions += before.values().sum::<usize>();
    }
    (additions, deletions)
}

/// The file that `before → after` renamed to `path` unchanged, as git's exact rename
/// detection pairs them: a file of `before` that `after` no longer has, with the content
/// `after` has at `path`; among several, one with the same base name first, then the first
/// by path.
fn renamed_from<'a>(before: &'a Tree, after: &Tree, path: &str) -> Option<&'a str> {
    let content = after.get(path)?;
    let base_name = |path: &str| path.rsplit('/').next().unwrap_or_default().to_owned();
    let wanted = base_name(path);
    let mut sources: Vec<&str> = before
        .iter()
        .filter(|(source, old)| *old == content && !after.contains_key(*source))
        .map(|(source, _)| source.as_str())
        .collect();
    sources.sort_by_key(|source| base_name(source) != wanted);
    sources.first().copied()
}

/// Whether git would accept `name` as a branch name (`git check-ref-format --branch`).
pub fn valid_branch_name(name: &str) -> bool {
    let bad_char = |c: char| c.is_ascii_control() || " ~^:?*[\\".contains(c);
    !name.is_empty()
        && name != "@"
        && !name.starts_with('-')
        && !name.ends_with('/')
        && !name.ends_with('.')
        && !name.ends_with(".lock")
        && !name.contains("..")
        && !name.contains("@{")
        && !name.chars().any(bad_char)
        && name
            .split('/')
            .all(|part| !part.is_empty() && !part.starts_with('.'))
}

/// A project's repository: every commit ever made, and the branch heads.
#[derive(Debug, Default)]
pub struct Repo {
    commits: HashMap<String, Commit>,
    branches: BTreeMap<String, String>,
}

impl Repo {
    /// Records a new commit with a fresh id and returns the id; no branch moves.
    pub fn commit_tree(
        &mut self,
        ids: &mut Ids,
        parent_ids: Vec<String>,
        message: &str,
        author_name: &str,
        tree: Tree,
    ) -> String {
        let id = ids.sha((&parent_ids, message, &tree));
        let commit = Commit {
            id: id.clone(),
            parent_ids,
            message: message.to_owned(),
            author_name: author_name.to_owned(),
            created_at: Utc::now(),
            tree,
        };
        self.commits.insert(id.clone(), commit);
        id
    }

    /// A commit by full id.
    pub fn commit(&self, sha: &str) -> Option<&Commit> {
        self.commits.get(sha)
    }

    /// The head commit of a branch.
    pub fn head(&self, branch: &str) -> Option<&Commit> {
        self.branches.get(branch).and_then(|sha| self.commit(sha))
    }

    /// A branch name, else a commit id, full or abbreviated to a unique prefix of at
    /// least 7 digits, as git resolves a revision (no tags are modelled).
    pub fn resolve(&self, reference: &str) -> Option<&Commit> {
        if let Some(commit) = self.head(reference).or_else(|| self.commit(reference)) {
            return Some(commit);
        }
        if reference.len() < 7 || !reference.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        let mut matches = self
            .commits
            .values()
            .filter(|c| c.id.starts_with(reference));
        match (matches.next(), matches.next()) {
            (Some(commit), None) => Some(commit),
            _ => None,
        }
    }

    /// Branch names and head ids, sorted by name.
    pub fn branches(&self) -> impl Iterator<Item = (&str, &str)> {
        self.branches
            .iter()
            .map(|(name, sha)| (name.as_str(), sha.as_str()))
    }

    /// Creates or moves a branch.
    pub fn set_branch(&mut self, name: &str, sha: &str) {
        self.branches.insert(name.to_owned(), sha.to_owned());
    }

    /// Deletes a branch; false when it did not exist.
    pub fn delete_branch(&mut self, name: &str) -> bool {
        self.branches.remove(name).is_some()
    }

    /// Whether a new branch `name` clashes with the `a/b` vs `a` ref hierarchy.
    pub fn hierarchy_conflict(&self, name: &str) -> bool {
        self.branches.keys().any(|existing| {
            existing.starts_with(&format!("{name}/")) || name.starts_with(&format!("{existing}/"))
        })
    }

    /// `sha` and all its ancestors.
    fn ancestors(&self, sha: &str) -> HashSet<&str> {
        let mut seen = HashSet::new();
        let mut queue = VecDeque::from([sha]);
        while let Some(current) = queue.pop_front() {
            if let Some(commit) = self.commits.get(current)
                && seen.insert(commit.id.as_str())
            {
                queue.extend(commit.parent_ids.iter().map(String::as_str));
            }
        }
        seen
    }

    /// Whether `ancestor` is reachable from `descendant` (or is it).
    pub fn is_ancestor(&self, ancestor: &str, descendant: &str) -> bool {
        self.ancestors(descendant).contains(ancestor)
    }

    /// The tree of merging `source` into `target` (git's three-way merge, file by
    /// file): the source's tree when it already contains the target, `None` on a
    /// conflict, an unknown commit or two commits without common history (git refuses
    /// unrelated histories). GitLab merges through Gitaly's `UserMergeBranch`, git's own
    /// merge from the merge base (`app/models/repository.rb#merge`,
    /// `lib/gitlab/git/repository.rb#merge`).
    pub fn merged_tree(&self, target: &str, source: &str) -> Option<Tree> {
        let source_commit = self.commit(source)?;
        let target_commit = self.commit(target)?;
        if self.is_ancestor(target, source) {
            return Some(source_commit.tree.clone());
        }
        let base = self.base_tree(target, source)?;
        replay(&base, &source_commit.tree, &target_commit.tree)
    }

    /// The tree a three-way merge of `a` and `b` starts from: their merge base's, or with
    /// several best merge bases (a criss-cross history) the merge of those bases, as git's
    /// recursive and ort strategies build a virtual base. Bases beyond two are merged one
    /// after the other onto the first, each from its merge base with the first; a conflict
    /// between bases, which git would write into the virtual base as conflict markers,
    /// is reported as a conflict of the whole merge.
    pub fn base_tree(&self, a: &str, b: &str) -> Option<Tree> {
        let bases = self.merge_bases(a, b);
        let (first, others) = bases.split_first()?;
        let mut tree = first.tree.clone();
        for other in others {
            let base = self.base_tree(&first.id, &other.id)?;
            tree = replay(&base, &other.tree, &tree)?;
        }
        Some(tree)
    }

    /// The best common ancestors of two commits, as `git merge-base --all` lists them:
    /// the common ancestors that are no ancestor of another common ancestor. With merge
    /// commits in the history (two parents) the common ancestor nearest in hops may be
    /// an older one: after `main` merged branch `a` (merge commit M, parents: main's old
    /// head and `a`'s head), a branch stacked on `a`'s head has `a`'s head as its merge
    /// base with M, not main's old head, although both are one hop from M. Sorted by id,
    /// so a criss-cross history gives the same answer every time.
    pub fn merge_bases(&self, a: &str, b: &str) -> Vec<&Commit> {
        let of_b = self.ancestors(b);
        let common: Vec<&str> = self
            .ancestors(a)
            .into_iter()
            .filter(|sha| of_b.contains(sha))
            .collect();
        // Every proper ancestor of a common ancestor is common too, and not a best one.
        let parents = |sha: &str| {
            self.commits
                .get(sha)
                .map(|commit| commit.parent_ids.iter().map(String::as_str))
                .into_iter()
                .flatten()
        };
        let mut dominated = HashSet::new();
        let mut queue: VecDeque<&str> = common.iter().flat_map(|sha| parents(sha)).collect();
        while let Some(current) = queue.pop_front() {
            if dominated.insert(current) {
                queue.extend(parents(current));
            }
        }
        let mut best: Vec<&Commit> = common
            .into_iter()
            .filter(|sha| !dominated.contains(sha))
            .filter_map(|sha| self.commits.get(sha))
            .collect();
        best.sort_by(|x, y| x.id.cmp(&y.id));
        best
    }

    /// The last commit, from `sha` back, that changed `path` (`git log -1 -- path`, which
    /// GitLab's Files API answers as `last_commit_id`): history is followed through a
    /// parent with the same content at `path` (git's default history simplification), and
    /// the first commit whose every parent differs there is the one.
    pub fn last_commit_for_path(&self, sha: &str, path: &str) -> Option<&Commit> {
        let mut commit = self.commit(sha)?;
        let content = commit.tree.get(path)?;
        loop {
            let same = commit
                .parent_ids
                .iter()
                .filter_map(|parent| self.commit(parent))
                .find(|parent| parent.tree.get(path) == Some(content));
            match same {
                Some(parent) => commit = parent,
                None => return Some(commit),
            }
        }
    }

    /// The commits `git log` lists, newest first, as Gitaly's `FindCommits` runs it for
    /// GitLab's commit list (`Repository#commits`, app/models/repository.rb): from `from`,
    /// leaving out `hidden` and its ancestors (the left side of a range `hidden..from`).
    ///
    /// The order is git's default: a walk by committer date, newest first, commits of the
    /// same date in the order the walk met them. `first_parent` follows only first
    /// parents (`--first-parent`).
    ///
    /// With `path`, GitLab asks for `--follow` (`follow:` is true for a single path while
    /// the `remove_file_commit_history_following` flag is off, its default), and git then
    /// prunes nothing: it walks every ancestor and shows a commit whose diff touches the
    /// path: the file, or anything under the directory. A merge shows no diff (no `-m`)
    /// and so never appears, except with `first_parent`, where a merge is compared with
    /// its first parent as any commit is. When a shown commit adds the followed file
    /// while deleting a file of the same content, git's rename detection finds the
    /// rename and follows the old name from there on, for the rest of the walk
    /// (`try_to_follow_renames` in git's tree-diff.c). Only such exact renames are
    /// followed: git would also follow a rename with edits, by its similarity estimate.
    pub fn log(
        &self,
        from: &str,
        hidden: Option<&str>,
        path: Option<&str>,
        first_parent: bool,
    ) -> Vec<&Commit> {
        let hidden = hidden.map(|sha| self.ancestors(sha)).unwrap_or_default();
        let mut followed = path.map(str::to_owned);
        let mut queue = BinaryHeap::new();
        let mut queued = HashSet::new();
        let mut order = 0_u64;
        let mut enqueue = |queue: &mut BinaryHeap<_>, commit: &Commit| {
            if queued.insert(commit.id.clone()) {
                order += 1;
                queue.push((commit.created_at, Reverse(order), commit.id.clone()));
            }
        };
        if let Some(commit) = self.commit(from) {
            enqueue(&mut queue, commit);
        }
        let mut shown = Vec::new();
        while let Some((_, _, id)) = queue.pop() {
            let Some(commit) = self.commits.get(&id) else {
                continue;
            };
            // Every ancestor of a hidden commit is hidden too: nothing to walk on to.
            if hidden.contains(id.as_str()) {
                continue;
            }
            let parents = if first_parent {
                &commit.parent_ids[..commit.parent_ids.len().min(1)]
            } else {
                &commit.parent_ids[..]
            };
            for parent in parents.iter().filter_map(|id| self.commit(id)) {
                enqueue(&mut queue, parent);
            }
            let Some(path) = followed.as_mut() else {
                shown.push(commit);
                continue;
            };
            if parents.len() > 1 {
                continue;
            }
            let empty = Tree::new();
            let before = parents
                .first()
                .and_then(|id| self.commit(id))
                .map_or(&empty, |parent| &parent.tree);
            let changes = diff(before, &commit.tree);
            let under = |changed: &&str| {
                *changed == path.as_str()
                    || changed
                        .strip_prefix(path.as_str())
                        .is_some_and(|rest| rest.starts_with('/'))
            };
            if !changes.keys().any(under) {
                continue;
            }
            shown.push(commit);
            if !before.contains_key(path.as_str())
                && let Some(source) = renamed_from(before, &commit.tree, path)
            {
                *path = source.to_owned();
            }
        }
        shown
    }

    /// One best common ancestor of two commits (`git merge-base`; GitLab's
    /// `Repository#merge_base`, which `diff_refs.base_sha` and rebases start from).
    pub fn merge_base(&self, a: &str, b: &str) -> Option<&Commit> {
        self.merge_bases(a, b).into_iter().next()
    }
}
