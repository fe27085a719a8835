//! Operators and outbound webhooks (SPEC §2.3, §9): endpoints
//! (`/admin/v1/webhook-endpoints`: list, create, change, delete, rotate the
//! secret), an endpoint's delivery log, and redelivery by hand. A secret is
//! shown only in the answers to create and rotate, never stored in the audit
//! log and never logged. Every change is audited.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::db::audit::{append_audit, audited_params, url_without_secrets};
use crate::db::webhook_deliveries::{DeliveryRow, list_for_endpoint, redeliver as requeue};
use crate::db::webhook_endpoints::{
    EndpointPatch, EndpointRow, decode_event_types, delete_endpoint as delete_row,
    encode_event_types, get_endpoint, insert_endpoint, list_endpoints as list_rows, rotate_secret,
    update_endpoint as update_row,
};
use crate::http::api::status::rfc3339;
use crate::http::error::{ApiError, ApiResult};
use crate::http::extract::{AppJson, AppQuery, AuthUser, Database};
use crate::http::page::PageRequest;
use crate::signature::WebhookSecret;
use crate::state::AppState;
use crate::webhooks::target;
use crate::write_tx;

const DEFAULT_PAGE: u32 = 50;
const MAX_PAGE: u32 = 200;
const MAX_EVENT_TYPES: usize = 20;

/// `POST` body.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct NewEndpoint {
    url: String,
    event_types: Option<Vec<String>>,
    description: Option<String>,
}

/// `PATCH` body: only the fields given change.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ChangeEndpoint {
    url: Option<String>,
    event_types: Option<Vec<String>>,
    description: Option<String>,
    enabled: Option<bool>,
}

/// Delivery log page.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
pub struct DeliveryQuery {
    /// `nextCursor` of the previous page.
    cursor: Option<String>,
    /// Page size, 1 to 200 (default 50).
    limit: Option<u32>,
}

fn view(row: &EndpointRow) -> Value {
    json!({
        "id": row.id,
        // The URL as it may be shown: a secret in its query stays stored
        // (the receiver needs it) but is not displayed.
        "url": url_without_secrets(&row.url).unwrap_or_else(|| row.url.clone()),
        "description": row.description,
        "eventTypes": decode_event_types(&row.event_types),
        "enabled": row.enabled,
        "disabledReason": row.disabled_reason,
        "breaker": row.breaker_state,
        "createdAt": rfc3339(row.created_at),
        "updatedAt": rfc3339(row.updated_at),
    })
}

fn delivery_view(row: &DeliveryRow) -> Value {
    json!({
        "id": row.id,
        "eventId": row.event_id,
        "eventType": row.event_type,
        "webhookId": row.msg_id,
        "status": row.status,
        "attempts": row.attempts,
        "nextAttemptAt": rfc3339(row.next_attempt_at),
        "lastStatus": row.last_status,
        "lastError": row.last_error,
        "createdAt": rfc3339(row.created_at),
        "updatedAt": rfc3339(row.updated_at),
    })
}

fn parse_body<T: serde::de::DeserializeOwned>(body: &Value) -> ApiResult<T> {
    serde_json::from_value(body.clone())
        .map_err(|err| ApiError::InvalidArgument(format!("body: {err}")))
}

fn parse_id(text: &str) -> ApiResult<i64> {
    text.parse().map_err(|_| ApiError::NotFound)
}

fn check_event_types(types: &[String]) -> ApiResult<String> {
    let valid = |t: &String| {
        !t.is_empty()
            && t.len() <= 64
            && t.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
    };
    if types.len() > MAX_EVENT_TYPES || !types.iter().all(valid) {
        return Err(ApiError::InvalidArgument(
            "eventTypes: at most 20 names of letters, digits, '.', '_' and '-'".to_owned(),
        ));
    }
    Ok(encode_event_types(types))
}

fn check_url(state: &AppState, url: &str) -> ApiResult<String> {
    let allow_private = state.config.current().webhooks.allow_private_targets;
    target::validate(url, allow_private)
        .map(|url| url.to_string())
        .map_err(ApiError::InvalidArgument)
}

/// Every endpoint (secrets never shown).
#[utoipa::path(get, path = "/admin/v1/webhook-endpoints", tag = "admin",
    responses((status = 200, description = "`{items: [endpoint]}`", body = Object)))]
