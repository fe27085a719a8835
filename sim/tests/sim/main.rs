//! The simulators' integration test binary: real HTTP against running simulators, with a
//! callback receiver that checks signatures with the official `standardwebhooks` crate, and
//! contract tests that hold the GitLab simulator to fixtures written from `GITLAB.md`.

#![allow(
    clippy::unwrap_used,
    reason = "a test should fail loudly at the first unexpected error"
)]

mod approval;
mod binary;
mod client;
mod contract;
mod control_client;
mod demo;
mod deploy;
mod gitlab;
mod receiver;
mod tls;
