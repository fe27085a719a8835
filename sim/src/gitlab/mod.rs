//! A stateful, in-process simulator of the GitLab REST v4 subset changegate uses.
//!
//! `GitLabSim::start` binds the configured address (`127.0.0.1:0` by default) and serves
//! `{base_url}/api/v4`. Tests and the demo drive it over HTTP like a real GitLab, and steer
//! it through the control API: the Rust methods of [`GitLabControl`], which the handle
//! dereferences to (users and tokens, projects, settings, faults, pipeline outcomes,
//! inspection), or the same operations as JSON under `{base_url}/_sim`. Other simulators
//! that react to merges read it through a [`GitLabObserver`]. The behaviour follows
//! `shared/GITLAB.md`: GitLab's status codes, error bodies and quirks (401 on a repeated
//! approval, 409 with an array message, the merge gate order, asynchronous mergeability and
//! rebase).
//!
//! ```no_run
//! # async fn demo() -> std::io::Result<()> {
//! use changegate_sim::gitlab::{AccessLevel, Endpoint, Fault, FaultKind, GitLabSim};
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
mod control_http;
mod error;
mod faults;
mod intercept;
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
mod test_reports;
mod tree;
mod web;

use std::net::{Ipv4Addr, SocketAddr};
use std::ops::Deref;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;

pub use control::{MergeRequestSnapshot, SimError};
pub use faults::{Endpoint, Fault, FaultKind, RecordedRequest};
pub use observe::{GitLabObserver, MergeRecord, MergedMergeRequest};
pub use pipelines::{PipelineOutcome, PipelineStatus};
pub use state::{
    AccessLevel, ChecklistItem, MergeMethod, MrState, ProjectId, ProjectSettings, Tier, UserId,
};

use crate::tls::{Listener, ServerTls};
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
    /// Where to listen; port 0 picks a free port, which tests want so they run in parallel.
    pub bind: SocketAddr,
    /// GET polls of a merge request that report `unchecked`/`checking` after it is created,
    /// pushed to or rebased, before the real mergeability shows.
    pub mergeability_polls: u32,
    /// GET polls of a merge request during which `rebase_in_progress` stays true.
    pub rebase_polls: u32,
    /// Pipeline steps taken per GET of the merge request or the pipeline; 0 leaves pipelines
    /// to the control API (`advance_pipeline`, `force_pipeline`).
    pub pipeline_steps_per_poll: u32,
    /// How long a pipeline runs before it may finish, however often it is polled; with
    /// `pipeline_duration_max`, the shortest run.
    pub pipeline_duration: Duration,
    /// Above `pipeline_duration`, each pipeline runs for its own duration, drawn uniformly
    /// from `pipeline_duration..=pipeline_duration_max` when it is created (pipelines of
    /// a benchmark that do not all take as long), by a generator seeded with
    /// `pipeline_seed`. `None`: every pipeline takes `pipeline_duration`.
    pub pipeline_duration_max: Option<Duration>,
    /// Seed of the pipeline durations. A draw depends on the seed, the project, the merge
    /// request and how many pipelines it had before, not on the order pipelines are created
    /// in: two runs whose merge requests start in another order, as two versions of a merge
    /// queue would, still give each merge request's pipelines the same durations.
    pub pipeline_seed: u64,
    /// The status of the merge endpoint's git-level refusal.
    pub cannot_merge_status: CannotMergeStatus,
    /// How long a lost response is held back before it is finally written (the client has
    /// long given up by then). Dropping the handle releases held responses at once.
    pub lost_response_hold: Duration,
    /// Seed of the draws that decide whether a fault with a probability strikes; the same
    /// seed and the same calls strike the same calls in every run.
    pub fault_seed: u64,
    /// With an identity, the port serves HTTPS only and `base_url` starts with `https://`.
    pub tls: Option<ServerTls>,
}

impl Default for GitLabSimOptions {
    fn default() -> Self {
        Self {
            bind: SocketAddr::from((Ipv4Addr::LOCALHOST, 0)),
            mergeability_polls: 1,
            rebase_polls: 1,
            pipeline_steps_per_poll: 1,
            pipeline_duration: Duration::ZERO,
            pipeline_duration_max: None,
            pipeline_seed: 0,
            cannot_merge_status: CannotMergeStatus::default(),
            lost_response_hold: Duration::from_secs(120),
            fault_seed: 0,
            tls: None,
        }
    }
}

/// Entry point of the simulator.
pub struct GitLabSim;

impl GitLabSim {
    /// Binds `options.bind` and serves the simulated GitLab until the handle is dropped;
    /// fails on a TLS identity that cannot be used.
    pub async fn start(options: GitLabSimOptions) -> std::io::Result<GitLabSimHandle> {
        let listener = Listener::bind(options.bind, options.tls.as_ref()).await?;
        let base_url = listener.base_url().to_owned();
        let state = Arc::new(Mutex::new(SimState::new(options, base_url.clone())));
        let (shutdown, released) = watch::channel(());
        let control = GitLabControl { state };
        let app = router::build(
            SimContext {
                state: Arc::clone(&control.state),
                released,
                listings: Arc::default(),
            },
            control.clone(),
        );
        let server = listener.serve(app, "gitlab");
        Ok(GitLabSimHandle {
            base_url,
            control,
            _shutdown: shutdown,
            server,
        })
    }
}

/// A running simulator. Dropping it stops the server and releases held responses. The
/// control methods are those of [`GitLabControl`], reached through `Deref`.
pub struct GitLabSimHandle {
    base_url: String,
    control: GitLabControl,
    /// Never sent on; dropping it wakes every response held by a lost-response fault.
    _shutdown: watch::Sender<()>,
    server: JoinHandle<()>,
}

impl GitLabSimHandle {
    /// The server root, e.g. `http://127.0.0.1:41234` (`https://` with TLS); the REST root
    /// is `{base_url}/api/v4` and the control API's is `{base_url}/_sim`.
    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    /// The REST root, `{base_url}/api/v4`.
    pub fn api_url(&self) -> String {
        format!("{}/api/v4", self.base_url)
    }
}

impl Deref for GitLabSimHandle {
    type Target = GitLabControl;

    fn deref(&self) -> &GitLabControl {
        &self.control
    }
}

impl Drop for GitLabSimHandle {
    fn drop(&mut self) {
        self.server.abort();
    }
}

/// The control API: sets the simulator up, steers it and inspects it, without going through
/// GitLab's REST API. The handle dereferences to it and the `/_sim` routes hold a clone, so
/// the HTTP API and the Rust methods are the same code; a clone keeps the state, not the
/// server, alive.
#[derive(Clone, Debug)]
pub struct GitLabControl {
    state: Arc<Mutex<SimState>>,
}

impl GitLabControl {
    fn lock(&self) -> MutexGuard<'_, SimState> {
        self.state.lock().expect("gitlab simulator state poisoned")
    }
}

/// Router state shared by every handler.
#[derive(Clone)]
struct SimContext {
    state: Arc<Mutex<SimState>>,
    /// Changes (closes) when the handle is dropped; lost responses wait on it.
    released: watch::Receiver<()>,
    /// Tree listings already built, so the pages of one listing share it.
    listings: Arc<Mutex<tree::Listings>>,
}

impl SimContext {
    fn lock(&self) -> MutexGuard<'_, SimState> {
        self.state.lock().expect("gitlab simulator state poisoned")
    }
}
