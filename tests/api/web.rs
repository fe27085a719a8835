//! Serving the web app (SPEC §2.5): cache headers, content types, the page
//! for app routes, JSON 404s for everything else, and the demo identity switch.

use changegate::config::Severity;
use reqwest::Response;
use reqwest::header::{ACCEPT, CACHE_CONTROL, CONTENT_TYPE};
use serde_json::Value;

use crate::helpers::{REQUESTER_CONFIG, TestApp, settings_from, spawn_app, sqlite_db};

/// What a browser sends when it navigates.
const BROWSER_ACCEPT: &str = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8";
const IMMUTABLE: &str = "public, max-age=31536000, immutable";

/// The built page the binary embeds.
fn built_index() -> String {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/web/dist/index.html");
    std::fs::read_to_string(path).expect("web/dist/index.html is committed")
}

/// The hashed script and stylesheet the built page names.
fn built_assets() -> (String, String) {
    let index = built_index();
    let find = |prefix: &str, suffix: &str| {
        index
            .split('"')
            .find(|part| part.starts_with(prefix) && part.ends_with(suffix))
            .unwrap_or_else(|| panic!("the page names a {prefix}*{suffix} file"))
            .to_owned()
    };
    (find("/assets/app-", ".js"), find("/assets/", ".css"))
}

async fn fetch(app: &TestApp, path: &str, accept: &str) -> Response {
    app.client
        .get(format!("{}{path}", app.address))
        .header(ACCEPT, accept)
        .send()
        .await
        .unwrap()
}

fn header(response: &Response, name: reqwest::header::HeaderName) -> &str {
    response
        .headers()
        .get(&name)
        .unwrap_or_else(|| panic!("{} has no {name}", response.url()))
        .to_str()
        .unwrap()
}

/// A 404 in the API's error shape, never cached, never HTML.
async fn assert_json_not_found(response: Response) {
    let url = response.url().clone();
    assert_eq!(response.status(), 404, "{url}");
    assert_eq!(header(&response, CACHE_CONTROL), "no-store", "{url}");
    assert!(
        header(&response, CONTENT_TYPE).starts_with("application/json"),
        "{url}"
    );
    let request_id = header(&response, "x-request-id".parse().unwrap()).to_owned();
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["code"], "NOT_FOUND", "{url}");
    assert!(body["message"].as_str().is_some_and(|m| !m.is_empty()));
    assert_eq!(body["requestId"], request_id.as_str(), "{url}");
}

async fn assert_page(response: Response) -> String {
    let url = response.url().clone();
    assert_eq!(response.status(), 200, "{url}");
    assert_eq!(header(&response, CACHE_CONTROL), "no-store", "{url}");
    assert_eq!(
        header(&response, CONTENT_TYPE),
        "text/html; charset=utf-8",
        "{url}"
    );
    response.text().await.unwrap()
}

#[tokio::test]
async fn the_page_is_never_cached_and_hashed_assets_are_cached_for_good() {
    let test_db = sqlite_db().await;
    let app = spawn_app(&test_db.url, "").await;

    for path in ["/", "/index.html"] {
        let page = assert_page(fetch(&app, path, BROWSER_ACCEPT).await).await;
        assert!(page.contains("<div id=\"app\">"), "{path}: {page}");
    }

    let (script, stylesheet) = built_assets();
    for (path, content_type) in [
        (&script, "text/javascript; charset=utf-8"),
        (&stylesheet, "text/css; charset=utf-8"),
    ] {
        let response = fetch(&app, path, "*/*").await;
        assert_eq!(response.status(), 200, "{path}");
        assert_eq!(header(&response, CACHE_CONTROL), IMMUTABLE, "{path}");
        assert_eq!(header(&response, CONTENT_TYPE), content_type, "{path}");
        assert_eq!(
            header(&response, "x-content-type-options".parse().unwrap()),
            "nosniff"
        );
        let on_disk =
            std::fs::read(format!("{}/web/dist{path}", env!("CARGO_MANIFEST_DIR"))).unwrap();
        assert_eq!(response.bytes().await.unwrap(), on_disk, "{path}");
    }

    // HEAD answers the headers of GET, without the body.
    let head = app
        .client
        .head(format!("{}{script}", app.address))
        .send()
        .await
        .unwrap();
    assert_eq!(head.status(), 200);
    assert_eq!(header(&head, CACHE_CONTROL), IMMUTABLE);
    assert!(head.bytes().await.unwrap().is_empty());

    // Unhashed files keep their name across builds: they must be revalidated.
    let icon = fetch(&app, "/favicon.svg", "image/*").await;
    assert_eq!(icon.status(), 200);
    assert_eq!(header(&icon, CACHE_CONTROL), "no-cache");
    assert_eq!(header(&icon, CONTENT_TYPE), "image/svg+xml");

    app.stop().await.unwrap();
}

