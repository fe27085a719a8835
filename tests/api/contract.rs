//! The API contract: the OpenAPI document says what every route takes and
//! answers, and the server holds to it (405s, trailing JSON, ranges and
//! lengths the document states).

use std::collections::HashSet;

use serde_json::{Value, json};

use crate::helpers::{TestApp, each_backend, sqlite_db};
use crate::requests::requester_app;
use crate::webhooks::SEALING_KEY;

const METHODS: [&str; 5] = ["get", "put", "post", "delete", "patch"];

fn operations(document: &Value) -> Vec<(String, &str, &Value)> {
    let mut found = Vec::new();
    for (path, item) in document["paths"].as_object().unwrap() {
        for method in METHODS {
            if let Some(operation) = item.get(method) {
                found.push((path.clone(), method, operation));
            }
        }
    }
    found
}

fn parameter<'a>(operation: &'a Value, name: &str) -> &'a Value {
    operation["parameters"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == name)
        .unwrap_or_else(|| panic!("no parameter {name} in {operation}"))
}

async fn document(app: &TestApp) -> Value {
    app.get("/api/openapi.json").await.json().await.unwrap()
}

#[tokio::test]
async fn the_openapi_document_describes_every_route() {
    let db = sqlite_db().await;
    let app = requester_app(&db.url, "").await;
    let document = document(&app).await;
    let paths = document["paths"].as_object().unwrap();
    for path in [
        "/api/v1/applications",
        "/api/v1/bindings/{targetKey}/close",
        "/api/v1/operations/{operationId}",
        "/api/v1/me/bindings",
        "/api/v1/targets",
        "/api/v1/preview",
        "/api/v1/applications/preview",
        "/api/v1/bindings/{targetKey}/close/preview",
        "/api/v1/access",
        "/callbacks/approval",
        "/callbacks/deploy",
        "/admin/v1/approvals/{operationId}/approve",
        "/admin/v1/approvals/{operationId}/reject",
    ] {
        assert!(
            paths.contains_key(path),
            "{path} missing from {:?}",
            paths.keys()
        );
    }
    assert!(document["components"]["schemas"]["ApplyBody"].is_object());
    let schemas = &document["components"]["schemas"];
    let project = schemas["DeployCallback"]["properties"]["project"].to_string();
    assert!(
        project.contains("Required when the targets span several")
            && project.contains("ProjectName"),
        "{project}"
    );
    assert_eq!(
        schemas["ProjectName"]["oneOf"].as_array().map(Vec::len),
        Some(2),
        "an id or a path: {}",
        schemas["ProjectName"]
    );
}

/// Every `$ref` anywhere in `value`.
fn references(value: &Value, found: &mut Vec<String>) {
    match value {
        Value::Object(fields) => {
            if let Some(Value::String(target)) = fields.get("$ref") {
                found.push(target.clone());
            }
            fields.values().for_each(|field| references(field, found));
        }
        Value::Array(items) => items.iter().for_each(|item| references(item, found)),
        _ => {}
    }
}

#[tokio::test]
async fn every_reference_in_the_document_names_a_schema_it_holds() {
    let db = sqlite_db().await;
    let app = requester_app(&db.url, "").await;
    let document = document(&app).await;
    let mut found = Vec::new();
    references(&document, &mut found);
    assert!(found.len() > 50, "the document refers to its schemas");
    let schemas = &document["components"]["schemas"];
    let dangling: HashSet<&str> = found
        .iter()
        .map(|target| {
            target
                .strip_prefix("#/components/schemas/")
                .unwrap_or_else(|| panic!("a reference outside the schemas: {target}"))
        })
        .filter(|name| !schemas[name].is_object())
        .collect();
    assert!(dangling.is_empty(), "references to no schema: {dangling:?}");
}

