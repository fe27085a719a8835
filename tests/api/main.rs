//! The integration test binary: real HTTP against a running changegate, with
//! a fresh database per test on SQLite and, when configured, on MariaDB.

#![allow(
    clippy::unwrap_used,
    reason = "a test should fail loudly at the first unexpected error"
)]

mod admin;
mod batches;
mod callbacks;
mod cli;
mod contention;
mod contract;
mod durability;
mod galera;
mod gitlab_client;
mod health;
mod helpers;
mod jobs;
mod lease_takeover;
mod migrations;
mod outage;
mod proxy;
mod readiness;
mod reconcile;
mod reload;
mod reload_events;
mod requests;
mod signature;
mod storage;
mod store;
mod tls;
mod web;
mod webhooks;
mod webhooks_delivery;
mod webhooks_race;
mod workflow;