pub async fn list_endpoints(Database(db): Database) -> ApiResult<Json<Value>> {
    let items: Vec<Value> = list_rows(&db).await?.iter().map(view).collect();
    Ok(Json(json!({ "items": items })))
}

/// Registers an endpoint. The answer holds its secret, shown only here.
#[utoipa::path(post, path = "/admin/v1/webhook-endpoints", tag = "admin", request_body = Object,
    responses((status = 201, description = "`{id, url, eventTypes, description, secret}`", body = Object),
        (status = 400, description = "Invalid URL or event types")))]
pub async fn create_endpoint(
    State(state): State<AppState>,
    AuthUser(caller): AuthUser,
    Database(db): Database,
    AppJson(body): AppJson<Value>,
) -> ApiResult<(StatusCode, Json<Value>)> {
    let new: NewEndpoint = parse_body(&body)?;
    let url = check_url(&state, &new.url)?;
    let types = new.event_types.unwrap_or_default();
    let stored_types = check_event_types(&types)?;
    let description = new.description.unwrap_or_default();
    if description.chars().count() > 500 {
        return Err(ApiError::InvalidArgument(
            "description: at most 500 characters".to_owned(),
        ));
    }
    let secret = WebhookSecret::generate().expose();
    let operator = caller.identity.as_str();
    let id = write_tx!(&db, |tx| {
        let id = insert_endpoint(tx.db(), &url, &description, &stored_types, &secret).await?;
        append_audit(
            tx.db(),
            operator,
            "webhook.endpoint.create",
            &format!("webhook-endpoint:{id}"),
            &audited_params(&body, operator),
        )
        .await?;
        Ok::<_, ApiError>(id)
    })
    .await?;
    Ok((
        StatusCode::CREATED,
        Json(json!({
            "id": id, "url": url, "eventTypes": types, "description": description, "secret": secret,
        })),
    ))
}

/// Changes an endpoint's URL, event types, description, or enables /
/// disables it (enabling also closes its breaker).
#[utoipa::path(patch, path = "/admin/v1/webhook-endpoints/{endpointId}", tag = "admin",
    params(("endpointId" = i64, Path)), request_body = Object,
    responses((status = 200, description = "The endpoint", body = Object),
        (status = 404, description = "No such endpoint")))]
pub async fn update_endpoint(
    State(state): State<AppState>,
    AuthUser(caller): AuthUser,
    Database(db): Database,
    Path(id): Path<String>,
    AppJson(body): AppJson<Value>,
) -> ApiResult<Json<Value>> {
    let id = parse_id(&id)?;
    let change: ChangeEndpoint = parse_body(&body)?;
    let url = change
        .url
        .as_deref()
        .map(|u| check_url(&state, u))
        .transpose()?;
    let types = change
        .event_types
        .as_deref()
        .map(check_event_types)
        .transpose()?;
    let patch = EndpointPatch {
        url: url.as_deref(),
        description: change.description.as_deref(),
        event_types: types.as_deref(),
        enabled: change.enabled,
    };
    let operator = caller.identity.as_str();
    write_tx!(&db, |tx| {
        if !update_row(tx.db(), id, &patch).await? {
            return Err(ApiError::NotFound);
        }
        append_audit(
            tx.db(),
            operator,
            "webhook.endpoint.update",
            &format!("webhook-endpoint:{id}"),
            &audited_params(&body, operator),
        )
        .await?;
        Ok::<_, ApiError>(())
    })
    .await?;
    let row = get_endpoint(&db, id).await?.ok_or(ApiError::NotFound)?;
    Ok(Json(view(&row)))
}

/// Deletes an endpoint and its delivery log.
#[utoipa::path(delete, path = "/admin/v1/webhook-endpoints/{endpointId}", tag = "admin",
    params(("endpointId" = i64, Path)),
    responses((status = 204, description = "Deleted"), (status = 404, description = "No such endpoint")))]
pub async fn delete_endpoint(
    AuthUser(caller): AuthUser,
    Database(db): Database,
    Path(id): Path<String>,
) -> ApiResult<StatusCode> {
    let id = parse_id(&id)?;
    let operator = caller.identity.as_str();
    write_tx!(&db, |tx| {
        if !delete_row(tx.db(), id).await? {
            return Err(ApiError::NotFound);
        }
        append_audit(
            tx.db(),
            operator,
            "webhook.endpoint.delete",
            &format!("webhook-endpoint:{id}"),
            &audited_params(&json!({}), operator),
        )
        .await?;
        Ok::<_, ApiError>(())
    })
    .await?;
    Ok(StatusCode::NO_CONTENT)
}