#[tokio::test]
async fn every_operation_is_unique_described_and_lists_its_errors_with_the_error_schema() {
    let db = sqlite_db().await;
    let app = requester_app(&db.url, "").await;
    let document = document(&app).await;
    let mut ids = HashSet::new();
    for (path, method, operation) in operations(&document) {
        let label = format!("{method} {path}");
        let id = operation["operationId"].as_str().unwrap();
        assert!(ids.insert(id.to_owned()), "{label}: operationId {id} twice");
        for parameter in operation["parameters"].as_array().into_iter().flatten() {
            if parameter["in"] == "path" {
                let name = parameter["name"].as_str().unwrap();
                assert!(path.contains(&format!("{{{name}}}")), "{label}: {name}");
            }
        }
        let responses = operation["responses"].as_object().unwrap();
        let mut statuses = vec!["500", "503"];
        if !path.starts_with("/callbacks/") {
            statuses.extend(["401", "403"]);
            assert_eq!(
                operation["security"],
                json!([{ "proxyUser": [] }, { "bearerJwt": [] }]),
                "{label}"
            );
        }
        if operation.get("requestBody").is_some() {
            statuses.extend(["400", "413"]);
        }
        if path.contains('{') {
            statuses.push("404");
        }
        for status in statuses {
            assert!(responses.contains_key(status), "{label} lacks {status}");
        }
        for (status, response) in responses {
            assert!(
                response["description"].is_string(),
                "{label} {status} has no description"
            );
            assert!(
                response["headers"]["x-request-id"].is_object(),
                "{label} {status}"
            );
            if status.starts_with('4') || status.starts_with('5') {
                assert_eq!(
                    response["content"]["application/json"]["schema"]["$ref"],
                    "#/components/schemas/Error",
                    "{label} {status}"
                );
            }
        }
        if let Some(body) = operation.get("requestBody") {
            let schema = &body["content"]["application/json"]["schema"];
            assert!(
                schema["$ref"].is_string(),
                "{label}: a typed body, not {schema}"
            );
        }
    }
    let apply = &document["paths"]["/api/v1/applications"]["post"]["responses"];
    for status in ["415", "422", "429"] {
        assert!(apply.get(status).is_some(), "apply lacks {status}");
    }
    let schemes = &document["components"]["securitySchemes"];
    assert_eq!(
        (
            &schemes["proxyUser"]["type"],
            &schemes["proxyUser"]["in"],
            &schemes["proxyUser"]["name"]
        ),
        (
            &json!("apiKey"),
            &json!("header"),
            &json!("X-Auth-Request-User")
        )
    );
    assert_eq!(
        (
            &schemes["bearerJwt"]["type"],
            &schemes["bearerJwt"]["scheme"]
        ),
        (&json!("http"), &json!("bearer"))
    );
    let error = &document["components"]["schemas"]["Error"];
    assert_eq!(error["required"], json!(["code", "message", "requestId"]));
}

/// Whether `schema` (a `$ref` followed to its component) says what the
/// JSON holds, rather than only that it is an object.
fn has_shape(schemas: &Value, schema: &Value) -> bool {
    let schema = match schema["$ref"].as_str() {
        Some(reference) => &schemas[reference.trim_start_matches("#/components/schemas/")],
        None => schema,
    };
    ["properties", "items", "additionalProperties"]
        .iter()
        .any(|key| schema.get(key).is_some())
}

#[tokio::test]
async fn every_json_success_answer_has_a_schema_with_a_shape() {
    let db = sqlite_db().await;
    let app = requester_app(&db.url, "").await;
    let document = document(&app).await;
    let schemas = &document["components"]["schemas"];
    let mut checked = 0;
    for (path, method, operation) in operations(&document) {
        for (status, response) in operation["responses"].as_object().unwrap() {
            let Some(json) = response["content"].get("application/json") else {
                continue;
            };
            if !status.starts_with('2') {
                continue;
            }
            let schema = &json["schema"];
            assert!(
                has_shape(schemas, schema),
                "{method} {path} {status}: a bare {schema}"
            );
            checked += 1;
        }
    }
    assert!(checked >= 20, "only {checked} JSON answers found");
}

#[tokio::test]
async fn a_submission_answer_links_to_the_operation_and_its_timeline() {
    let db = sqlite_db().await;
    let app = requester_app(&db.url, "").await;
    let document = document(&app).await;
    let ids: HashSet<&str> = operations(&document)
        .into_iter()
        .filter_map(|(_, _, operation)| operation["operationId"].as_str())
        .collect();
    for path in ["/api/v1/applications", "/api/v1/bindings/{targetKey}/close"] {
        let links = &document["paths"][path]["post"]["responses"]["202"]["links"];
        for (name, target) in [
            ("status", "get_operation_status"),
            ("timeline", "get_timeline"),
        ] {
            let link = &links[name];
            assert_eq!(link["operationId"], target, "{path} {name}: {links}");
            assert!(ids.contains(target), "{target} is not an operation");
            assert_eq!(
                link["parameters"],
                json!({ "operationId": "$response.body#/operationId" }),
                "{path} {name}"
            );
        }
    }
}

