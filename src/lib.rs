//! changegate: self-service configuration changes through approval, a GitLab
//! Merge Request, CI, two reviewer bots, merge and deploy confirmation.

pub mod app;
pub mod authz;
pub mod batch;
pub mod clients;
pub mod config;
pub mod db;
pub mod domain;
pub mod http;
pub mod identity;
pub mod jobs;
pub mod observer;
pub mod signature;
pub mod state;
pub mod store;
pub mod telemetry;
pub mod webhooks;
pub mod workflow;
