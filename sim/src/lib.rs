//! Simulators of the systems changegate talks to: GitLab's REST v4 subset, the external
//! approval system and the deploy pipeline. They serve real HTTP on loopback for
//! changegate's integration tests and the demo, inject faults on request, and are never
//! on the production request path, which is why they live in this crate and not in
//! `changegate`.
//!
//! Each simulator is started from Rust (`GitLabSim::start`, `ApprovalSim::start`,
//! `DeploySim::start`) and steered either through the Rust control methods its handle
//! offers or through the same operations as JSON under `/_sim/...` on its HTTP server (see
//! `README.md`). [`stack::SimStack`] starts all three at once, as the `changegate-sim`
//! binary does.
//!
//! Each serves plain HTTP unless its options carry a [`tls::ServerTls`] identity, in which
//! case it serves HTTPS only; [`tls::TestCa`] makes one up for tests.

pub mod approval;
pub mod callback;
pub mod deploy;
pub mod gitlab;
pub mod stack;
pub mod tls;

mod chance;
mod control;
