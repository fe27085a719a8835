//! What the OpenAPI document says beyond each handler's annotations, derived
//! from how the route is served: the security schemes, the error schema,
//! and the errors a route answers because of its layers and extractors
//! (authorization, rate limit, JSON body, path lookups, timeouts), so no
//! handler has to repeat them and none can forget them.

use utoipa::openapi::header::HeaderBuilder;
use utoipa::openapi::path::{Operation, ParameterIn, PathItem, Paths};
use utoipa::openapi::security::{
    ApiKey, ApiKeyValue, HttpAuthScheme, HttpBuilder, SecurityRequirement, SecurityScheme,
};
use utoipa::openapi::{ContentBuilder, OpenApi, Ref, RefOr, Response, ResponseBuilder};
use utoipa::{Modify, PartialSchema, ToSchema};

use crate::http::error::ErrorBody;
use crate::http::layers::RouteSpec;

/// The security scheme of the auth proxy's user header.
const PROXY_USER: &str = "proxyUser";
/// The security scheme of bearer JWTs.
const BEARER: &str = "bearerJwt";
/// The name of the error schema.
const ERROR_SCHEMA: &str = "Error";

/// Adds the security schemes and the error schema to the document.
pub struct SharedComponents;

impl Modify for SharedComponents {
    fn modify(&self, openapi: &mut OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components
            .schemas
            .insert(ERROR_SCHEMA.to_owned(), ErrorBody::schema());
        // The schemas the error schema refers to (a field error).
        let mut referred = Vec::new();
        <ErrorBody as ToSchema>::schemas(&mut referred);
        components.schemas.extend(referred);
        components.add_security_scheme(
            PROXY_USER,
            SecurityScheme::ApiKey(ApiKey::Header(ApiKeyValue::with_description(
                "X-Auth-Request-User",
                "The user, as the authenticating proxy in front of changegate names them \
                 (`identity.user_header`); honoured only from `identity.trusted_proxies`.",
            ))),
        );
        components.add_security_scheme(
            BEARER,
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .bearer_format("JWT")
                    .description(Some(
                        "A JWT signed with a key of `[identity]` (HS256 or RS256).",
                    ))
                    .build(),
            ),
        );
    }
}

/// What every guarded route answers besides its own answers: the identity
/// (either scheme), the authorization, the route's rate limit, and a JSON
/// body's content type.
pub fn describe_guarded(paths: &mut Paths, spec: &RouteSpec) {
    for operation in operations(paths) {
        operation.security = Some(vec![
            SecurityRequirement::new(PROXY_USER, Vec::<String>::new()),
            SecurityRequirement::new(BEARER, Vec::<String>::new()),
        ]);
        add_error(
            operation,
            "401",
            "UNAUTHENTICATED: no valid bearer token and no user header from a trusted proxy",
        );
        add_error(operation, "403", "FORBIDDEN: Access denied");
        if spec.rate_limit.is_some() {
            add_error(
                operation,
                "429",
                "RATE_LIMITED: over the route's limit per minute",
            );
        }
        if operation.request_body.is_some() {
            add_error(
                operation,
                "415",
                "UNSUPPORTED_MEDIA_TYPE: the body is not application/json",
            );
        }
    }
}

/// What every route answers besides its own answers: a bad body, a path
/// naming nothing, an internal error, a database not there or a request
/// over time; every answer carries `x-request-id`, every error the error
/// schema.
pub fn describe_every_route(document: &mut OpenApi) {
    for operation in operations(&mut document.paths) {
        if operation.request_body.is_some() {
            add_error(
                operation,
                "400",
                "INVALID_ARGUMENT: the body is not one JSON object of this shape; the message names the field",
            );
            add_error(
                operation,
                "413",
                "PAYLOAD_TOO_LARGE: the body is over 64 KiB",
            );
        }
        let in_path = operation.parameters.iter().flatten().any(|parameter| {
            matches!(parameter, RefOr::T(parameter) if parameter.parameter_in == ParameterIn::Path)
        });
        if in_path {
            add_error(operation, "404", "NOT_FOUND: nothing at this path");
        }
        add_error(operation, "500", "INTERNAL: an unexpected error (logged)");
        add_error(
            operation,
            "503",
            "NOT_READY or DATABASE_UNAVAILABLE (with Retry-After): retry shortly; \
             TIMEOUT: over `server.request_timeout`",
        );
        for response in operation.responses.responses.iter_mut() {
            if let (status, RefOr::T(response)) = response {
                complete(status, response);
            }
        }
    }
}

/// Adds an error answer, unless the annotations describe that status already.
fn add_error(operation: &mut Operation, status: &str, description: &str) {
    operation
        .responses
        .responses
        .entry(status.to_owned())
        .or_insert_with(|| ResponseBuilder::new().description(description).into());
}

/// The request id on every answer, and the error schema on every error
/// answer that does not name a body of its own.
fn complete(status: &str, response: &mut Response) {
    response
        .headers
        .entry("x-request-id".to_owned())
        .or_insert_with(|| {
            HeaderBuilder::new()
                .schema(Some(String::schema()))
                .description(Some("The caller's request id, or a new UUID"))
                .build()
                .into()
        });
    let is_error = status.starts_with('4') || status.starts_with('5');
    if is_error && response.content.is_empty() {
        response.content.insert(
            "application/json".to_owned(),
            ContentBuilder::new()
                .schema(Some(Ref::from_schema_name(ERROR_SCHEMA)))
                .build()
                .into(),
        );
    }
}

fn operations(paths: &mut Paths) -> impl Iterator<Item = &mut Operation> {
    paths.paths.values_mut().flat_map(|item: &mut PathItem| {
        [
            &mut item.get,
            &mut item.put,
            &mut item.post,
            &mut item.delete,
            &mut item.patch,
        ]
        .into_iter()
        .flatten()
    })
}

/// Marks every operation of `path` deprecated: a route kept for one more
/// release as an alias of its replacement.
pub fn deprecate(document: &mut OpenApi, path: &str) {
    if let Some(item) = document.paths.paths.get_mut(path) {
        for operation in [&mut item.get, &mut item.post].into_iter().flatten() {
            operation.deprecated = Some(utoipa::openapi::Deprecated::True);
        }
    }
}
