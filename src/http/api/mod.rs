//! The requester API, `/api/v1` (SPEC §2.1), and its OpenAPI document.

mod access;
pub mod applications;
mod bindings;
mod catalog;
mod document;
pub(crate) mod preview;
mod queue;
mod revert;
pub(crate) mod status;
pub(crate) mod submission;
mod timeline;
mod withdraw;

use axum::Router;
use utoipa::OpenApi;
use utoipa_axum::router::{OpenApiRouter, UtoipaMethodRouter};
use utoipa_axum::routes;

use self::document::SharedComponents;
use super::layers::{RateLimitSpec, RouteSpec, guard};
use crate::state::AppState;

const APPLY: RouteSpec = RouteSpec {
    name: "apply",
    rate_limit: Some(RateLimitSpec {
        bucket: "apply",
        default_limit: 10,
        message: "too many applications; wait a minute before applying again",
    }),
    activity: Some("apply"),
};
const CLOSE: RouteSpec = RouteSpec {
    name: "close",
    rate_limit: Some(RateLimitSpec {
        bucket: "close",
        default_limit: 10,
        message: "too many removal requests; wait a minute before trying again",
    }),
    activity: Some("close"),
};
/// A revert is a new request: the `apply` rule, and the applications' limit.
const REVERT: RouteSpec = RouteSpec {
    name: "apply",
    rate_limit: Some(RateLimitSpec {
        bucket: "apply",
        default_limit: 10,
        message: "too many applications; wait a minute before applying again",
    }),
    activity: Some("revert"),
};
/// Withdrawing one's own request before it lands: the `apply` rule.
const WITHDRAW: RouteSpec = RouteSpec {
    name: "apply",
    rate_limit: None,
    activity: Some("withdraw"),
};
/// Previews of an apply or a close: the `read` rule (the submit's own rule
/// is reported as a blocker), a limit of their own, typed as the user types,
/// no business activity.
const PREVIEW: RouteSpec = RouteSpec {
    name: "read",
    rate_limit: Some(RateLimitSpec {
        bucket: "preview",
        default_limit: 120,
        message: "too many previews; wait a minute before previewing again",
    }),
    activity: None,
};
/// Operator actions: the `operator` rule, counted as business activity.
const ADMIN_APPROVE: RouteSpec = RouteSpec {
    name: "operator",
    rate_limit: None,
    activity: Some("admin.approve"),
};
const ADMIN_REJECT: RouteSpec = RouteSpec {
    name: "operator",
    rate_limit: None,
    activity: Some("admin.reject"),
};

const ADMIN_RETRY: RouteSpec = RouteSpec {
    name: "operator",
    rate_limit: None,
    activity: Some("admin.retry"),
};
const ADMIN_FORCE_FAIL: RouteSpec = RouteSpec {
    name: "operator",
    rate_limit: None,
    activity: Some("admin.force_fail"),
};
const ADMIN_DRIFT_REPAIR: RouteSpec = RouteSpec {
    name: "operator",
    rate_limit: None,
    activity: Some("admin.drift_repair"),
};
const ADMIN_URGENT: RouteSpec = RouteSpec {
    name: "operator",
    rate_limit: None,
    activity: Some("admin.urgent"),
};
const ADMIN_BATCH_RUN: RouteSpec = RouteSpec {
    name: "operator",
    rate_limit: None,
    activity: Some("admin.batch_run"),
};
const ADMIN_BATCH_FREEZE: RouteSpec = RouteSpec {
    name: "operator",
    rate_limit: None,
    activity: Some("admin.batch_freeze"),
};
const ADMIN_BATCH_SETTLE: RouteSpec = RouteSpec {
    name: "operator",
    rate_limit: None,
    activity: Some("admin.batch_settle"),
};
const ADMIN_RECONCILE: RouteSpec = RouteSpec {
    name: "operator",
    rate_limit: None,
    activity: Some("admin.reconcile"),
};
const ADMIN_WEBHOOKS: RouteSpec = RouteSpec {
    name: "operator",
    rate_limit: None,
    activity: Some("admin.webhooks"),
};
/// Operator reads: the `operator` rule, no business activity.
const ADMIN_READ: RouteSpec = RouteSpec {
    name: "operator",
    rate_limit: None,
    activity: None,
};

/// Every read route: the `read` rule, no limit, no business activity.
const READ: RouteSpec = RouteSpec {
    name: "read",
    rate_limit: None,
    activity: None,
};

#[derive(OpenApi)]
#[openapi(
    info(title = "changegate", description = "Self-service configuration changes through GitLab"),
    tags((name = "requests", description = "The requester API"),
        (name = "callbacks", description = "Signed callbacks from the approval system and the deploy pipeline"),
        (name = "admin", description = "Operator actions, audited")),
    modifiers(&SharedComponents),
)]
struct ApiDoc;

fn guarded(
    state: &AppState,
    spec: &'static RouteSpec,
    route: UtoipaMethodRouter<AppState>,
) -> UtoipaMethodRouter<AppState> {
    let (schemas, mut paths, method_router) = route;
    document::describe_guarded(&mut paths, spec);
    (schemas, paths, guard(state, spec, method_router))
}

