//! The control API: methods on [`DeployControl`] that steer the simulator (callback URL,
//! operation ids, project field, faults) and inspect what it noticed and sent. Tests call them on the
//! handle; the `/_sim` HTTP routes call the same methods.

use std::time::Duration;

use super::{DeployControl, DeployFault, NoticedMerge, ProjectField};
use crate::callback::{CallbackDelivery, wait_for_len};

impl DeployControl {
    /// The `whsec_` secret callbacks are signed with.
    pub fn secret(&self) -> &str {
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

    /// How the next callbacks name the merge request's project.
    pub fn set_project_field(&self, field: ProjectField) {
        self.shared.lock().project_field = field;
    }

    /// Queues a fault behind those already queued; each merge takes one strike of the first
    /// that strikes.
    pub fn inject(&self, fault: DeployFault) {
        self.shared.lock().faults.push(fault);
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
