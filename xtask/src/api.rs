//! The HTTP API page, from the OpenAPI document changegate serves (which is
//! itself generated from the routes).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use anyhow::Context as _;
use changegate::app::Application;
use changegate::config::{self, LiveConfig};
use serde_json::Value;

/// The OpenAPI document of a changegate started on a scratch SQLite file,
/// as `GET /api/openapi.json` answers it.
pub async fn openapi_document() -> anyhow::Result<Value> {
    // reqwest is built without a provider of its own, as in changegate.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let scratch = tempfile::tempdir()?;
    let file = scratch.path().join("changegate.toml");
    let database = scratch.path().join("changegate.db");
    std::fs::write(
        &file,
        format!(
            "[server]\nlisten = \"127.0.0.1:0\"\n[database]\nurl = \"sqlite://{}\"\n[log]\nlevel = \"error\"\n",
            database.display()
        ),
    )?;
    let (settings, _) = config::load(Some(&file), None).map_err(|problems| {
        let problems: Vec<String> = problems.iter().map(ToString::to_string).collect();
        anyhow::anyhow!("scratch configuration: {}", problems.join("; "))
    })?;
    let app = Application::build(LiveConfig::new(settings, None, None)).await?;
    let url = format!("http://127.0.0.1:{}/api/openapi.json", app.port());
    let stop = app.shutdown_token();
    let running = tokio::spawn(app.run_until_stopped());
    let document = reqwest::Client::builder()
        .timeout(std::time::Duration::from_secs(30))
        .build()?
        .get(&url)
        .send()
        .await
        .and_then(reqwest::Response::error_for_status)
        .context("GET /api/openapi.json")?
        .json::<Value>()
        .await
        .context("the OpenAPI document")?;
    stop.cancel();
    running.await??;
    Ok(document)
}

const METHODS: &[&str] = &["get", "post", "put", "patch", "delete"];

/// The page: one table per tag, every operation with its path, summary,
/// parameters and answers.
pub fn render(document: &Value) -> String {
    let mut by_tag: BTreeMap<String, Vec<String>> = BTreeMap::new();
    if let Some(paths) = document["paths"].as_object() {
        for (path, item) in paths {
            for method in METHODS {
                let Some(operation) = item.get(*method) else {
                    continue;
                };
                let tag = operation["tags"][0].as_str().unwrap_or("other").to_owned();
                by_tag
                    .entry(tag)
                    .or_default()
                    .push(row(path, method, operation));
            }
        }
    }
    let mut page = String::from(
        "# HTTP endpoints\n\n\
         <!-- Generated from the OpenAPI document by `cargo run -p xtask -- docs`; edit the routes, not this page. -->\n\n\
         Every route changegate serves, from the OpenAPI document it generates \
         from its routes ([openapi.json](openapi.json), also served at \
         `GET /api/openapi.json`). Errors answer the error JSON \
         `{\"error\": {\"code\", \"message\", \"details\"}}`.\n",
    );
    for (tag, rows) in by_tag {
        let _ = write!(
            page,
            "\n## {tag}\n\n| method | path | what | parameters | answers |\n|---|---|---|---|---|\n"
        );
        for row in rows {
            page.push_str(&row);
        }
    }
    page
}

fn row(path: &str, method: &str, operation: &Value) -> String {
    let summary = operation["summary"]
        .as_str()
        .or(operation["description"].as_str())
        .unwrap_or_default()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    let parameters: Vec<String> = operation["parameters"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| {
            format!(
                "`{}` ({}{})",
                p["name"].as_str().unwrap_or_default(),
                p["in"].as_str().unwrap_or_default(),
                if p["required"].as_bool() == Some(true) {
                    ", required"
                } else {
                    ""
                }
            )
        })
        .chain(operation.get("requestBody").map(|_| "JSON body".to_owned()))
        .collect();
    let answers: Vec<&str> = operation["responses"]
        .as_object()
        .into_iter()
        .flat_map(|responses| responses.keys())
        .map(String::as_str)
        .collect();
    format!(
        "| `{}` | `{path}` | {} | {} | {} |\n",
        method.to_uppercase(),
        cell(&summary),
        parameters.join(", "),
        answers.join(", ")
    )
}

/// Text for a table cell: one line, no column breaks.
fn cell(text: &str) -> String {
    text.replace('|', "\\|")
}