/// A new secret, shown only in this answer. The old one keeps signing (next
/// to the new one) for `webhooks.secret_grace`.
#[utoipa::path(post, path = "/admin/v1/webhook-endpoints/{endpointId}/rotate", tag = "admin",
    params(("endpointId" = i64, Path)), request_body = Object,
    responses((status = 200, description = "`{id, secret, previousSecretValidUntil}`", body = Object),
        (status = 404, description = "No such endpoint")))]
pub async fn rotate(
    State(state): State<AppState>,
    AuthUser(caller): AuthUser,
    Database(db): Database,
    Path(id): Path<String>,
    AppJson(body): AppJson<Value>,
) -> ApiResult<Json<Value>> {
    let id = parse_id(&id)?;
    let grace = state.config.current().webhooks.secret_grace;
    let secret = WebhookSecret::generate().expose();
    let operator = caller.identity.as_str();
    write_tx!(&db, |tx| {
        if !rotate_secret(tx.db(), id, &secret, grace).await? {
            return Err(ApiError::NotFound);
        }
        append_audit(
            tx.db(),
            operator,
            "webhook.endpoint.rotate",
            &format!("webhook-endpoint:{id}"),
            &audited_params(&body, operator),
        )
        .await?;
        Ok::<_, ApiError>(())
    })
    .await?;
    let row = get_endpoint(&db, id).await?.ok_or(ApiError::NotFound)?;
    Ok(Json(json!({
        "id": id,
        "secret": secret,
        "previousSecretValidUntil": row.previous_secret_until.map(rfc3339),
    })))
}

/// An endpoint's deliveries, newest first.
#[utoipa::path(get, path = "/admin/v1/webhook-endpoints/{endpointId}/deliveries", tag = "admin",
    params(("endpointId" = i64, Path), DeliveryQuery),
    responses((status = 200, description = "`{items: [delivery], nextCursor}`", body = Object),
        (status = 404, description = "No such endpoint")))]
pub async fn list_deliveries(
    Database(db): Database,
    Path(id): Path<String>,
    AppQuery(query): AppQuery<DeliveryQuery>,
) -> ApiResult<Json<Value>> {
    let id = parse_id(&id)?;
    get_endpoint(&db, id).await?.ok_or(ApiError::NotFound)?;
    let page = PageRequest::parse(query.cursor.as_deref(), query.limit, DEFAULT_PAGE, MAX_PAGE)?;
    let mut rows = list_for_endpoint(&db, id, page.before, page.fetch_limit()).await?;
    let next_cursor = page.finish(&mut rows, |d| d.id);
    let items: Vec<Value> = rows.iter().map(delivery_view).collect();
    Ok(Json(json!({ "items": items, "nextCursor": next_cursor })))
}

/// Sends a finished delivery (delivered, failed or silent) again, with the
/// same `webhook-id` and body and a fresh retry schedule.
#[utoipa::path(post, path = "/admin/v1/webhook-deliveries/{deliveryId}/redeliver", tag = "admin",
    params(("deliveryId" = i64, Path)), request_body = Object,
    responses((status = 200, description = "`{code: OK}`", body = Object),
        (status = 404, description = "No such delivery"),
        (status = 409, description = "It is still queued or being sent")))]
pub async fn redeliver(
    AuthUser(caller): AuthUser,
    Database(db): Database,
    Path(id): Path<String>,
    AppJson(body): AppJson<Value>,
) -> ApiResult<Json<Value>> {
    let id = parse_id(&id)?;
    let operator = caller.identity.as_str();
    let requeued = write_tx!(&db, |tx| {
        if !requeue(tx.db(), id).await? {
            return Ok(false);
        }
        append_audit(
            tx.db(),
            operator,
            "webhook.delivery.redeliver",
            &format!("webhook-delivery:{id}"),
            &audited_params(&body, operator),
        )
        .await?;
        Ok::<_, ApiError>(true)
    })
    .await?;
    if !requeued {
        return match crate::db::webhook_deliveries::get_delivery(&db, id).await? {
            None => Err(ApiError::NotFound),
            Some(_) => Err(ApiError::Conflict(
                "the delivery is still queued or being sent",
            )),
        };
    }
    Ok(Json(json!({ "code": "OK" })))
}
