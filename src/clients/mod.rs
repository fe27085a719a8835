//! Adapters for the systems changegate talks to, each with timeouts on every
//! call and retries where a retry is safe.

pub mod approval;
pub mod gitlab;
pub mod health;
pub mod http;
