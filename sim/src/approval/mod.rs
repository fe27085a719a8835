//! A simulator of the external approval system changegate submits requests to.
//!
//! `ApprovalSim::start` binds the configured address (`127.0.0.1:0` by default) and serves
//! `POST /approvals` (idempotent per `operationId`). Decisions come back as Standard
//! Webhooks signed callbacks to the configured URL (changegate's `/callbacks/approval`),
//! either automatically after a delay or when a test calls [`ApprovalControl::decide`] (or
//! `POST /_sim/approvals/{operationId}/decision`). Queued [`ApprovalFault`]s reproduce what
//! the real system does wrong: error statuses, slow and lost answers, duplicate, late and
//! out-of-order callbacks, a callback that beats the `201` (the race of SPEC §2.2), and bad
//! signatures. Everything received and sent is kept for inspection.
//!
//! ```no_run
//! # async fn demo() -> std::io::Result<()> {
//! use changegate_sim::approval::{ApprovalFault, ApprovalFaultKind, ApprovalSim};
//! let sim = ApprovalSim::start(Default::default()).await?;
//! sim.set_callback_url("http://127.0.0.1:8080/callbacks/approval");
//! sim.inject(ApprovalFault::new(ApprovalFaultKind::DuplicateCallback).times(2));
//! let secret_for_changegate: &str = sim.secret();
//! # Ok(()) }
//! ```

mod announce;
mod control;
mod control_http;
mod faults;
mod server;

use std::net::{Ipv4Addr, SocketAddr};
use std::ops::Deref;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::sync::watch;
use tokio::task::JoinHandle;

pub use control::{ApprovalSimError, ApprovalSnapshot, ReceivedRequest};
pub use faults::{ApprovalFault, ApprovalFaultKind};

use crate::callback::{DeliverySettings, Sender, generate_secret};
use crate::tls::{Listener, ServerTls};
use faults::Faults;

/// An approval outcome, spelled as the callback body and the control API carry it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Decision {
    /// `APPROVED`
    Approved,
    /// `REJECTED`
    Rejected,
    /// `WITHDRAWN`: the requester or an approver pulled the request back.
    Withdrawn,
}

/// How new approvals are decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DecisionPolicy {
    /// Decides `result` by itself, `delay` after the request arrived.
    Auto {
        /// The outcome sent.
        result: Decision,
        /// Time between the request and the callback.
        delay: Duration,
    },
    /// Holds every approval until [`ApprovalControl::decide`] is called.
    Manual,
}

impl Default for DecisionPolicy {
    fn default() -> Self {
        Self::Auto {
            result: Decision::Approved,
            delay: Duration::from_millis(50),
        }
    }
}

/// Start-up options; the callback URL and the policy can be changed later through the
/// handle.
#[derive(Clone, Debug)]
pub struct ApprovalSimOptions {
    /// Where to listen; port 0 picks a free port, which tests want so they run in parallel.
    pub bind: SocketAddr,
    /// Where callbacks go; usually unknown until changegate runs, hence also settable later.
    pub callback_url: Option<String>,
    /// The `whsec_<base64>` key callbacks are signed with (changegate's approval callback
    /// secret); a random one by default.
    pub secret: String,
    /// How new approvals are decided.
    pub policy: DecisionPolicy,
    /// When set, `POST /approvals` requires `Authorization: Bearer <token>`.
    pub api_token: Option<String>,
    /// Timeouts and retries of callbacks.
    pub delivery: DeliverySettings,
    /// How long a lost response is held back before it is finally written (the client has
    /// long given up by then). Dropping the handle releases held responses at once.
    pub lost_response_hold: Duration,
    /// Seed of the draws that decide whether a fault with a probability strikes; the same
    /// seed and the same calls strike the same calls in every run.
    pub fault_seed: u64,
    /// With an identity, the port serves HTTPS only and `base_url` starts with `https://`.
    pub tls: Option<ServerTls>,
    /// PEM certificates trusted, besides the platform's roots, when callbacks go to an
    /// `https://` URL: the CA of a test receiver or of an ingress in front of changegate.
    pub callback_ca_pem: Option<String>,
}

impl Default for ApprovalSimOptions {
    fn default() -> Self {
        Self {
            bind: SocketAddr::from((Ipv4Addr::LOCALHOST, 0)),
            callback_url: None,
            secret: generate_secret(),
            policy: DecisionPolicy::default(),
            api_token: None,
            delivery: DeliverySettings::default(),
            lost_response_hold: Duration::from_secs(120),
            fault_seed: 0,
            tls: None,
            callback_ca_pem: None,
        }
    }
}

