//! Fault injection for the approval simulator. Request faults hit `POST /approvals`;
//! callback faults hit the next decisions sent. Each fault may be limited to one operation
//! and is used up after `times` hits.

use std::time::Duration;

use uuid::Uuid;

use super::Decision;

/// What a fault does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ApprovalFaultKind {
    /// `POST /approvals` answers this status without recording the approval; a 429 carries
    /// `Retry-After: 1`.
    Status(u16),
    /// Records the approval, then answers after the delay.
    Slow(Duration),
    /// Records the approval, then withholds the answer for `lost_response_hold`: the client
    /// times out although the approval exists (and gets decided).
    LostResponse,
    /// Records the approval, decides it at once and delivers that callback, and only then
    /// answers the POST: the callback beats the `201` (SPEC §2.2).
    CallbackBeforeAnswer(Decision),
    /// The decision's callback is delivered twice with the same `callbackId`.
    DuplicateCallback,
    /// The decision's callback is delivered only after this extra delay.
    LateCallback(Duration),
    /// Before the decision's callback, a callback with decision `first` and its own
    /// `callbackId` is delivered, as if an earlier callback had overtaken a later one
    /// (e.g. `WITHDRAWN` arriving before `APPROVED`).
    OutOfOrder {
        /// The decision delivered first.
        first: Decision,
    },
    /// The decision's callback is signed with a random secret.
    BadSignature,
}

impl ApprovalFaultKind {
    /// Whether the fault hits `POST /approvals` (else it hits a callback).
    fn on_request(self) -> bool {
        matches!(
            self,
            Self::Status(_) | Self::Slow(_) | Self::LostResponse | Self::CallbackBeforeAnswer(_)
        )
    }
}

/// A fault for the next `times` matching requests or callbacks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApprovalFault {
    kind: ApprovalFaultKind,
    operation: Option<Uuid>,
    times: u32,
}

impl ApprovalFault {
    /// Hits the next matching request or callback of any operation.
    pub fn new(kind: ApprovalFaultKind) -> Self {
        Self {
            kind,
            operation: None,
            times: 1,
        }
    }

    /// Hits only requests or callbacks of `operation`.
    pub fn for_operation(mut self, operation: Uuid) -> Self {
        self.operation = Some(operation);
        self
    }

    /// Hits the next `times` matches instead of one.
    pub fn times(mut self, times: u32) -> Self {
        self.times = times;
        self
    }
}

/// The queue of faults, oldest first.
#[derive(Debug, Default)]
pub(super) struct Faults {
    queue: Vec<ApprovalFault>,
}

impl Faults {
    /// Queues a fault behind those already queued.
    pub fn inject(&mut self, fault: ApprovalFault) {
        if fault.times > 0 {
            self.queue.push(fault);
        }
    }

    /// Drops every queued fault.
    pub fn clear(&mut self) {
        self.queue.clear();
    }

    /// Takes one use of the first request fault matching `operation`.
    pub fn take_request(&mut self, operation: Uuid) -> Option<ApprovalFaultKind> {
        self.take(operation, true)
    }

    /// Takes one use of the first callback fault matching `operation`.
    pub fn take_callback(&mut self, operation: Uuid) -> Option<ApprovalFaultKind> {
        self.take(operation, false)
    }

    fn take(&mut self, operation: Uuid, on_request: bool) -> Option<ApprovalFaultKind> {
        let position = self.queue.iter().position(|fault| {
            fault.kind.on_request() == on_request && fault.operation.is_none_or(|o| o == operation)
        })?;
        let fault = &mut self.queue[position];
        fault.times -= 1;
        let kind = fault.kind;
        if fault.times == 0 {
            self.queue.remove(position);
        }
        Some(kind)
    }
}
