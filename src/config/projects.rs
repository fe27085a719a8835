//! The GitLab projects the target catalog spans, and how a project named by a
//! caller (the deploy pipeline) is matched against them.
//!
//! A project is named by its numeric id or by its full path (`group/repo`).
//! Without asking GitLab, changegate can only tell that two names mean one
//! project when they are in the same form: an id matches an id, a path a path
//! (case-insensitively, as GitLab resolves paths). A caller must therefore
//! name a project the way the configuration does.

use std::collections::BTreeMap;
use std::fmt;

use super::Settings;

/// A project name in the form changegate compares: trimmed, paths lowercased.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ProjectKey(String);

impl ProjectKey {
    /// The key of a configured or given project name.
    pub fn new(name: &str) -> Self {
        Self(name.trim().to_ascii_lowercase())
    }

    /// The key as stored with deploy reports.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    fn form(&self) -> Option<NameForm> {
        if self.0.is_empty() {
            None
        } else if self.0.bytes().all(|byte| byte.is_ascii_digit()) {
            Some(NameForm::Id)
        } else {
            Some(NameForm::Path)
        }
    }
}

impl fmt::Display for ProjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// How a project is named.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum NameForm {
    Id,
    Path,
}

impl NameForm {
    fn describe(self) -> &'static str {
        match self {
            Self::Id => "numeric id",
            Self::Path => "path (group/repo)",
        }
    }
}

/// Which bindings belong to one project, by their target key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TargetFilter {
    /// Exactly these targets.
    In(Vec<String>),
    /// Every target but these: the default project also owns bindings whose
    /// target has left the catalog, as [`Settings::project_for`] says.
    NotIn(Vec<String>),
}

/// The projects the target catalog spans, each with its targets.
#[derive(Debug, Clone)]
pub struct Projects {
    targets: BTreeMap<ProjectKey, Vec<String>>,
    default: ProjectKey,
}

/// What a deploy callback's `project` names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NamedProject {
    /// A project of the catalog.
    Known(ProjectKey),
    /// A project no target uses (in the form the configuration names
    /// projects by, so it cannot be one of them under another name).
    Unknown(ProjectKey),
}

impl NamedProject {
    /// The project's key, known or not.
    pub fn key(&self) -> &ProjectKey {
        match self {
            Self::Known(key) | Self::Unknown(key) => key,
        }
    }
}

/// Why a deploy callback's project cannot be used; each says what to send.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProjectError {
    /// None given, but the targets span several projects.
    #[error(
        "field `project`: required, the targets span several GitLab projects ({0}); name the deployed MR's project as the configuration does"
    )]
    Required(String),
    /// Given empty.
    #[error("field `project`: must be a GitLab project id or path, not empty")]
    Empty,
    /// In a form no configured project can be matched in.
    #[error(
        "field `project`: {given} matches no configured project, and changegate cannot match a {given_form} against projects configured by {configured_form} ({configured}); send the project as the configuration names it"
    )]
    Unmatchable {
        /// What was given.
        given: ProjectKey,
        /// Its form.
        given_form: &'static str,
        /// The other form, which the unmatched configured projects use.
        configured_form: &'static str,
        /// Those projects.
        configured: String,
    },
}

impl Projects {
    /// The projects of `settings`' target catalog; `gitlab.project` alone
    /// when the catalog is empty.
    pub fn of(settings: &Settings) -> Self {
        let default = ProjectKey::new(&settings.gitlab.project);
        let mut targets: BTreeMap<ProjectKey, Vec<String>> = BTreeMap::new();
        for key in settings.targets.keys() {
            targets
                .entry(ProjectKey::new(settings.project_for(key)))
                .or_default()
                .push(key.clone());
        }
        if targets.is_empty() {
            targets.insert(default.clone(), Vec::new());
        }
        Self { targets, default }
    }

    /// Every project, in key order.
    pub fn keys(&self) -> impl Iterator<Item = &ProjectKey> {
        self.targets.keys()
    }

    /// The project deploy reports without one (stored before callbacks named
    /// projects) belong to: `gitlab.project`.
    pub fn default_key(&self) -> &ProjectKey {
        &self.default
    }

    /// The project keys a deploy report for `project` may be stored under:
    /// its own, and for the default project also the empty key of reports
    /// from before callbacks named projects.
    pub fn report_keys<'a>(&self, project: &'a ProjectKey) -> Vec<&'a str> {
        if *project == self.default && !project.as_str().is_empty() {
            vec![project.as_str(), ""]
        } else {
            vec![project.as_str()]
        }
    }

    /// The bindings of `project`, by target.
    pub fn target_filter(&self, project: &ProjectKey) -> TargetFilter {
        if *project == self.default {
            let others = self
                .targets
                .iter()
                .filter(|(key, _)| *key != project)
                .flat_map(|(_, targets)| targets.iter().cloned())
                .collect();
            TargetFilter::NotIn(others)
        } else {
            TargetFilter::In(self.targets.get(project).cloned().unwrap_or_default())
        }
    }

    /// Matches a callback's `project`: without one, the only project (an
    /// error when there are several); with one, the configured project it
    /// names, or [`NamedProject::Unknown`] when it can be told apart from
    /// every configured project.
    pub fn resolve(&self, given: Option<&str>) -> Result<NamedProject, ProjectError> {
        let Some(given) = given else {
            return match self.targets.keys().collect::<Vec<_>>().as_slice() {
                [only] => Ok(NamedProject::Known((*only).clone())),
                several => Err(ProjectError::Required(join(several.iter().copied()))),
            };
        };
        let given = ProjectKey::new(given);
        let Some(form) = given.form() else {
            return Err(ProjectError::Empty);
        };
        if self.targets.contains_key(&given) {
            return Ok(NamedProject::Known(given));
        }
        let other_form: Vec<&ProjectKey> = self
            .targets
            .keys()
            .filter(|key| key.form().is_some_and(|configured| configured != form))
            .collect();
        if other_form.is_empty() {
            return Ok(NamedProject::Unknown(given));
        }
        let configured_form = match form {
            NameForm::Id => NameForm::Path,
            NameForm::Path => NameForm::Id,
        };
        Err(ProjectError::Unmatchable {
            given,
            given_form: form.describe(),
            configured_form: configured_form.describe(),
            configured: join(other_form.into_iter()),
        })
    }
}

fn join<'a>(keys: impl Iterator<Item = &'a ProjectKey>) -> String {
    keys.map(ProjectKey::as_str).collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
#[path = "projects_tests.rs"]
mod tests;
