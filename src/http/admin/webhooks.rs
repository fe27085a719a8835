//! Operators and outbound webhooks (SPEC §2.3, §9): endpoints
//! (`/admin/v1/webhook-endpoints`: list, create, change, delete, rotate the
//! secret), an endpoint's delivery log, and redelivery by hand. A secret is
//! shown only in the answers to create and rotate, never stored in the audit
//! log and never logged. Every change is audited.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde::de::IgnoredAny;
use serde::{Deserialize, Serialize};
use serde_json::json;
use utoipa::openapi::schema::{
    Array, ArrayBuilder, Object, ObjectBuilder, SchemaFormat, SchemaType, Type,
};

use super::attempt::Attempt;
use super::bodies::{OptionalReason, audited};
use super::ok::Done;
use super::webhook_views::{
    CreatedEndpoint, DeliveryPage, DeliveryView, EndpointList, EndpointView, RotatedSecret,
};
use crate::db::Db;
use crate::db::audit::{append_audit, audited_params};
use crate::db::webhook_deliveries::{get_delivery, list_for_endpoint, redeliver as requeue};
use crate::db::webhook_endpoints::{
    EndpointPatch, delete_endpoint as delete_row, encode_event_types, get_endpoint,
    insert_endpoint, list_endpoints as list_rows, rotate_secret, update_endpoint as update_row,
};
use crate::http::api::status::rfc3339;
use crate::http::error::{ApiError, ApiResult};
use crate::http::extract::{AppJson, AppQuery, AuthUser, Database};
use crate::http::page::PageRequest;
use crate::sealing::KeyRing;
use crate::signature::WebhookSecret;
use crate::state::AppState;
use crate::webhooks::target;
use crate::write_tx;

/// The audited action of registering an endpoint.
const CREATE: &str = "webhook.endpoint.create";
const DEFAULT_PAGE: u32 = 50;
const MAX_PAGE: u32 = 200;
const MAX_EVENT_TYPES: usize = 20;
/// 20 names of 48 characters, stored as `,a,b,`, fit the 1000 characters
/// the column holds.
const MAX_EVENT_TYPE_CHARS: usize = 48;
/// What the `url` column holds.
const MAX_URL_CHARS: usize = 2048;
/// What the `description` column holds.
const MAX_DESCRIPTION_CHARS: usize = 500;

/// A new endpoint.
#[derive(Debug, Deserialize, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NewEndpoint {
    #[schema(schema_with = url_schema)]
    url: String,
    /// The event types to send; none or absent: every type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(schema_with = event_types_schema)]
    event_types: Option<Vec<String>>,
    /// What it is for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(max_length = 500)]
    description: Option<String>,
    #[serde(rename = "__authenticatedOperator", default, skip_serializing)]
    #[schema(ignore)]
    _operator: Option<IgnoredAny>,
}

/// A change to an endpoint: only the fields given change.
#[derive(Debug, Deserialize, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ChangeEndpoint {
    /// As for a new endpoint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(schema_with = optional_url_schema)]
    url: Option<String>,
    /// As for a new endpoint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(schema_with = event_types_schema)]
    event_types: Option<Vec<String>>,
    /// As for a new endpoint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(max_length = 500)]
    description: Option<String>,
    /// Enabling also closes its circuit breaker.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    enabled: Option<bool>,
    #[serde(rename = "__authenticatedOperator", default, skip_serializing)]
    #[schema(ignore)]
    _operator: Option<IgnoredAny>,
}

fn url_schema() -> Object {
    url_schema_of(Type::String.into())
}

fn optional_url_schema() -> Object {
    url_schema_of(SchemaType::from_iter([Type::String, Type::Null]))
}

fn url_schema_of(types: SchemaType) -> Object {
    ObjectBuilder::new()
        .schema_type(types)
        .description(Some(
            "Where to send: http or https, at most 2048 characters; not a loopback or \
             private address unless `webhooks.allow_private_targets`",
        ))
        .format(Some(SchemaFormat::Custom("uri".to_owned())))
        .max_length(Some(MAX_URL_CHARS))
        .build()
}

