//! A simulator of the deploy pipeline: it watches the GitLab simulator for newly merged
//! merge requests and reports each deployment to changegate's `/callbacks/deploy` as a
//! Standard Webhooks signed callback
//! `{callbackId, mrIid, status, sha, operationIds?}`, where the operation ids come from the
//! `Changegate-Operation: <uuid>` lines of the merge request's description.
//!
//! Queued [`DeployFault`]s reproduce the pipeline's failure modes: lost, duplicate, reordered
//! and late callbacks, and failed deployments. What was noticed and what was sent (with
//! changegate's answer) is kept for inspection.
//!
//! ```no_run
//! # async fn demo(gitlab: &changegate::sim::gitlab::GitLabSimHandle) -> std::io::Result<()> {
//! use changegate::sim::deploy::{DeployFault, DeployFaultKind, DeploySim};
//! let deploy = DeploySim::start(gitlab.observer(), Default::default()).await?;
//! deploy.set_callback_url("http://127.0.0.1:8080/callbacks/deploy");
//! deploy.inject(DeployFault::new(DeployFaultKind::Lose).times(2));
//! # Ok(()) }
//! ```

mod watcher;

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use serde_json::Value;
use tokio::sync::watch;
use uuid::Uuid;

use super::callback::{CallbackDelivery, DeliverySettings, Sender, wait_for_len};
use super::gitlab::{GitLabObserver, ProjectId};
use crate::signature::WebhookSecret;
use watcher::Watcher;

/// What a fault does to the callback of one merge.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeployFaultKind {
    /// No callback is ever sent for this merge.
    Lose,
    /// The callback is sent twice with the same `callbackId`.
    Duplicate,
    /// The callback is held back until the next merge's callback has been sent, so the later
    /// merge request is reported first.
    Reverse,
    /// The deployment is reported as `failed`.
    Failed,
    /// The callback is sent after this delay.
    Delay(Duration),
}

/// A fault for the next `times` merges.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeployFault {
    kind: DeployFaultKind,
    times: u32,
}

impl DeployFault {
    /// Hits the next merge.
    pub fn new(kind: DeployFaultKind) -> Self {
        Self { kind, times: 1 }
    }

    /// Hits the next `times` merges instead of one.
    pub fn times(mut self, times: u32) -> Self {
        self.times = times;
        self
    }
}

/// Start-up options.
#[derive(Clone, Debug)]
pub struct DeploySimOptions {
    /// Where callbacks go; usually unknown until changegate runs, hence also settable later.
    pub callback_url: Option<String>,
    /// The key callbacks are signed with (changegate's deploy callback secret).
    pub secret: WebhookSecret,
    /// How often the GitLab simulator is checked for new merges.
    pub poll_interval: Duration,
    /// Whether callbacks carry `operationIds` (older pipelines send only the iid and sha).
    pub send_operation_ids: bool,
    /// Timeouts and retries of callbacks.
    pub delivery: DeliverySettings,
}

impl Default for DeploySimOptions {
    fn default() -> Self {
        Self {
            callback_url: None,
            secret: WebhookSecret::generate(),
            poll_interval: Duration::from_millis(50),
            send_operation_ids: true,
            delivery: DeliverySettings::default(),
        }
    }
}

/// A merge the simulator noticed, and the fault its callback got.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NoticedMerge {
    /// The merge request's project.
    pub project: ProjectId,
    /// The merge request's number.
    pub iid: u64,
    /// The merge commit.
    pub sha: String,
    /// Parsed from the description, whether sent or not.
    pub operation_ids: Vec<Uuid>,
    /// The fault applied to its callback.
    pub fault: Option<DeployFaultKind>,
}

/// Entry point of the simulator.
pub struct DeploySim;

impl DeploySim {
    /// Starts watching `gitlab` for merges from now on; merge requests merged before the
    /// start are never reported. Runs until the handle is dropped, or until the GitLab
    /// simulator's state is gone.
    pub async fn start(
        gitlab: GitLabObserver,
        options: DeploySimOptions,
    ) -> std::io::Result<DeploySimHandle> {
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                callback_url: options.callback_url,
                send_operation_ids: options.send_operation_ids,
                faults: Vec::new(),
                merges: Vec::new(),
            }),
            sender: Sender::new(options.secret, options.delivery)?,
        });
        let (shutdown, released) = watch::channel(());
        let watcher = Watcher::new(Arc::clone(&shared), gitlab, released.clone());
        spawn_until_released(released, watcher.run(options.poll_interval));
        Ok(DeploySimHandle {
            shared,
            _shutdown: shutdown,
        })
    }
}

/// A running simulator; dropping it stops the watcher and any delayed callback.
pub struct DeploySimHandle {
    shared: Arc<Shared>,
    /// Never sent on; dropping it stops every task of this simulator.
    _shutdown: watch::Sender<()>,
}

impl DeploySimHandle {
    /// The key callbacks are signed with.
    pub fn secret(&self) -> &WebhookSecret {
        self.shared.sender.secret()
    }

    /// Sets where callbacks go, e.g. `http://127.0.0.1:PORT/callbacks/deploy`.
    pub fn set_callback_url(&self, url: impl Into<String>) {
        self.shared.lock().callback_url = Some(url.into());
    }

    /// Whether the next callbacks carry `operationIds`.
    pub fn set_send_operation_ids(&self, send: bool) {
        self.shared.lock().send_operation_ids = send;
    }

    /// Queues a fault behind those already queued; each merge takes one use of the first.
    pub fn inject(&self, fault: DeployFault) {
        if fault.times > 0 {
            self.shared.lock().faults.push(fault);
        }
    }

    /// Drops every queued fault.
    pub fn clear_faults(&self) {
        self.shared.lock().faults.clear();
    }

    /// Every merge noticed so far, in the order noticed.
    pub fn merges(&self) -> Vec<NoticedMerge> {
        self.shared.lock().merges.clone()
    }

    /// Waits until at least `count` merges were noticed or `timeout` passed.
    pub async fn wait_for_merges(&self, count: usize, timeout: Duration) -> Vec<NoticedMerge> {
        wait_for_len(count, timeout, || self.merges()).await
    }

    /// Every callback attempt so far, in order, with the status changegate answered.
    pub fn callbacks(&self) -> Vec<CallbackDelivery> {
        self.shared.sender.log().snapshot()
    }

    /// Waits until at least `count` callback attempts were made or `timeout` passed.
    pub async fn wait_for_callbacks(
        &self,
        count: usize,
        timeout: Duration,
    ) -> Vec<CallbackDelivery> {
        self.shared.sender.log().wait_for(count, timeout).await
    }
}

/// Settings and records, behind a mutex never held across an await.
#[derive(Debug)]
struct State {
    callback_url: Option<String>,
    send_operation_ids: bool,
    faults: Vec<DeployFault>,
    merges: Vec<NoticedMerge>,
}

/// What the handle and the background tasks share.
#[derive(Debug)]
struct Shared {
    state: Mutex<State>,
    sender: Sender,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().expect("deploy simulator state poisoned")
    }

    /// Takes one use of the first queued fault.
    fn take_fault(&self) -> Option<DeployFaultKind> {
        let mut state = self.lock();
        let fault = state.faults.first_mut()?;
        fault.times -= 1;
        let kind = fault.kind;
        if fault.times == 0 {
            state.faults.remove(0);
        }
        Some(kind)
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
