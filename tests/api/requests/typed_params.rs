//! Typed parameters, on both backends: a target's JSON Schema refuses what
//! breaks it with every field named (in the message and in `fields`), the
//! catalog gives the schema to build forms from, and a request whose file
//! would not parse is refused before anything is recorded or sent.

use serde_json::{Value, json};

use super::requester_app;
use crate::helpers::{TestApp, each_backend};

const TARGETS: &str = r#"
[targets."db.pools"]
self_only = false
description = "A team's connection pool"
edit = { file = "config/pools.toml", key = "pools.{subject}" }
[targets."db.pools".params_schema]
type = "object"
required = ["owner"]
additionalProperties = false
[targets."db.pools".params_schema.properties.max_connections]
type = "integer"
minimum = 1
maximum = 500
default = 20
description = "The most connections the pool opens at once"
[targets."db.pools".params_schema.properties.mode]
type = "string"
enum = ["read", "read-write"]
default = "read"
[targets."db.pools".params_schema.properties.owner]
type = "string"
pattern = "^[a-z]+@example[.]com$"
maxLength = 40
[targets."db.pools".params_schema.properties.tls]
type = "boolean"

[targets."team.values"]
self_only = false
path = "values/{subject}.yaml"
template = """
name: {{ params.name }}
"""
[targets."team.values".params_schema]
type = "object"
properties = { name = { type = "string", default = "svc" } }
"#;

/// `params` refused, as sent by `requester` (each case its own: the apply
/// rate limit is per person).
async fn refused_for(app: &TestApp, requester: &str, target: &str, params: Value) -> Value {
    let answer = app
        .post_as(
            requester,
            "/api/v1/applications",
            &json!({ "targetKey": target, "subjectId": "team-a", "params": params, "reason": "typed" }),
        )
        .await;
    assert_eq!(answer.status(), 400, "{params}");
    answer.json().await.unwrap()
}

async fn refused(app: &TestApp, target: &str, params: Value) -> Value {
    refused_for(app, "alice", target, params).await
}

#[tokio::test]
async fn each_schema_keyword_refuses_with_its_field_named() {
    for test_db in each_backend().await {
        let app = requester_app(&test_db.url, TARGETS).await;
        let owner = json!("ops@example.com");
        let cases = [
            (
                json!({ "owner": owner, "max_connections": 501 }),
                "params.max_connections",
                "must be at most 500",
            ),
            (
                json!({ "owner": owner, "max_connections": 0 }),
                "params.max_connections",
                "must be at least 1",
            ),
            (
                json!({ "owner": owner, "max_connections": "lots" }),
                "params.max_connections",
                "must be a whole number",
            ),
            (
                json!({ "owner": owner, "mode": "write" }),
                "params.mode",
                "must be one of: read, read-write",
            ),
            (
                json!({ "owner": "Ops" }),
                "params.owner",
                "must match the pattern ^[a-z]+@example[.]com$",
            ),
            (
                json!({ "owner": format!("{}@example.com", "a".repeat(40)) }),
                "params.owner",
                "must be at most 40 characters",
            ),
            (
                json!({ "owner": owner, "tls": "yes" }),
                "params.tls",
                "must be true or false",
            ),
            (json!({}), "params.owner", "is required"),
            (
                json!({ "owner": owner, "root": true }),
                "params.root",
                "not a parameter of this target",
            ),
        ];
        for (n, (params, field, message)) in cases.into_iter().enumerate() {
            let body = refused_for(&app, &format!("user{n}"), "db.pools", params.clone()).await;
            assert_eq!(body["code"], "INVALID_ARGUMENT", "{}: {body}", test_db.name);
            assert_eq!(
                body["fields"],
                json!([{ "field": field, "message": message }]),
                "{}: {params}",
                test_db.name
            );
            assert_eq!(body["message"], format!("field `{field}`: {message}"));
        }
        // Every failing field at once, so a form can mark them all.
        let body = refused(
            &app,
            "db.pools",
            json!({ "max_connections": 900, "mode": "x" }),
        )
        .await;
        let fields: Vec<&str> = body["fields"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f["field"].as_str().unwrap())
            .collect();
        for field in ["params.max_connections", "params.mode", "params.owner"] {
            assert!(fields.contains(&field), "{}: {body}", test_db.name);
        }
        let accepted = app
            .post_as(
                "alice",
                "/api/v1/applications",
                &json!({ "targetKey": "db.pools", "subjectId": "team-a", "params": { "owner": owner }, "reason": "typed" }),
            )
            .await;
        assert_eq!(accepted.status(), 202, "{}", test_db.name);
    }
}

#[tokio::test]
async fn the_catalog_gives_each_targets_schema_and_names_only_targets_get_string_parameters() {
    for test_db in each_backend().await {
        let app = requester_app(&test_db.url, TARGETS).await;
        let targets: Value = app
            .get_as("alice", "/api/v1/targets")
            .await
            .json()
            .await
            .unwrap();
        let by_key = |key: &str| {
            targets
                .as_array()
                .unwrap()
                .iter()
                .find(|t| t["key"] == key)
                .cloned()
                .unwrap_or_else(|| panic!("{key} in {targets}"))
        };
        let pools = by_key("db.pools");
        assert_eq!(pools["format"], "toml");
        assert_eq!(pools["paramsSchema"]["required"], json!(["owner"]));
        assert_eq!(
            pools["paramsSchema"]["properties"]["max_connections"],
            json!({ "type": "integer", "minimum": 1, "maximum": 500, "default": 20,
                    "description": "The most connections the pool opens at once" })
        );
        let named = by_key("team.access");
        assert_eq!(named["params"], json!(["level"]));
        assert_eq!(
            named["paramsSchema"],
            json!({ "type": "object", "properties": { "level": { "type": "string" } },
                    "additionalProperties": false })
        );
        assert_eq!(by_key("team.values")["format"], "yaml", "{}", test_db.name);

        let number = refused(&app, "team.access", json!({ "level": 2 })).await;
        assert_eq!(number["message"], "field `params.level`: must be a string");
    }
}

#[tokio::test]
async fn a_request_whose_file_would_not_parse_is_refused_and_nothing_is_recorded() {
    for test_db in each_backend().await {
        let app = requester_app(&test_db.url, TARGETS).await;
        // `name: a: b` is not YAML: the template writes the value bare.
        let body = refused(&app, "team.values", json!({ "name": "a: b" })).await;
        assert_eq!(
            body["fields"][0]["field"], "params",
            "{}: {body}",
            test_db.name
        );
        let message = body["message"].as_str().unwrap();
        assert!(
            message.contains("the file cannot be written with these parameters")
                && message.contains("not valid yaml"),
            "{message}"
        );
        let mine: Value = app
            .get_as("alice", "/api/v1/me/bindings")
            .await
            .json()
            .await
            .unwrap();
        assert_eq!(mine["items"], json!([]), "{}: {mine}", test_db.name);
        let fine = app
            .post_as(
                "alice",
                "/api/v1/applications",
                &json!({ "targetKey": "team.values", "subjectId": "team-a", "params": { "name": "payments" }, "reason": "typed" }),
            )
            .await;
        assert_eq!(fine.status(), 202, "{}", test_db.name);
    }
}
