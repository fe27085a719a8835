//! A stateful, in-process simulator of the GitLab REST v4 subset changegate uses.
//!
//! `GitLabSim::start` binds `127.0.0.1:0` and serves `{base_url}/api/v4`. Tests and the
//! demo drive it over HTTP like a real GitLab, and steer it through the Rust control API on
//! [`GitLabSimHandle`] (users and tokens, projects, settings, faults, pipeline outcomes,
//! inspection); other simulators that react to merges read it through a
//! [`GitLabObserver`]. The behaviour follows `shared/GITLAB.md`: GitLab's status codes, error
//! bodies and quirks (401 on a repeated approval, 409 with an array message, the merge gate
//! order, asynchronous mergeability and rebase). It is never on the production request path.
//!
//! ```no_run
//! # async fn demo() -> std::io::Result<()> {
//! use changegate::sim::gitlab::{AccessLevel, Endpoint, Fault, FaultKind, GitLabSim};
//! let sim = GitLabSim::start(Default::default()).await?;
//! let bot = sim.add_user("change-bot", "bot-token");
//! let project = sim.create_project("config/repo");
//! sim.add_member(project, bot, AccessLevel::Developer).expect("project exists");
//! sim.inject(Fault::new(Endpoint::Approve, FaultKind::Status(503)).times(2));
//! # Ok(()) }
//! ```

mod approvals;
mod auth;
mod branches;
mod checklist;
mod commits;
mod control;
mod error;
mod faults;
mod merge;
mod merge_requests;
mod mergeability;
mod mr_view;
mod observe;
mod params;
mod pipelines;
mod projects;
mod rebase;
mod repo;
mod router;
mod state;

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

pub use control::{MergeRequestSnapshot, SimError};
pub use faults::{Endpoint, Fault, FaultKind};
pub use observe::{GitLabObserver, MergedMergeRequest};
pub use pipelines::{PipelineOutcome, PipelineStatus};
pub use state::{AccessLevel, ChecklistItem, MrState, ProjectId, ProjectSettings, Tier, UserId};

use state::SimState;

/// Which status the merge endpoint uses for "Branch cannot be merged".
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CannotMergeStatus {
    /// 422, as current GitLab answers.
    #[default]
    Unprocessable,
    /// 406, as GitLab up to about 15.x answered.
    NotAcceptable,
}

/// Start-up options; per-project behaviour lives in [`ProjectSettings`].
#[derive(Clone, Debug)]
pub struct GitLabSimOptions {
    /// GET polls of a merge request that report `unchecked`/`checking` after it is created,
    /// pushed to or rebased, before the real mergeability shows.
    pub mergeability_polls: u32,
    /// GET polls of a merge request during which `rebase_in_progress` stays true.
    pub rebase_polls: u32,
    /// Pipeline steps taken per GET of the merge request or the pipeline; 0 leaves pipelines
    /// to the control API (`advance_pipeline`, `force_pipeline`).
    pub pipeline_steps_per_poll: u32,
    /// The status of the merge endpoint's git-level refusal.
    pub cannot_merge_status: CannotMergeStatus,
    /// How long a lost response is held back before it is finally written (the client has
    /// long given up by then). Dropping the handle releases held responses at once.
    pub lost_response_hold: Duration,
}

impl Default for GitLabSimOptions {
    fn default() -> Self {
        Self {
            mergeability_polls: 1,
            rebase_polls: 1,
            pipeline_steps_per_poll: 1,
            cannot_merge_status: CannotMergeStatus::default(),
            lost_response_hold: Duration::from_secs(120),
        }
    }
}

/// Entry point of the simulator.
pub struct GitLabSim;

impl GitLabSim {
    /// Binds `127.0.0.1:0` and serves the simulated GitLab until the handle is dropped.
    pub async fn start(options: GitLabSimOptions) -> std::io::Result<GitLabSimHandle> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let base_url = format!("http://{}", listener.local_addr()?);
        let state = Arc::new(Mutex::new(SimState::new(options, base_url.clone())));
        let (shutdown, released) = watch::channel(());
        let app = router::build(SimContext {
            state: Arc::clone(&state),
            released,
        });
        let server = tokio::spawn(async move {
            if let Err(err) = axum::serve(listener, app).await {
                tracing::error!(%err, "gitlab simulator stopped serving");
            }
        });
        Ok(GitLabSimHandle {
            base_url,
            state,
            _shutdown: shutdown,
            server,
        })
    }
}

/// A running simulator. Dropping it stops the server and releases held responses.
pub struct GitLabSimHandle {
    base_url: String,
    state: Arc<Mutex<SimState>>,
    /// Never sent on; dropping it wakes every response held by a lost-response fault.
    _shutdown: watch::Sender<()>,
    server: JoinHandle<()>,
}

impl GitLabSimHandle {
    /// The server root, e.g. `http://127.0.0.1:41234`; the REST root is `{base_url}/api/v4`.
    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    /// The REST root, `{base_url}/api/v4`.
    pub fn api_url(&self) -> String {
        format!("{}/api/v4", self.base_url)
    }

    fn lock(&self) -> MutexGuard<'_, SimState> {
        self.state.lock().expect("gitlab simulator state poisoned")
    }
}

impl Drop for GitLabSimHandle {
    fn drop(&mut self) {
        self.server.abort();
    }
}

/// Router state shared by every handler.
#[derive(Clone)]
struct SimContext {
    state: Arc<Mutex<SimState>>,
    /// Changes (closes) when the handle is dropped; lost responses wait on it.
    released: watch::Receiver<()>,
}

impl SimContext {
    fn lock(&self) -> MutexGuard<'_, SimState> {
        self.state.lock().expect("gitlab simulator state poisoned")
    }
}
