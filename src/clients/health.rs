//! What this instance last saw of each system it calls: whether the last
//! call succeeded, when, and the last error. A connection failure is logged
//! once at warn when it starts (or its cause changes), not once per retry,
//! and counted by system and reason; recovery is logged once at info.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use chrono::{DateTime, Utc};
use serde::Serialize;

use super::http::Unreachable;

/// A system changegate calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum System {
    /// GitLab's REST API.
    GitLab,
    /// The external approval system.
    Approval,
    /// The HTTP permission service.
    Authz,
    /// A webhook subscriber.
    Webhook,
    /// The identity provider (its discovery document and signing keys).
    Identity,
}

impl System {
    /// The metric and report label.
    pub fn label(self) -> &'static str {
        match self {
            Self::GitLab => "gitlab",
            Self::Approval => "approval",
            Self::Authz => "authz",
            Self::Webhook => "webhook",
            Self::Identity => "identity",
        }
    }

    /// How a message names it.
    pub fn display_name(self) -> &'static str {
        match self {
            Self::GitLab => "GitLab",
            Self::Approval => "the approval system",
            Self::Authz => "the permission service",
            Self::Webhook => "the webhook receiver",
            Self::Identity => "the identity provider",
        }
    }
}

/// The systems `GET /admin/v1/health/dependencies` reports (webhook
/// receivers are many and have their own delivery log).
pub const REPORTED: [System; 4] = [
    System::GitLab,
    System::Approval,
    System::Authz,
    System::Identity,
];

/// One system's last outcome, as reported.
#[derive(Debug, Clone, Default, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct DependencyView {
    /// `gitlab`, `approval`, `authz` or `identity`.
    pub system: &'static str,
    /// Whether the last call succeeded; absent before the first call.
    pub last_call_succeeded: Option<bool>,
    /// When the last call ended.
    pub last_call_at: Option<DateTime<Utc>>,
    /// When a call last succeeded.
    pub last_success_at: Option<DateTime<Utc>>,
    /// When a call last failed.
    pub last_failure_at: Option<DateTime<Utc>>,
    /// The last failure, in words.
    pub last_error: Option<String>,
    /// The last failure's reason when it was a connection failure
    /// (`untrusted_certificate`, `refused`, `dns`, `proxy`, …).
    pub last_error_reason: Option<&'static str>,
}

#[derive(Debug, Default)]
struct Record {
    last_succeeded: Option<bool>,
    last_success_at: Option<DateTime<Utc>>,
    last_failure_at: Option<DateTime<Utc>>,
    last_error: Option<String>,
    last_reason: Option<&'static str>,
}

#[derive(Debug, Default)]
struct Inner {
    records: HashMap<System, Record>,
    /// The connection failure each host is in, for logging once.
    failing_hosts: HashMap<(System, String), Unreachable>,
    /// The refusal a system answers with that waiting cannot cure (a
    /// refused token, a missing project), for logging once.
    refusals: HashMap<System, &'static str>,
}

/// Shared by every client of one instance; cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct Dependencies {
    inner: Arc<Mutex<Inner>>,
}