/// Up to 20 names of letters, digits, `.`, `_` and `-` (null as good as absent).
fn event_types_schema() -> Array {
    let name = ObjectBuilder::new()
        .schema_type(Type::String)
        .pattern(Some(format!(
            "^[A-Za-z0-9._-]{{1,{MAX_EVENT_TYPE_CHARS}}}$"
        )));
    ArrayBuilder::new()
        .schema_type(SchemaType::from_iter([Type::Array, Type::Null]))
        .items(name)
        .max_items(Some(MAX_EVENT_TYPES))
        .build()
}

/// Delivery log page.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct DeliveryQuery {
    /// `nextCursor` of the previous page.
    #[param(pattern = r"^[0-9]{1,18}$")]
    cursor: Option<String>,
    /// Page size, 1 to 200 (default 50).
    #[param(minimum = 1, maximum = 200)]
    limit: Option<u32>,
}

fn parse_id(text: &str) -> ApiResult<i64> {
    text.parse().map_err(|_| ApiError::NotFound)
}

fn check_event_types(types: &[String]) -> ApiResult<String> {
    let valid = |t: &String| {
        !t.is_empty()
            && t.len() <= MAX_EVENT_TYPE_CHARS
            && t.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
    };
    if types.len() > MAX_EVENT_TYPES || !types.iter().all(valid) {
        return Err(ApiError::InvalidArgument(
            "field `eventTypes`: at most 20 names of 1 to 48 letters, digits, '.', '_' and '-'"
                .to_owned(),
        ));
    }
    Ok(encode_event_types(types))
}

fn check_url(state: &AppState, url: &str) -> ApiResult<String> {
    let too_long = || ApiError::InvalidArgument("field `url`: at most 2048 characters".to_owned());
    if url.chars().count() > MAX_URL_CHARS {
        return Err(too_long());
    }
    let allow_private = state.config.current().webhooks.allow_private_targets;
    let url = target::validate(url, allow_private)
        .map(|url| url.to_string())
        .map_err(ApiError::InvalidArgument)?;
    // Normalising may lengthen it (percent-encoding, punycode).
    if url.chars().count() > MAX_URL_CHARS {
        return Err(too_long());
    }
    Ok(url)
}

/// The keys new secrets are sealed with; without them no secret is stored.
fn sealing_keys(state: &AppState) -> ApiResult<&KeyRing> {
    state.sealing.as_deref().ok_or(ApiError::Conflict(
        "webhooks.secret_key is not set: webhook secrets are stored sealed under it; set it and restart",
    ))
}

fn check_description(description: &str) -> ApiResult<()> {
    if description.chars().count() > MAX_DESCRIPTION_CHARS {
        return Err(ApiError::InvalidArgument(
            "field `description`: at most 500 characters".to_owned(),
        ));
    }
    Ok(())
}

/// Every endpoint (secrets never shown).
#[utoipa::path(get, path = "/admin/v1/webhook-endpoints", tag = "admin", operation_id = "list_webhook_endpoints",
    responses((status = 200, description = "Every endpoint", body = EndpointList)))]
pub async fn list_endpoints(Database(db): Database) -> ApiResult<Json<EndpointList>> {
    let items = list_rows(&db)
        .await?
        .iter()
        .map(EndpointView::from)
        .collect();
    Ok(Json(EndpointList { items }))
}

/// Registers an endpoint. The answer holds its secret, shown only here.
#[utoipa::path(post, path = "/admin/v1/webhook-endpoints", tag = "admin", operation_id = "create_webhook_endpoint",
    request_body = NewEndpoint,
    responses((status = 201, description = "The endpoint, with its secret", body = CreatedEndpoint),
        (status = 400, description = "INVALID_ARGUMENT: a URL, event types or description not allowed"),
        (status = 409, description = "CONFLICT: `webhooks.secret_key` is not set, so no secret can be stored")))]