/// The requester routes, each behind its layers, and the callback routes,
/// with the document that describes exactly these routes (generated from
/// them, so it cannot drift).
pub fn router(state: &AppState) -> (Router<AppState>, utoipa::openapi::OpenApi) {
    let (router, mut document) = OpenApiRouter::with_openapi(ApiDoc::openapi())
        .routes(guarded(state, &APPLY, routes!(applications::apply)))
        .routes(guarded(state, &CLOSE, routes!(applications::close)))
        .routes(guarded(state, &READ, routes!(status::get_operation_status)))
        .routes(guarded(state, &READ, routes!(timeline::get_timeline)))
        .routes(guarded(state, &READ, routes!(bindings::list_my_bindings)))
        .routes(guarded(state, &READ, routes!(catalog::list_targets)))
        .routes(guarded(state, &PREVIEW, routes!(preview::preview_apply)))
        .routes(guarded(state, &PREVIEW, routes!(preview::preview_close)))
        .routes(guarded(state, &READ, routes!(catalog::preview)))
        .routes(guarded(state, &READ, routes!(access::get_access)))
        .routes(guarded(
            state,
            &ADMIN_APPROVE,
            routes!(super::admin::approvals::approve),
        ))
        .routes(guarded(
            state,
            &ADMIN_REJECT,
            routes!(super::admin::approvals::reject),
        ))
        .routes(guarded(
            state,
            &ADMIN_READ,
            routes!(super::admin::operations::list),
        ))
        .routes(guarded(
            state,
            &ADMIN_READ,
            routes!(super::admin::overview::get_overview),
        ))
        .routes(guarded(
            state,
            &ADMIN_READ,
            routes!(super::admin::audit::list),
        ))
        .routes(guarded(
            state,
            &ADMIN_READ,
            routes!(super::admin::config::get_config),
        ))
        .routes(guarded(
            state,
            &ADMIN_READ,
            routes!(super::admin::health::get_dependencies),
        ))
        .routes(guarded(
            state,
            &ADMIN_READ,
            routes!(super::admin::batches::list),
        ))
        .routes(guarded(
            state,
            &ADMIN_READ,
            routes!(super::admin::batches::get_one),
        ))
        .routes(guarded(
            state,
            &ADMIN_BATCH_RUN,
            routes!(super::admin::batches::run),
        ))
        .routes(guarded(
            state,
            &ADMIN_BATCH_FREEZE,
            routes!(super::admin::batches::freeze),
        ))
        .routes(guarded(
            state,
            &ADMIN_BATCH_SETTLE,
            routes!(super::admin::batches::settle),
        ))
        .routes(guarded(
            state,
            &ADMIN_RECONCILE,
            routes!(super::admin::reconcile::run),
        ))
        .routes(guarded(
            state,
            &ADMIN_RETRY,
            routes!(super::admin::operations::retry),
        ))
        .routes(guarded(
            state,
            &ADMIN_FORCE_FAIL,
            routes!(super::admin::operations::force_fail),
        ))
        .routes(guarded(
            state,
            &ADMIN_READ,
            routes!(super::admin::drift::list),
        ))
        .routes(guarded(
            state,
            &ADMIN_READ,
            routes!(super::admin::drift::diff),
        ))
        .routes(guarded(
            state,
            &ADMIN_DRIFT_REPAIR,
            routes!(super::admin::drift::repair),
        ))
        .routes(guarded(
            state,
            &ADMIN_DRIFT_REPAIR,
            routes!(super::admin::drift::restore),
        ))
        .routes(guarded(
            state,
            &ADMIN_URGENT,
            routes!(super::admin::urgent::mark_urgent_request),
        ))
        .routes(guarded(state, &REVERT, routes!(revert::revert_operation)))
        .routes(guarded(state, &PREVIEW, routes!(revert::preview_revert)))
        .routes(guarded(
            state,
            &WITHDRAW,
            routes!(withdraw::withdraw_operation),
        ))
        .routes(guarded(
            state,
            &ADMIN_READ,
            routes!(super::admin::webhooks::list_endpoints),
        ))
        .routes(guarded(
            state,
            &ADMIN_WEBHOOKS,
            routes!(super::admin::webhooks::create_endpoint),
        ))
        .routes(guarded(
            state,
            &ADMIN_WEBHOOKS,
            routes!(super::admin::webhooks::update_endpoint),
        ))
        .routes(guarded(
            state,
            &ADMIN_WEBHOOKS,
            routes!(super::admin::webhooks::delete_endpoint),
        ))
        .routes(guarded(
            state,
            &ADMIN_WEBHOOKS,
            routes!(super::admin::webhooks::rotate),
        ))
        .routes(guarded(
            state,
            &ADMIN_READ,
            routes!(super::admin::webhooks::list_deliveries),
        ))
        .routes(guarded(
            state,
            &ADMIN_WEBHOOKS,
            routes!(super::admin::webhooks::redeliver),
        ))
        // Callbacks are not guarded: they authenticate by signature.
        .merge(super::callbacks::router(state))
        .split_for_parts();
    document::describe_every_route(&mut document);
    // Replaced by POST /api/v1/applications/preview; kept for one release.
    document::deprecate(&mut document, "/api/v1/preview");
    (router, document)
}