/// Entry point of the simulator.
pub struct ApprovalSim;

impl ApprovalSim {
    /// Binds `options.bind` and serves the simulated approval system until the handle is
    /// dropped; fails on a secret that is not `whsec_<base64>` or on TLS material that
    /// cannot be used.
    pub async fn start(options: ApprovalSimOptions) -> std::io::Result<ApprovalSimHandle> {
        let sender = Sender::new(
            options.secret,
            options.delivery,
            options.callback_ca_pem.as_deref(),
        )?;
        let listener = Listener::bind(options.bind, options.tls.as_ref()).await?;
        let base_url = listener.base_url().to_owned();
        let (shutdown, released) = watch::channel(());
        let ctx = SimContext(Arc::new(Shared {
            state: Mutex::new(State {
                callback_url: options.callback_url,
                policy: options.policy,
                api_token: options.api_token,
                lost_response_hold: options.lost_response_hold,
                approvals: Vec::new(),
                requests: Vec::new(),
                faults: Faults::new(options.fault_seed),
            }),
            sender,
            released,
        }));
        let control = ApprovalControl { ctx };
        let app = server::router(control.ctx.clone())
            .nest("/_sim", control_http::router(control.clone()));
        let server = listener.serve(app, "approval");
        Ok(ApprovalSimHandle {
            base_url,
            control,
            _shutdown: shutdown,
            server,
        })
    }
}

/// A running simulator. Dropping it stops the server, pending automatic decisions and
/// held responses. The control methods are those of [`ApprovalControl`], reached through
/// `Deref`.
pub struct ApprovalSimHandle {
    base_url: String,
    control: ApprovalControl,
    /// Never sent on; dropping it wakes every task waiting on `released`.
    _shutdown: watch::Sender<()>,
    server: JoinHandle<()>,
}

impl ApprovalSimHandle {
    /// The server root, e.g. `http://127.0.0.1:41234` (`https://` with TLS); requests go to
    /// `{base_url}/approvals` and the control API's root is `{base_url}/_sim`.
    pub fn base_url(&self) -> &str {
        &self.base_url
    }
}

impl Deref for ApprovalSimHandle {
    type Target = ApprovalControl;

    fn deref(&self) -> &ApprovalControl {
        &self.control
    }
}

/// The control API: steers the simulator (callback URL, policy, decisions, faults) and
/// inspects what it received and sent. The handle dereferences to it and the `/_sim`
/// routes hold a clone, so the HTTP API and the Rust methods are the same code.
#[derive(Clone, Debug)]
pub struct ApprovalControl {
    ctx: SimContext,
}

impl Drop for ApprovalSimHandle {
    fn drop(&mut self) {
        self.server.abort();
    }
}

/// Mutable simulator state, behind one mutex that is never held across an await.
#[derive(Debug)]
struct State {
    callback_url: Option<String>,
    policy: DecisionPolicy,
    api_token: Option<String>,
    lost_response_hold: Duration,
    /// In creation order.
    approvals: Vec<ApprovalSnapshot>,
    requests: Vec<ReceivedRequest>,
    faults: Faults,
}

/// What the server, the background tasks and the handle share.
#[derive(Debug)]
struct Shared {
    state: Mutex<State>,
    sender: Sender,
    /// Changes (closes) when the handle is dropped.
    released: watch::Receiver<()>,
}

/// Cheap to clone; the router state and what background tasks hold.
#[derive(Clone, Debug)]
struct SimContext(Arc<Shared>);

impl SimContext {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.0
            .state
            .lock()
            .expect("approval simulator state poisoned")
    }

    /// Runs `task` in the background until it ends or the handle is dropped.
    fn spawn(&self, task: impl Future<Output = ()> + Send + 'static) -> JoinHandle<()> {
        let mut released = self.0.released.clone();
        tokio::spawn(async move {
            tokio::select! {
                () = task => {}
                _ = released.changed() => {}
            }
        })
    }

    /// Waits `delay`, cut short when the handle is dropped.
    async fn hold(&self, delay: Duration) {
        let mut released = self.0.released.clone();
        tokio::select! {
            () = tokio::time::sleep(delay) => {}
            _ = released.changed() => {}
        }
    }
}