pub async fn create_endpoint(
    State(state): State<AppState>,
    AuthUser(caller): AuthUser,
    Database(db): Database,
    AppJson(body): AppJson<NewEndpoint>,
) -> ApiResult<(StatusCode, Json<CreatedEndpoint>)> {
    let url = check_url(&state, &body.url)?;
    let types = body.event_types.clone().unwrap_or_default();
    let stored_types = check_event_types(&types)?;
    let description = body.description.clone().unwrap_or_default();
    check_description(&description)?;
    let operator = caller.identity.as_str();
    let params = audited(&body, operator);
    // The endpoint has no id before it is stored: a refused creation is
    // audited on the collection.
    let keys = Attempt::new(operator, CREATE, "webhook-endpoints", params.clone())
        .refusal_audited(&db, sealing_keys(&state))
        .await?;
    let secret = WebhookSecret::generate().expose();
    let sealed = keys.seal(&secret);
    let id = write_tx!(&db, |tx| {
        let id = insert_endpoint(tx.db(), &url, &description, &stored_types, &sealed).await?;
        append_audit(
            tx.db(),
            operator,
            CREATE,
            &format!("webhook-endpoint:{id}"),
            &params,
        )
        .await?;
        Ok::<_, ApiError>(id)
    })
    .await?;
    Ok((
        StatusCode::CREATED,
        Json(CreatedEndpoint {
            id,
            url,
            event_types: types,
            description,
            secret,
        }),
    ))
}

/// Changes an endpoint's URL, event types, description, or enables /
/// disables it (enabling also closes its breaker).
#[utoipa::path(patch, path = "/admin/v1/webhook-endpoints/{endpointId}", tag = "admin", operation_id = "update_webhook_endpoint",
    params(("endpointId" = i64, Path, description = "The endpoint id")), request_body = ChangeEndpoint,
    responses((status = 200, description = "The endpoint", body = EndpointView),
        (status = 404, description = "NOT_FOUND: no such endpoint")))]
pub async fn update_endpoint(
    State(state): State<AppState>,
    AuthUser(caller): AuthUser,
    Database(db): Database,
    Path(id): Path<String>,
    AppJson(change): AppJson<ChangeEndpoint>,
) -> ApiResult<Json<EndpointView>> {
    let id = parse_id(&id)?;
    if let Some(description) = &change.description {
        check_description(description)?;
    }
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
            &audited(&change, operator),
        )
        .await?;
        Ok::<_, ApiError>(())
    })
    .await?;
    let row = get_endpoint(&db, id).await?.ok_or(ApiError::NotFound)?;
    Ok(Json(EndpointView::from(&row)))
}

/// Deletes an endpoint and its delivery log.
#[utoipa::path(delete, path = "/admin/v1/webhook-endpoints/{endpointId}", tag = "admin", operation_id = "delete_webhook_endpoint",
    params(("endpointId" = i64, Path, description = "The endpoint id")),
    responses((status = 204, description = "Deleted"), (status = 404, description = "NOT_FOUND: no such endpoint")))]
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
#[utoipa::path(post, path = "/admin/v1/webhook-endpoints/{endpointId}/rotate", tag = "admin", operation_id = "rotate_webhook_secret",
    params(("endpointId" = i64, Path, description = "The endpoint id")), request_body = OptionalReason,
    responses((status = 200, description = "The new secret", body = RotatedSecret),
        (status = 404, description = "NOT_FOUND: no such endpoint"),
        (status = 409, description = "CONFLICT: `webhooks.secret_key` is not set, so no secret can be stored")))]