#[tokio::test]
async fn navigating_to_an_app_route_gets_the_page() {
    let test_db = sqlite_db().await;
    let app = spawn_app(&test_db.url, "").await;
    let index = built_index();

    for path in [
        "/bindings",
        "/operations/0b7e1c52-4a7e-4a59-9c4e-2d5f0c7e9a11",
        "/ops/audit",
        "/no/such/page",
    ] {
        let page = assert_page(fetch(&app, path, BROWSER_ACCEPT).await).await;
        assert_eq!(page, index, "{path}");
    }

    // Without the browser's Accept the same path is a plain miss.
    assert_json_not_found(fetch(&app, "/bindings", "application/json").await).await;
    assert_json_not_found(fetch(&app, "/bindings", "*/*").await).await;

    app.stop().await.unwrap();
}

#[tokio::test]
async fn an_old_page_asking_for_a_deleted_asset_gets_a_json_404_never_html_or_a_500() {
    let test_db = sqlite_db().await;
    let app = spawn_app(&test_db.url, "").await;

    // What a page cached before a deploy asks for: hashes this build lacks.
    for path in [
        "/assets/app-D3l3t3d0.js",
        "/assets/index-0ldSty1e.css",
        "/assets/logo-Gone1234.svg",
        "/favicon.ico",
    ] {
        assert_json_not_found(fetch(&app, path, "*/*").await).await;
        // Even a browser asking for HTML: the path names a file, not a page.
        assert_json_not_found(fetch(&app, path, BROWSER_ACCEPT).await).await;
    }

    app.stop().await.unwrap();
}

#[tokio::test]
async fn unknown_api_admin_and_callback_paths_get_a_json_404_even_from_a_browser() {
    let test_db = sqlite_db().await;
    let app = spawn_app(&test_db.url, "").await;

    for path in [
        "/api",
        "/api/v1/nothing",
        "/api/v2/operations",
        "/admin/v1/nothing",
        "/callbacks/nothing",
    ] {
        assert_json_not_found(fetch(&app, path, BROWSER_ACCEPT).await).await;
    }
    // Only reads are navigations.
    let response = app
        .client
        .post(format!("{}/bindings", app.address))
        .header(ACCEPT, BROWSER_ACCEPT)
        .send()
        .await
        .unwrap();
    assert_json_not_found(response).await;

    app.stop().await.unwrap();
}

#[tokio::test]
async fn the_demo_user_switcher_is_offered_only_when_configured() {
    let test_db = sqlite_db().await;
    let marker =
        |state: &str| format!(r#"<meta name="changegate-demo-identity" content="{state}">"#);

    let app = spawn_app(&test_db.url, "").await;
    let page = assert_page(fetch(&app, "/", BROWSER_ACCEPT).await).await;
    assert!(page.contains(&marker("off")), "{page}");
    assert!(!page.contains(&marker("on")));
    app.stop().await.unwrap();

    let app = spawn_app(
        &test_db.url,
        &format!("{REQUESTER_CONFIG}[web]\ndemo_identity = true\n"),
    )
    .await;
    for path in ["/", "/ops"] {
        let page = assert_page(fetch(&app, path, BROWSER_ACCEPT).await).await;
        assert!(page.contains(&marker("on")), "{path}: {page}");
        assert!(!page.contains(&marker("off")));
    }
    // Operators see the switch in the effective configuration.
    let config: Value = app
        .get_as("admin", "/admin/v1/config")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(config["web"]["demoIdentity"], true);
    app.stop().await.unwrap();
}

#[test]
fn demo_identity_is_on_only_in_the_demo_config() {
    let root = env!("CARGO_MANIFEST_DIR");
    let read = |file: &str| std::fs::read_to_string(format!("{root}/config/{file}")).unwrap();

    let (defaults, _) = settings_from("");
    assert!(!defaults.web.demo_identity);
    let (production, _) = settings_from(&read("default.toml"));
    assert!(!production.web.demo_identity);
    let (demo, _) = settings_from(&read("demo.toml"));
    assert!(demo.web.demo_identity);

    let (_, problems) = settings_from("[web]\ndemo_identity = \"yes\"\n");
    assert!(
        problems
            .iter()
            .any(|p| p.key == "web.demo_identity" && p.severity == Severity::Error),
        "{problems:?}"
    );
}
