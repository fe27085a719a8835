//! A simulator of the deploy pipeline: it watches the GitLab simulator for newly merged
//! merge requests and reports each deployment to changegate's `/callbacks/deploy` as a
//! Standard Webhooks signed callback
//! `{callbackId, project?, mrIid, status, sha, operationIds?}`, where `project` names the
//! merge request's project as a GitLab CI job knows it (`CI_PROJECT_PATH` by default, or
//! `CI_PROJECT_ID`), and the operation ids come from the `Changegate-Operation: <uuid>` lines
//! of the merge request's description.
//!
//! Queued [`DeployFault`]s reproduce the pipeline's failure modes: lost, duplicate, reordered
//! and late callbacks, and failed deployments. What was noticed and what was sent (with
//! changegate's answer) is kept for inspection. The pipeline has no API of its own, so its
//! HTTP server (on the configured address, `127.0.0.1:0` by default) serves only the control
//! API under `/_sim`.
//!
//! ```no_run
//! # async fn demo(gitlab: &changegate_sim::gitlab::GitLabSimHandle) -> std::io::Result<()> {
//! use changegate_sim::deploy::{DeployFault, DeployFaultKind, DeploySim};
//! let deploy = DeploySim::start(gitlab.observer(), Default::default()).await?;
//! deploy.set_callback_url("http://127.0.0.1:8080/callbacks/deploy");
//! deploy.inject(DeployFault::new(DeployFaultKind::Lose).times(2));
//! # Ok(()) }
//! ```

mod control;
mod control_http;
mod faults;
mod watcher;

use std::net::{Ipv4Addr, SocketAddr};
use std::ops::Deref;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use uuid::Uuid;

pub use faults::{DeployFault, DeployFaultKind};

use crate::callback::{DeliverySettings, Sender, generate_secret};
use crate::chance::FaultQueue;
use crate::gitlab::{GitLabObserver, ProjectId};
use crate::tls::{Listener, ServerTls};
use watcher::Watcher;

/// Start-up options.
#[derive(Clone, Debug)]
pub struct DeploySimOptions {
    /// Where the control API listens; port 0 picks a free port.
    pub bind: SocketAddr,
    /// Where callbacks go; usually unknown until changegate runs, hence also settable later.
    pub callback_url: Option<String>,
    /// The `whsec_<base64>` key callbacks are signed with (changegate's deploy callback
    /// secret); a random one by default.
    pub secret: String,
    /// How often the GitLab simulator is checked for new merges.
    pub poll_interval: Duration,
    /// Whether callbacks carry `operationIds` (older pipelines send only the iid and sha).
    pub send_operation_ids: bool,
    /// How callbacks name the merge request's project.
    pub project_field: ProjectField,
    /// Timeouts and retries of callbacks.
    pub delivery: DeliverySettings,
    /// Seed of the draws that decide whether a fault with a probability strikes; the same
    /// seed and the same merges strike the same merges in every run.
    pub fault_seed: u64,
    /// With an identity, the control API's port serves HTTPS only and `base_url` starts
    /// with `https://`.
    pub tls: Option<ServerTls>,
    /// PEM certificates trusted, besides the platform's roots, when callbacks go to an
    /// `https://` URL: the CA of a test receiver or of an ingress in front of changegate.
    pub callback_ca_pem: Option<String>,
}

impl Default for DeploySimOptions {
    fn default() -> Self {
        Self {
            bind: SocketAddr::from((Ipv4Addr::LOCALHOST, 0)),
            callback_url: None,
            secret: generate_secret(),
            poll_interval: Duration::from_millis(50),
            send_operation_ids: true,
            project_field: ProjectField::Path,
            delivery: DeliverySettings::default(),
            fault_seed: 0,
            tls: None,
            callback_ca_pem: None,
        }
    }
}

/// How a callback names the merge request's project, as the deploy job reads it from GitLab
/// CI's predefined variables.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProjectField {
    /// `"project": "group/repo"`, from `CI_PROJECT_PATH`.
    #[default]
    Path,
    /// `"project": 42`, from `CI_PROJECT_ID`.
    Id,
    /// No `project`, as pipelines built for a single project send.
    Omitted,
}