pub async fn rotate(
    State(state): State<AppState>,
    AuthUser(caller): AuthUser,
    Database(db): Database,
    Path(id): Path<String>,
    AppJson(body): AppJson<OptionalReason>,
) -> ApiResult<Json<RotatedSecret>> {
    let id = parse_id(&id)?;
    body.reason()?;
    let grace = state.config.current().webhooks.secret_grace;
    let operator = caller.identity.as_str();
    let attempt = Attempt::new(
        operator,
        "webhook.endpoint.rotate",
        format!("webhook-endpoint:{id}"),
        audited(&body, operator),
    );
    let keys = attempt.refusal_audited(&db, sealing_keys(&state)).await?;
    let secret = WebhookSecret::generate().expose();
    let sealed = keys.seal(&secret);
    write_tx!(&db, |tx| {
        if !rotate_secret(tx.db(), id, &sealed, grace).await? {
            return Err(ApiError::NotFound);
        }
        attempt.done(tx.db()).await?;
        Ok::<_, ApiError>(())
    })
    .await?;
    let row = get_endpoint(&db, id).await?.ok_or(ApiError::NotFound)?;
    Ok(Json(RotatedSecret {
        id,
        secret,
        previous_secret_valid_until: row.previous_secret_until.map(rfc3339),
    }))
}

/// An endpoint's deliveries, newest first.
#[utoipa::path(get, path = "/admin/v1/webhook-endpoints/{endpointId}/deliveries", tag = "admin", operation_id = "list_webhook_deliveries",
    params(("endpointId" = i64, Path, description = "The endpoint id"), DeliveryQuery),
    responses((status = 200, description = "A page of deliveries", body = DeliveryPage),
        (status = 400, description = "INVALID_ARGUMENT: a bad cursor or limit"),
        (status = 404, description = "NOT_FOUND: no such endpoint")))]
pub async fn list_deliveries(
    Database(db): Database,
    Path(id): Path<String>,
    AppQuery(query): AppQuery<DeliveryQuery>,
) -> ApiResult<Json<DeliveryPage>> {
    let id = parse_id(&id)?;
    get_endpoint(&db, id).await?.ok_or(ApiError::NotFound)?;
    let page = PageRequest::parse(query.cursor.as_deref(), query.limit, DEFAULT_PAGE, MAX_PAGE)?;
    let mut rows = list_for_endpoint(&db, id, page.before, page.fetch_limit()).await?;
    let next_cursor = page.finish(&mut rows, |d| d.id);
    let items = rows.iter().map(DeliveryView::from).collect();
    Ok(Json(DeliveryPage { items, next_cursor }))
}

/// Sends a finished delivery (delivered, failed or silent) again, with the
/// same `webhook-id` and body and a fresh retry schedule.
#[utoipa::path(post, path = "/admin/v1/webhook-deliveries/{deliveryId}/redeliver", tag = "admin", operation_id = "redeliver_webhook",
    params(("deliveryId" = i64, Path, description = "The delivery id")), request_body = OptionalReason,
    responses((status = 200, description = "Queued again", body = Done),
        (status = 404, description = "NOT_FOUND: no such delivery"),
        (status = 409, description = "CONFLICT: it is still queued or being sent")))]
pub async fn redeliver(
    AuthUser(caller): AuthUser,
    Database(db): Database,
    Path(id): Path<String>,
    AppJson(body): AppJson<OptionalReason>,
) -> ApiResult<Json<Done>> {
    let id = parse_id(&id)?;
    body.reason()?;
    let operator = caller.identity.as_str();
    let attempt = Attempt::new(
        operator,
        "webhook.delivery.redeliver",
        format!("webhook-delivery:{id}"),
        audited(&body, operator),
    );
    let redelivered = attempt_redelivery(&db, &attempt, id).await;
    attempt.refusal_audited(&db, redelivered).await
}

async fn attempt_redelivery(db: &Db, attempt: &Attempt<'_>, id: i64) -> ApiResult<Json<Done>> {
    let requeued = write_tx!(db, |tx| {
        if !requeue(tx.db(), id).await? {
            return Ok(false);
        }
        attempt.done(tx.db()).await?;
        Ok::<_, ApiError>(true)
    })
    .await?;
    if !requeued {
        return match get_delivery(db, id).await? {
            None => Err(ApiError::NotFound),
            Some(_) => Err(ApiError::Conflict(
                "the delivery is still queued or being sent",
            )),
        };
    }
    Ok(Json(Done::OK))
}