#[tokio::test]
async fn the_document_states_the_limits_the_server_enforces() {
    let db = sqlite_db().await;
    let app = requester_app(&db.url, "").await;
    let document = document(&app).await;
    let paths = &document["paths"];
    let list = &paths["/admin/v1/operations"]["get"];
    for name in ["status", "step", "olderThanSeconds", "cursor", "limit"] {
        let parameter = parameter(list, name);
        assert_eq!(
            (&parameter["in"], &parameter["required"]),
            (&json!("query"), &json!(false)),
            "{name}"
        );
    }
    assert_eq!(
        parameter(list, "olderThanSeconds")["schema"]["maximum"],
        315_360_000
    );
    assert_eq!(parameter(list, "limit")["schema"]["maximum"], 200);
    assert_eq!(parameter(list, "limit")["schema"]["minimum"], 1);
    assert_eq!(
        parameter(list, "cursor")["schema"]["pattern"],
        "^[0-9]{1,18}$"
    );
    assert!(
        parameter(list, "status")["schema"]["enum"]
            .as_array()
            .unwrap()
            .contains(&json!("HANDLE_FAILED"))
    );
    let mine = &paths["/api/v1/me/bindings"]["get"];
    assert_eq!(parameter(mine, "limit")["schema"]["maximum"], 100);
    let preview = &paths["/api/v1/preview"]["get"];
    assert_eq!(parameter(preview, "targetKey")["in"], "query");
    assert_eq!(
        preview["deprecated"], true,
        "replaced by POST /api/v1/applications/preview"
    );
    assert_ne!(
        paths["/api/v1/applications/preview"]["post"]["deprecated"],
        true
    );
    let key = parameter(&paths["/api/v1/applications"]["post"], "Idempotency-Key");
    assert_eq!(key["schema"]["maxLength"], 191);
    for header in ["webhook-id", "webhook-timestamp", "webhook-signature"] {
        let signed = parameter(&paths["/callbacks/deploy"]["post"], header);
        assert_eq!(
            (&signed["in"], &signed["required"]),
            (&json!("header"), &json!(true))
        );
    }

    let schemas = &document["components"]["schemas"];
    assert_eq!(
        schemas["ApplyBody"]["properties"]["reason"]["maxLength"],
        2000
    );
    assert_eq!(
        schemas["ApplyBody"]["properties"]["operationId"]["format"],
        "uuid"
    );
    assert_eq!(
        schemas["OptionalReason"]["properties"]["reason"]["maxLength"],
        1000
    );
    assert_eq!(schemas["RequiredReason"]["required"], json!(["reason"]));
    assert_eq!(schemas["FreezeBody"]["required"], json!(["frozen"]));
    let endpoint = &schemas["NewEndpoint"]["properties"];
    assert_eq!(endpoint["url"]["maxLength"], 2048);
    assert_eq!(endpoint["eventTypes"]["maxItems"], 20);
    assert_eq!(endpoint["description"]["maxLength"], 500);
    assert_eq!(schemas["ChangeEndpoint"]["additionalProperties"], false);
}

#[tokio::test]
async fn content_after_the_json_body_is_refused() {
    let db = sqlite_db().await;
    let app = requester_app(&db.url, "").await;
    let send = |body: &'static str| {
        app.client
            .post(format!("{}/api/v1/applications", app.address))
            .header("x-auth-request-user", "alice")
            .header("content-type", "application/json")
            .body(body)
            .send()
    };
    let smuggled = send(r#"{"targetKey": "demo.feature-flags", "reason": "x"}{"evil":1}"#)
        .await
        .unwrap();
    assert_eq!(smuggled.status(), 400);
    let error: Value = smuggled.json().await.unwrap();
    assert_eq!(error["code"], "INVALID_ARGUMENT");
    assert!(
        error["message"].as_str().unwrap().contains("trailing"),
        "{error}"
    );
    let spaced = send("{\"targetKey\": \"demo.feature-flags\", \"reason\": \"x\"}\n  ")
        .await
        .unwrap();
    assert_eq!(spaced.status(), 202, "whitespace after the body is fine");
}

#[tokio::test]
async fn a_method_the_path_does_not_have_is_405_with_the_error_json_and_allow() {
    let db = sqlite_db().await;
    let app = requester_app(&db.url, "").await;
    for (method, path, allowed) in [
        (reqwest::Method::DELETE, "/api/v1/applications", "POST"),
        (reqwest::Method::GET, "/admin/v1/batches/freeze", "PUT"),
        (reqwest::Method::PUT, "/callbacks/deploy", "POST"),
    ] {
        let answer = app
            .client
            .request(method.clone(), format!("{}{path}", app.address))
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), 405, "{method} {path}");
        assert_eq!(answer.headers()["allow"], allowed, "{method} {path}");
        assert!(answer.headers().contains_key("x-request-id"));
        let error: Value = answer.json().await.unwrap();
        assert_eq!(error["code"], "METHOD_NOT_ALLOWED", "{method} {path}");
        assert!(error["requestId"].is_string());
    }
}