impl Dependencies {
    fn with<T>(&self, f: impl FnOnce(&mut Inner) -> T) -> T {
        f(&mut self.inner.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// A call to `host` of `system` got an answer that is not a failure;
    /// the recovery line logged at info, when it ended a failure.
    pub fn succeeded(&self, system: System, host: &str) -> Option<String> {
        let recovered = self.with(|inner| {
            let record = inner.records.entry(system).or_default();
            record.last_succeeded = Some(true);
            record.last_success_at = Some(Utc::now());
            // Nearly always empty: no key is built for the common case.
            if inner.failing_hosts.is_empty() {
                None
            } else {
                inner.failing_hosts.remove(&(system, host.to_owned()))
            }
        });
        let was = recovered?;
        let line = format!(
            "{} is reachable again (was: {})",
            system.display_name(),
            was.reason()
        );
        tracing::info!(system = system.label(), host, "{line}");
        Some(line)
    }

    /// A call got a failing answer or none in time: recorded, not warned
    /// about (the caller decides what such an answer means).
    pub fn failed(&self, system: System, error: &str) {
        self.with(|inner| {
            let record = inner.records.entry(system).or_default();
            record.last_succeeded = Some(false);
            record.last_failure_at = Some(Utc::now());
            record.last_error = Some(error.to_owned());
            record.last_reason = None;
        });
    }

    /// A call to `host` could not connect: counted every time, logged at
    /// warn when the host starts failing or fails for another reason (the
    /// line logged is returned then).
    pub fn unreachable(
        &self,
        system: System,
        host: &str,
        failure: Unreachable,
        detail: &str,
    ) -> Option<String> {
        metrics::counter!(
            "changegate_outbound_failures_total",
            "system" => system.label(),
            "reason" => failure.reason()
        )
        .increment(1);
        let changed = self.with(|inner| {
            let record = inner.records.entry(system).or_default();
            record.last_succeeded = Some(false);
            record.last_failure_at = Some(Utc::now());
            record.last_error = Some(failure.describe(system.display_name()));
            record.last_reason = Some(failure.reason());
            inner
                .failing_hosts
                .insert((system, host.to_owned()), failure)
                != Some(failure)
        });
        if !changed {
            return None;
        }
        let line = format!(
            "{}: {detail}; {}",
            failure.describe(system.display_name()),
            failure.hint()
        );
        tracing::warn!(
            system = system.label(),
            host,
            reason = failure.reason(),
            "{line}"
        );
        Some(line)
    }

    /// A step failed because `system` refuses changegate itself (`reason`:
    /// `access_denied`, `project_not_found`, …), which waiting cannot cure:
    /// counted every time, logged at warn when it starts or its reason
    /// changes (the line logged is returned then).
    pub fn refused(&self, system: System, reason: &'static str, detail: &str) -> Option<String> {
        metrics::counter!(
            "changegate_outbound_failures_total",
            "system" => system.label(),
            "reason" => reason
        )
        .increment(1);
        let changed = self.with(|inner| inner.refusals.insert(system, reason) != Some(reason));
        if !changed {
            return None;
        }
        let line = format!(
            "{} refuses changegate ({reason}): {detail}; requests fail until the team fixes it",
            system.display_name()
        );
        tracing::warn!(system = system.label(), reason, "{line}");
        Some(line)
    }

    /// `system` accepted a call (a 2xx answer): the recovery line logged at
    /// info, when it ended a refusal.
    pub fn accepted(&self, system: System) -> Option<String> {
        let was = self.with(|inner| {
            if inner.refusals.is_empty() {
                None
            } else {
                inner.refusals.remove(&system)
            }
        })?;
        let line = format!(
            "{} accepts changegate's calls again (was: {was})",
            system.display_name()
        );
        tracing::info!(system = system.label(), "{line}");
        Some(line)
    }

    /// The reported systems, in a fixed order.
    pub fn report(&self) -> Vec<DependencyView> {
        self.with(|inner| {
            REPORTED
                .iter()
                .map(|system| {
                    let record = inner.records.get(system);
                    DependencyView {
                        system: system.label(),
                        last_call_succeeded: record.and_then(|r| r.last_succeeded),
                        last_call_at: record.and_then(|r| match r.last_succeeded {
                            Some(true) => r.last_success_at,
                            Some(false) => r.last_failure_at,
                            None => None,
                        }),
                        last_success_at: record.and_then(|r| r.last_success_at),
                        last_failure_at: record.and_then(|r| r.last_failure_at),
                        last_error: record.and_then(|r| r.last_error.clone()),
                        last_error_reason: record.and_then(|r| r.last_reason),
                    }
                })
                .collect()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_is_warned_once_per_cause_and_recovery_once() {
        let health = Dependencies::default();
        let mut warned = Vec::new();
        for _ in 0..3 {
            warned.extend(health.unreachable(
                System::GitLab,
                "gitlab.example",
                Unreachable::Dns,
                "no such host",
            ));
        }
        warned.extend(health.unreachable(
            System::GitLab,
            "gitlab.example",
            Unreachable::Refused,
            "refused",
        ));
        assert_eq!(warned.len(), 2, "{warned:#?}");
        assert!(warned[0].contains("GitLab's host name cannot be resolved: no such host"));
        assert!(warned[1].contains("GitLab refused the connection"));
        let recovered = health.succeeded(System::GitLab, "gitlab.example");
        assert!(
            recovered
                .as_deref()
                .is_some_and(|line| line.contains("reachable again (was: refused)")),
            "{recovered:?}"
        );
        assert_eq!(health.succeeded(System::GitLab, "gitlab.example"), None);
    }

    #[test]
    fn a_refusal_is_warned_once_per_reason_and_its_end_once() {
        let health = Dependencies::default();
        assert_eq!(health.accepted(System::GitLab), None);
        let mut warned: Vec<String> = (0..3)
            .filter_map(|_| health.refused(System::GitLab, "access_denied", "401 Unauthorized"))
            .collect();
        warned.extend(health.refused(System::GitLab, "project_not_found", "404 Project Not Found"));
        assert_eq!(warned.len(), 2, "{warned:#?}");
        assert!(warned[0].contains("GitLab refuses changegate (access_denied): 401 Unauthorized"));
        let recovered = health.accepted(System::GitLab);
        assert!(
            recovered
                .as_deref()
                .is_some_and(|line| line
                    .contains("accepts changegate's calls again (was: project_not_found)")),
            "{recovered:?}"
        );
        assert_eq!(health.accepted(System::GitLab), None);
    }

    #[test]
    fn the_report_keeps_the_last_outcome_and_the_last_error_per_system() {
        let health = Dependencies::default();
        let before = health.report();
        assert_eq!(before.len(), 4);
        assert!(before.iter().all(|d| d.last_call_succeeded.is_none()));

        health.unreachable(
            System::Approval,
            "approvals",
            Unreachable::UntrustedCertificate,
            "x",
        );
        health.failed(System::GitLab, "answered HTTP 502");
        health.succeeded(System::GitLab, "gitlab");

        let report = health.report();
        let gitlab = &report[0];
        assert_eq!(gitlab.system, "gitlab");
        assert_eq!(gitlab.last_call_succeeded, Some(true));
        assert_eq!(gitlab.last_call_at, gitlab.last_success_at);
        assert_eq!(gitlab.last_error.as_deref(), Some("answered HTTP 502"));
        let approval = &report[1];
        assert_eq!(approval.last_call_succeeded, Some(false));
        assert_eq!(approval.last_error_reason, Some("untrusted_certificate"));
        assert_eq!(
            approval.last_error.as_deref(),
            Some("the approval system's certificate is not trusted")
        );
        assert!(approval.last_success_at.is_none());
        assert_eq!(report[2].system, "authz");
        assert!(report[2].last_call_succeeded.is_none());
        assert_eq!(report[3].system, "identity");
    }
}
