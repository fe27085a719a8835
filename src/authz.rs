//! Permission checks: several rule codes answered in one round trip, by the
//! static grants in configuration or by an HTTP permission service. Any
//! failure of the provider means "not granted" (SPEC §3, authz).

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use crate::clients::http::SystemClient;
use crate::config::{AuthzProvider, AuthzSettings};
use crate::identity::Identity;

/// In static grants, holds every authenticated identity.
pub const EVERYONE: &str = "*";
/// In static grants, `group:<name>` holds every member of the group a
/// token names (`identity.jwt.groups_claim`).
pub const GROUP_PREFIX: &str = "group:";

/// Why the provider could not answer; callers deny.
#[derive(Debug, thiserror::Error)]
pub enum PermissionError {
    /// The permission service failed, timed out or answered nonsense.
    #[error("permission service: {0}")]
    Service(String),
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct CheckRequest<'a> {
    identity: &'a str,
    /// The groups the caller's token names; empty for proxy headers.
    groups: &'a [String],
    rule_codes: &'a [String],
}

#[derive(Deserialize)]
struct CheckResponse {
    granted: Vec<String>,
}

/// Answers which of some rule codes an identity holds.
#[derive(Clone)]
pub struct Permissions {
    client: SystemClient,
}

impl Permissions {
    /// A checker using `client` for the HTTP provider (timeouts come from
    /// `authz.timeout` per call).
    pub fn new(client: SystemClient) -> Self {
        Self { client }
    }

    /// Whether `identity` holds any of `route_codes`, and whether it holds any
    /// of `operator_codes`: one round trip for both ("owner or admin").
    pub async fn route_access(
        &self,
        settings: &AuthzSettings,
        identity: &Identity,
        route_codes: &[String],
        operator_codes: &[String],
    ) -> Result<(bool, bool), PermissionError> {
        if let Some(access) = static_route_access(settings, identity, route_codes, operator_codes) {
            return Ok(access);
        }
        let mut asked = route_codes.to_vec();
        asked.extend(
            operator_codes
                .iter()
                .filter(|code| !route_codes.contains(code))
                .cloned(),
        );
        let granted = self.granted(settings, identity, &asked).await?;
        Ok((
            route_codes.iter().any(|code| granted.contains(code)),
            operator_codes.iter().any(|code| granted.contains(code)),
        ))
    }

    /// The subset of `codes` that `identity` holds.
    pub async fn granted(
        &self,
        settings: &AuthzSettings,
        identity: &Identity,
        codes: &[String],
    ) -> Result<BTreeSet<String>, PermissionError> {
        match settings.provider {
            AuthzProvider::Static => Ok(codes
                .iter()
                .filter(|code| holds_static(settings, identity, code))
                .cloned()
                .collect()),
            AuthzProvider::Http => {
                let failed = |err: reqwest::Error| PermissionError::Service(err.to_string());
                let request = self
                    .client
                    .request(reqwest::Method::POST, &settings.url)
                    .timeout(settings.timeout)
                    .json(&CheckRequest {
                        identity: identity.as_str(),
                        groups: identity.groups(),
                        rule_codes: codes,
                    });
                let response = self
                    .client
                    .send(request)
                    .await
                    .map_err(|err| PermissionError::Service(err.to_string()))?
                    .error_for_status()
                    .map_err(failed)?;
                let answer: CheckResponse = response.json().await.map_err(failed)?;
                // Only codes that were asked for can be granted.
                Ok(answer
                    .granted
                    .into_iter()
                    .filter(|code| codes.contains(code))
                    .collect())
            }
        }
    }
}

/// [`Permissions::route_access`] answered at once when the provider is static
/// (from configuration, without I/O); `None` when it is the HTTP provider.
pub fn static_route_access(
    settings: &AuthzSettings,
    identity: &Identity,
    route_codes: &[String],
    operator_codes: &[String],
) -> Option<(bool, bool)> {
    if settings.provider != AuthzProvider::Static {
        return None;
    }
    // Answered from configuration without building any set.
    let holds = |code: &String| holds_static(settings, identity, code);
    Some((
        route_codes.iter().any(holds),
        operator_codes.iter().any(holds),
    ))
}

fn holds_static(settings: &AuthzSettings, identity: &Identity, code: &String) -> bool {
    settings.grants.get(code).is_some_and(|holders| {
        holders.iter().any(|holder| {
            holder == EVERYONE
                || holder == identity.as_str()
                || holder
                    .strip_prefix(GROUP_PREFIX)
                    .is_some_and(|group| identity.in_group(group))
        })
    })
}
