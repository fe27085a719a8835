//! In-process simulators of the systems changegate talks to, for tests and the demo; never
//! on the production request path.

pub mod approval;
pub mod callback;
pub mod deploy;
pub mod gitlab;