#[tokio::test]
async fn numeric_and_coded_query_parameters_are_checked_and_named() {
    for test_db in each_backend().await {
        let app = requester_app(&test_db.url, "").await;
        for (query, named) in [
            ("olderThanSeconds=9223372036855", "olderThanSeconds"),
            ("olderThanSeconds=315360001", "olderThanSeconds"),
            ("limit=0", "limit"),
            ("limit=201", "limit"),
            ("cursor=-1", "cursor"),
            ("cursor=1234567890123456789", "cursor"),
            ("step=010106", "step"),
            ("status=nope", "status"),
        ] {
            let answer = app
                .get_as("admin", &format!("/admin/v1/operations?{query}"))
                .await;
            assert_eq!(answer.status(), 400, "{query} on {}", test_db.name);
            let error: Value = answer.json().await.unwrap();
            assert!(
                error["message"].as_str().unwrap().contains(named),
                "{query}: {error}"
            );
        }
        for query in [
            "olderThanSeconds=315360000",
            "step=10106",
            "cursor=12&limit=200",
        ] {
            let answer = app
                .get_as("admin", &format!("/admin/v1/operations?{query}"))
                .await;
            assert_eq!(answer.status(), 200, "{query} on {}", test_db.name);
        }
    }
}

#[tokio::test]
async fn operator_bodies_are_typed_and_their_reasons_checked() {
    let db = sqlite_db().await;
    let app = requester_app(&db.url, "").await;
    let approve = "/admin/v1/approvals/6d5c3a3e-9f55-4a7f-8d50-2b1f9d9a7c11/approve";
    let long = "x".repeat(1001);
    for (path, body) in [
        (approve, json!({ "reason": "   " })),
        (approve, json!({ "reason": long })),
        (approve, json!({ "reason": "a\u{0}b" })),
        (approve, json!({ "note": "not a field" })),
        ("/admin/v1/batches/run", json!({ "reason": 5 })),
        ("/admin/v1/reconcile/run", json!({ "reason": "" })),
        (
            "/admin/v1/webhook-deliveries/1/redeliver",
            json!({ "reason": long }),
        ),
    ] {
        let answer = app.post_as("admin", path, &body).await;
        assert_eq!(answer.status(), 400, "{path} {body}");
        let error: Value = answer.json().await.unwrap();
        assert_eq!(error["code"], "INVALID_ARGUMENT", "{path} {body}");
    }
    let frozen = app
        .client
        .put(format!("{}/admin/v1/batches/freeze", app.address))
        .header("x-auth-request-user", "admin")
        .json(&json!({ "frozen": true, "reason": " " }))
        .send()
        .await
        .unwrap();
    assert_eq!(frozen.status(), 400, "a blank reason");
    let missing = app
        .post_as("admin", approve, &json!({ "reason": "fine" }))
        .await;
    assert_eq!(missing.status(), 404, "a good body reaches the lookup");
}

#[tokio::test]
async fn a_request_reason_is_counted_as_sent_and_an_idempotency_key_is_visible_ascii() {
    let db = sqlite_db().await;
    let app = requester_app(&db.url, "").await;
    let padded = format!("a{}", " ".repeat(2000));
    let answer = app
        .post_as(
            "alice",
            "/api/v1/applications",
            &json!({ "targetKey": "demo.feature-flags", "reason": padded }),
        )
        .await;
    assert_eq!(answer.status(), 400, "2001 characters as sent");
    let tabbed = app
        .client
        .post(format!("{}/api/v1/applications", app.address))
        .header("x-auth-request-user", "alice")
        .header("idempotency-key", "a\tb")
        .json(&json!({ "targetKey": "demo.feature-flags", "reason": "x" }))
        .send()
        .await
        .unwrap();
    assert_eq!(tabbed.status(), 400);
    let error: Value = tabbed.json().await.unwrap();
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("Idempotency-Key")
    );
}

#[tokio::test]
async fn webhook_endpoint_fields_fit_their_columns_on_create_and_change() {
    for test_db in each_backend().await {
        let app = requester_app(
            &test_db.url,
            &format!("[webhooks]\npoll_interval = \"1h\"\n{SEALING_KEY}"),
        )
        .await;
        let base = "/admin/v1/webhook-endpoints";
        let long_url = format!("https://hooks.example.com/{}", "a".repeat(2048));
        let long_names: Vec<String> = (0..20)
            .map(|i| format!("{i:02}{}", "e".repeat(47)))
            .collect();
        for bad in [
            json!({ "url": long_url }),
            json!({ "url": "https://hooks.example.com/a", "eventTypes": long_names }),
        ] {
            let answer = app.post_as("admin", base, &bad).await;
            assert_eq!(
                answer.status(),
                400,
                "{} on {}",
                &bad.to_string()[..60],
                test_db.name
            );
        }
        let created: Value = app
            .post_as(
                "admin",
                base,
                &json!({ "url": "https://hooks.example.com/a" }),
            )
            .await
            .json()
            .await
            .unwrap();
        let id = created["id"].as_i64().unwrap();
        let changed = app
            .client
            .patch(format!("{}{base}/{id}", app.address))
            .header("x-auth-request-user", "admin")
            .json(&json!({ "description": "d".repeat(501) }))
            .send()
            .await
            .unwrap();
        assert_eq!(changed.status(), 400, "{}", test_db.name);
    }
}
