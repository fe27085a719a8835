//! The operators' API, `/admin/v1` (SPEC §2.3): every route needs the
//! `operator` rule, and every action is audited.

pub mod approvals;
mod attempt;
pub mod audit;
mod batch_views;
pub mod batches;
mod bodies;
pub mod config;
pub mod drift;
pub mod health;
mod ok;
pub mod operations;
pub mod overview;
pub mod reconcile;
pub mod urgent;
mod webhook_views;
pub mod webhooks;
