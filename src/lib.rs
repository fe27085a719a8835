//! changegate: self-service configuration changes through approval, a GitLab
//! Merge Request, CI, two reviewer bots, merge and deploy confirmation.

pub mod app;
pub mod authz;
pub mod batch;
pub mod cli;
pub mod clients;
pub mod config;
pub mod db;
pub mod domain;
pub mod drift;
pub mod files;
pub mod http;
pub mod identity;
pub mod instance;
pub mod jobs;
pub mod observer;
pub mod schedule;
pub mod sealing;
pub mod signature;
pub mod state;
pub mod store;
pub mod telemetry;
pub mod traces;
pub mod webhooks;
pub mod workflow;

/// mimalloc serves every allocation of whatever links changegate: the service,
/// its tests and its benchmarks measure the same allocator. Under the load
/// benchmark glibc's malloc took more CPU than the whole rate limiter (the
/// per-request futures, header maps and buffers); with mimalloc the layer
/// stack costs about half as much and the API answers 15–20% more requests,
/// for about 10 MB more idle memory (BENCHMARKS.md). Transparent huge pages
/// are off for its memory (`no_thp`): with them, an idle instance held twice
/// as much.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;
