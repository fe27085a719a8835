//! The integration test binary: real HTTP against a running changegate, with
//! a fresh database per test on SQLite and, when configured, on MariaDB.

#![allow(
    clippy::unwrap_used,
    reason = "a test should fail loudly at the first unexpected error"
)]

mod admin;
mod audit;
mod backup;
mod batch_numbers;
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
mod identity_oidc;
mod identity_provider;
mod jobs;
mod lease_takeover;
mod migrations;
mod migrations_released;
mod outage;
mod overview;
mod proxy;
mod readiness;
mod reconcile;
mod reload;
mod reload_events;
mod requests;
mod retention;
mod rolling_upgrade;
mod signature;
mod storage;
mod store;
mod superseded;
mod tls;
mod traces;
mod web;
mod webhooks;
mod webhooks_delivery;
mod webhooks_kill;
mod webhooks_race;
mod webhooks_sealing;
mod workflow;
