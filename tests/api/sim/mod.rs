//! The simulators of GitLab, the approval system and the deploy pipeline, and
//! the Standard Webhooks signing they share with changegate.

mod approval;
mod deploy;
mod gitlab;
mod receiver;
mod signature;
