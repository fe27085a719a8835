//! Fault injection for the approval simulator. Request faults hit `POST /approvals`;
//! callback faults hit the next decisions sent. Each fault may be limited to one operation,
//! may strike only with a probability, and is used up after `times` hits.

use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use uuid::Uuid;

use super::Decision;
use crate::chance::{Budget, Budgeted, FaultQueue};
use crate::control::millis;

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
    /// The decision is recorded but its callback is never sent, as if it
    /// were lost on the way.
    LostCallback,
}

/// The control API's spelling of [`ApprovalFaultKind`]: `{"kind": "status", "status": 503}`,
/// `{"kind": "out_of_order", "first": "WITHDRAWN"}`, ...
#[derive(Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
enum ApprovalFaultKindJson {
    Status { status: u16 },
    Slow { delay_ms: u64 },
    LostResponse,
    CallbackBeforeAnswer { decision: Decision },
    DuplicateCallback,
    LateCallback { delay_ms: u64 },
    OutOfOrder { first: Decision },
    BadSignature,
    LostCallback,
}

impl From<ApprovalFaultKindJson> for ApprovalFaultKind {
    fn from(json: ApprovalFaultKindJson) -> Self {
        use ApprovalFaultKindJson as Json;
        match json {
            Json::Status { status } => Self::Status(status),
            Json::Slow { delay_ms } => Self::Slow(Duration::from_millis(delay_ms)),
            Json::LostResponse => Self::LostResponse,
            Json::CallbackBeforeAnswer { decision } => Self::CallbackBeforeAnswer(decision),
            Json::DuplicateCallback => Self::DuplicateCallback,
            Json::LateCallback { delay_ms } => Self::LateCallback(Duration::from_millis(delay_ms)),
            Json::OutOfOrder { first } => Self::OutOfOrder { first },
            Json::BadSignature => Self::BadSignature,
            Json::LostCallback => Self::LostCallback,
        }
    }
}

impl From<ApprovalFaultKind> for ApprovalFaultKindJson {
    fn from(kind: ApprovalFaultKind) -> Self {
        use ApprovalFaultKind as Kind;
        match kind {
            Kind::Status(status) => Self::Status { status },
            Kind::Slow(delay) => Self::Slow {
                delay_ms: millis(delay),
            },
            Kind::LostResponse => Self::LostResponse,
            Kind::CallbackBeforeAnswer(decision) => Self::CallbackBeforeAnswer { decision },
            Kind::DuplicateCallback => Self::DuplicateCallback,
            Kind::LateCallback(delay) => Self::LateCallback {
                delay_ms: millis(delay),
            },
            Kind::OutOfOrder { first } => Self::OutOfOrder { first },
            Kind::BadSignature => Self::BadSignature,
            Kind::LostCallback => Self::LostCallback,
        }
    }
}

impl Serialize for ApprovalFaultKind {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        ApprovalFaultKindJson::from(*self).serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for ApprovalFaultKind {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        ApprovalFaultKindJson::deserialize(deserializer).map(Self::from)
    }
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

/// A fault for the next `times` matching requests or callbacks, each struck with an
/// optional probability.
#[derive(Clone, Debug, PartialEq)]
pub struct ApprovalFault {
    kind: ApprovalFaultKind,
    operation: Option<Uuid>,
    budget: Budget,
}

impl ApprovalFault {
    /// Hits the next matching request or callback of any operation.
    pub fn new(kind: ApprovalFaultKind) -> Self {
        Self {
            kind,
            operation: None,
            budget: Budget::ONCE,
        }
    }

    /// Hits only requests or callbacks of `operation`.
    pub fn for_operation(mut self, operation: Uuid) -> Self {
        self.operation = Some(operation);
        self
    }

    /// Hits the next `times` matches instead of one.
    pub fn times(mut self, times: u32) -> Self {
        self.budget = self.budget.with_times(times);
        self
    }

    /// Hits each match only with `probability`, drawn from the simulator's seeded generator
    /// ([`ApprovalSimOptions::fault_seed`](super::ApprovalSimOptions::fault_seed)); a spared
    /// match may still meet the faults queued behind it. `times` still caps the hits.
    ///
    /// # Panics
    /// If `probability` is not within `0.0..=1.0`.
    pub fn probability(mut self, probability: f64) -> Self {
        self.budget = self.budget.with_probability(probability);
        self
    }
}

impl Budgeted for ApprovalFault {
    fn budget(&mut self) -> &mut Budget {
        &mut self.budget
    }
}

/// The queue of faults, oldest first.
#[derive(Debug)]
pub(super) struct Faults(FaultQueue<ApprovalFault>);

impl Faults {
    /// No faults; probabilities draw from `seed`.
    pub fn new(seed: u64) -> Self {
        Self(FaultQueue::new(seed))
    }

    /// Queues a fault behind those already queued.
    pub fn inject(&mut self, fault: ApprovalFault) {
        self.0.push(fault);
    }

    /// Drops every queued fault.
    pub fn clear(&mut self) {
        self.0.clear();
    }

    /// Takes one strike of the first request fault matching `operation` that strikes.
    pub fn take_request(&mut self, operation: Uuid) -> Option<ApprovalFaultKind> {
        self.take(operation, true)
    }

    /// Takes one strike of the first callback fault matching `operation` that strikes.
    pub fn take_callback(&mut self, operation: Uuid) -> Option<ApprovalFaultKind> {
        self.take(operation, false)
    }

    fn take(&mut self, operation: Uuid, on_request: bool) -> Option<ApprovalFaultKind> {
        let fault = self.0.take(|fault| {
            fault.kind.on_request() == on_request && fault.operation.is_none_or(|o| o == operation)
        })?;
        Some(fault.kind)
    }
}
