//! What operators see of outbound webhooks: endpoints (a secret only in
//! the answers to create and rotate), their delivery log, and the answers
//! of the webhook actions.

use serde::Serialize;
use utoipa::openapi::schema::{Object, ObjectBuilder, Type};

use crate::db::audit::url_without_secrets;
use crate::db::webhook_deliveries::{self, DeliveryRow};
use crate::db::webhook_endpoints::{EndpointRow, decode_event_types};
use crate::http::api::status::rfc3339;
use crate::webhooks::SentEvent;

/// A registered endpoint, without its secret.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct EndpointView {
    id: i64,
    /// Where deliveries go, with credentials and secret-looking query
    /// values shown as `[redacted]`.
    url: String,
    /// What it is for (empty when not given).
    description: String,
    /// The event types it gets; empty: every type.
    event_types: Vec<String>,
    /// A disabled endpoint gets no new deliveries and sends none.
    enabled: bool,
    /// Why it was disabled (by an operator, or on a 410 answer).
    disabled_reason: Option<String>,
    #[schema(schema_with = breaker_schema)]
    breaker: String,
    #[schema(value_type = String, format = DateTime)]
    created_at: String,
    #[schema(value_type = String, format = DateTime)]
    updated_at: String,
}

impl From<&EndpointRow> for EndpointView {
    fn from(row: &EndpointRow) -> Self {
        Self {
            id: row.id,
            // The URL as it may be shown: a secret in its query stays stored
            // (the receiver needs it) but is not displayed.
            url: url_without_secrets(&row.url).unwrap_or_else(|| row.url.clone()),
            description: row.description.clone(),
            event_types: decode_event_types(&row.event_types),
            enabled: row.enabled,
            disabled_reason: row.disabled_reason.clone(),
            breaker: row.breaker_state.clone(),
            created_at: rfc3339(row.created_at),
            updated_at: rfc3339(row.updated_at),
        }
    }
}

/// The states of an endpoint's circuit breaker.
fn breaker_schema() -> Object {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .description(Some(
            "The circuit breaker: `closed` (sending), `open` (failing, skipped \
             until it may be probed) or `half_open` (one probe under way)",
        ))
        .enum_values(Some(["closed", "open", "half_open"]))
        .build()
}

/// Every endpoint.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct EndpointList {
    pub items: Vec<EndpointView>,
}

/// A new endpoint, with its secret: the one answer besides rotation that
/// shows it.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CreatedEndpoint {
    pub id: i64,
    /// Where deliveries go, as stored (normalised).
    pub url: String,
    /// The event types it gets; empty: every type.
    pub event_types: Vec<String>,
    /// What it is for (empty when not given).
    pub description: String,
    /// The Standard Webhooks signing secret.
    #[schema(examples("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"))]
    pub secret: String,
}

/// An endpoint's new secret.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RotatedSecret {
    pub id: i64,
    /// The new Standard Webhooks signing secret, shown only here.
    #[schema(examples("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"))]
    pub secret: String,
    /// Until when the old secret signs too (`webhooks.secret_grace`).
    #[schema(value_type = Option<String>, format = DateTime)]
    pub previous_secret_valid_until: Option<String>,
}

/// One delivery of an event to an endpoint.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct DeliveryView {
    id: i64,
    event_id: i64,
    event_type: String,
    /// The operation whose status change the event reports; null when the
    /// event names none.
    operation_id: Option<String>,
    /// The subject of the binding that changed.
    subject_id: Option<String>,
    /// The target of the binding that changed.
    target_key: Option<String>,
    /// The binding's status before; null for a new binding.
    from_status: Option<String>,
    /// The binding's status after.
    to_status: Option<String>,
    /// The `webhook-id` header, the same on every attempt.
    webhook_id: String,
    #[schema(schema_with = delivery_status_schema)]
    status: String,
    /// Attempts made.
    attempts: i64,
    /// Not sent before this.
    #[schema(value_type = String, format = DateTime)]
    next_attempt_at: String,
    /// The HTTP status of the last attempt, when it got an answer.
    last_status: Option<i64>,
    /// Why the last attempt failed.
    last_error: Option<String>,
    #[schema(value_type = String, format = DateTime)]
    created_at: String,
    #[schema(value_type = String, format = DateTime)]
    updated_at: String,
}

impl From<&DeliveryRow> for DeliveryView {
    fn from(row: &DeliveryRow) -> Self {
        let event = SentEvent::of_body(&row.body);
        Self {
            id: row.id,
            event_id: row.event_id,
            event_type: row.event_type.clone(),
            operation_id: event.operation_id,
            subject_id: event.subject_id,
            target_key: event.target_key,
            from_status: event.from_status,
            to_status: event.to_status,
            webhook_id: row.msg_id.clone(),
            status: row.status.clone(),
            attempts: row.attempts,
            next_attempt_at: rfc3339(row.next_attempt_at),
            last_status: row.last_status,
            last_error: row.last_error.clone(),
            created_at: rfc3339(row.created_at),
            updated_at: rfc3339(row.updated_at),
        }
    }
}

/// The statuses the delivery table holds.
fn delivery_status_schema() -> Object {
    use webhook_deliveries::{DELIVERED, FAILED, QUEUED, SENDING, SILENT};
    ObjectBuilder::new()
        .schema_type(Type::String)
        .description(Some(
            "`queued` (waiting to be sent), `sending` (claimed by an instance), \
             `delivered` (answered 2xx), `failed` (every attempt failed, or the \
             endpoint answered 410) or `silent` (recorded in silent mode, never sent)",
        ))
        .enum_values(Some([QUEUED, SENDING, DELIVERED, FAILED, SILENT]))
        .build()
}

/// One page of an endpoint's deliveries, newest first.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct DeliveryPage {
    pub items: Vec<DeliveryView>,
    /// Pass as `cursor` for the next page; null on the last page.
    pub next_cursor: Option<String>,
}
