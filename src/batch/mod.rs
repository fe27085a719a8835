//! The batch merge queue (SPEC §7): approved requests wait; each round
//! claims the waiting ones into one batch, which becomes one MR.

mod claim;
mod departed;
mod estimate;
mod fit;
mod forecast;
mod metrics;
mod noted;
mod open;
mod orphans;
mod outcome;
mod pace;
mod remembered;
mod runner;
mod settle;
mod split;
mod suspects;
mod traced;
mod train;
mod turn;
mod unwritable;
mod writes;

pub use claim::{Claimed, OpenNow, Ordinary, Room, claim_batch, claim_in};
pub use estimate::{MIN_HISTORY, QueueEstimate, queue_estimate};
pub use metrics::{count_round_failure, count_urgent, describe_metrics};
pub use pace::Pace;
pub use runner::{ClaimError, MergeQueue, NotNow};
pub use settle::Settled;
