//! What a project's GitLab answered, kept for a while: facts that change
//! rarely (its merge method, how long its pipelines take) are not read on
//! every round.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// Each project's last answer, with when it was read.
pub(super) struct Remembered<T>(Mutex<HashMap<String, (T, Instant)>>);

impl<T> Default for Remembered<T> {
    fn default() -> Self {
        Self(Mutex::default())
    }
}

impl<T: Clone> Remembered<T> {
    /// `project`'s answer, if read less than `ttl` ago.
    pub(super) fn fresh(&self, project: &str, ttl: Duration) -> Option<T> {
        let known = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        known
            .get(project)
            .filter(|(_, at)| at.elapsed() < ttl)
            .map(|(answer, _)| answer.clone())
    }

    /// Keeps `project`'s answer, read now.
    pub(super) fn remember(&self, project: &str, answer: T) {
        let mut known = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        known.insert(project.to_owned(), (answer, Instant::now()));
    }
}
