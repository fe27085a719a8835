//! The deploy simulator's faults: what can go wrong with the callback of one merge (lost,
//! duplicated, reordered, late, a failed deployment), each for a number of merges and
//! optionally only with a probability.

use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::chance::{Budget, Budgeted};
use crate::control::millis;

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

/// The control API's spelling of [`DeployFaultKind`]: `{"kind": "lose"}`,
/// `{"kind": "delay", "delay_ms": 800}`, ...
#[derive(Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
enum DeployFaultKindJson {
    Lose,
    Duplicate,
    Reverse,
    Failed,
    Delay { delay_ms: u64 },
}

impl From<DeployFaultKindJson> for DeployFaultKind {
    fn from(json: DeployFaultKindJson) -> Self {
        match json {
            DeployFaultKindJson::Lose => Self::Lose,
            DeployFaultKindJson::Duplicate => Self::Duplicate,
            DeployFaultKindJson::Reverse => Self::Reverse,
            DeployFaultKindJson::Failed => Self::Failed,
            DeployFaultKindJson::Delay { delay_ms } => Self::Delay(Duration::from_millis(delay_ms)),
        }
    }
}

impl From<DeployFaultKind> for DeployFaultKindJson {
    fn from(kind: DeployFaultKind) -> Self {
        match kind {
            DeployFaultKind::Lose => Self::Lose,
            DeployFaultKind::Duplicate => Self::Duplicate,
            DeployFaultKind::Reverse => Self::Reverse,
            DeployFaultKind::Failed => Self::Failed,
            DeployFaultKind::Delay(delay) => Self::Delay {
                delay_ms: millis(delay),
            },
        }
    }
}

impl Serialize for DeployFaultKind {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        DeployFaultKindJson::from(*self).serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for DeployFaultKind {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        DeployFaultKindJson::deserialize(deserializer).map(Self::from)
    }
}

/// A fault for the next `times` merges, each struck with an optional probability.
#[derive(Clone, Debug, PartialEq)]
pub struct DeployFault {
    pub(super) kind: DeployFaultKind,
    budget: Budget,
}

impl DeployFault {
    /// Hits the next merge.
    pub fn new(kind: DeployFaultKind) -> Self {
        Self {
            kind,
            budget: Budget::ONCE,
        }
    }

    /// Hits the next `times` merges instead of one.
    pub fn times(mut self, times: u32) -> Self {
        self.budget = self.budget.with_times(times);
        self
    }

    /// Hits each merge only with `probability`, drawn from the simulator's seeded generator
    /// ([`DeploySimOptions::fault_seed`](super::DeploySimOptions::fault_seed)); a spared
    /// merge may still meet the faults queued behind it. `times` still caps the hits.
    ///
    /// # Panics
    /// If `probability` is not within `0.0..=1.0`.
    pub fn probability(mut self, probability: f64) -> Self {
        self.budget = self.budget.with_probability(probability);
        self
    }
}

impl Budgeted for DeployFault {
    fn budget(&mut self) -> &mut Budget {
        &mut self.budget
    }
}