/// A merge the simulator noticed, and the fault its callback got.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct NoticedMerge {
    /// The merge request's project.
    pub project: ProjectId,
    /// The merge request's number.
    pub iid: u64,
    /// The commit the merge put on the target branch (what is deployed).
    pub sha: String,
    /// Parsed from the description, whether sent or not.
    pub operation_ids: Vec<Uuid>,
    /// The fault applied to its callback.
    pub fault: Option<DeployFaultKind>,
}

/// Entry point of the simulator.
pub struct DeploySim;

impl DeploySim {
    /// Binds `options.bind` for the control API and starts watching `gitlab` for merges from
    /// now on; merge requests merged before the start are never reported. Runs until the
    /// handle is dropped, or until the GitLab simulator's state is gone. Fails on a secret
    /// that is not `whsec_<base64>` or on TLS material that cannot be used.
    pub async fn start(
        gitlab: GitLabObserver,
        options: DeploySimOptions,
    ) -> std::io::Result<DeploySimHandle> {
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                callback_url: options.callback_url,
                send_operation_ids: options.send_operation_ids,
                project_field: options.project_field,
                faults: FaultQueue::new(options.fault_seed),
                merges: Vec::new(),
            }),
            sender: Sender::new(
                options.secret,
                options.delivery,
                options.callback_ca_pem.as_deref(),
            )?,
        });
        let listener = Listener::bind(options.bind, options.tls.as_ref()).await?;
        let base_url = listener.base_url().to_owned();
        let (shutdown, released) = watch::channel(());
        let watcher = Watcher::new(Arc::clone(&shared), gitlab, released.clone());
        spawn_until_released(released, watcher.run(options.poll_interval));
        let control = DeployControl { shared };
        let app = axum::Router::new().nest("/_sim", control_http::router(control.clone()));
        let server = listener.serve(app, "deploy");
        Ok(DeploySimHandle {
            base_url,
            control,
            _shutdown: shutdown,
            server,
        })
    }
}

/// A running simulator; dropping it stops the watcher, any delayed callback and the control
/// server. The control methods are those of [`DeployControl`], reached through `Deref`.
pub struct DeploySimHandle {
    base_url: String,
    control: DeployControl,
    /// Never sent on; dropping it stops every task of this simulator.
    _shutdown: watch::Sender<()>,
    server: JoinHandle<()>,
}

impl DeploySimHandle {
    /// The server root, e.g. `http://127.0.0.1:41234` (`https://` with TLS); the control
    /// API's is `{base_url}/_sim`.
    pub fn base_url(&self) -> &str {
        &self.base_url
    }
}

impl Deref for DeploySimHandle {
    type Target = DeployControl;

    fn deref(&self) -> &DeployControl {
        &self.control
    }
}

impl Drop for DeploySimHandle {
    fn drop(&mut self) {
        self.server.abort();
    }
}

/// The control API: steers the simulator (callback URL, operation ids, faults) and inspects
/// what it noticed and sent. The handle dereferences to it and the `/_sim` routes hold a
/// clone, so the HTTP API and the Rust methods are the same code.
#[derive(Clone, Debug)]
pub struct DeployControl {
    shared: Arc<Shared>,
}

/// Settings and records, behind a mutex never held across an await.
#[derive(Debug)]
struct State {
    callback_url: Option<String>,
    send_operation_ids: bool,
    project_field: ProjectField,
    faults: FaultQueue<DeployFault>,
    merges: Vec<NoticedMerge>,
}

/// What the control API and the background tasks share.
#[derive(Debug)]
struct Shared {
    state: Mutex<State>,
    sender: Sender,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().expect("deploy simulator state poisoned")
    }

    /// Takes one strike of the first queued fault that strikes.
    fn take_fault(&self) -> Option<DeployFaultKind> {
        self.lock().faults.take(|_| true).map(|fault| fault.kind)
    }

    /// Sends callbacks one after another, in the given order.
    async fn send_all(&self, callbacks: Vec<(Uuid, Value)>) {
        for (callback_id, body) in callbacks {
            let url = self.lock().callback_url.clone();
            self.sender
                .send(url.as_deref(), callback_id, &body, false)
                .await;
        }
    }
}

/// Runs `task` in the background until it ends or the simulator's handle is dropped.
fn spawn_until_released(
    mut released: watch::Receiver<()>,
    task: impl Future<Output = ()> + Send + 'static,
) {
    tokio::spawn(async move {
        tokio::select! {
            () = task => {}
            _ = released.changed() => {}
        }
    });
}
