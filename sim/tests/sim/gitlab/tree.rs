//! `GET …/repository/tree`: entries with git's own object ids, at a branch or a commit,
//! recursive or not, paginated with GitLab's headers.

use serde_json::{Value, json};

use super::support::{BOT, Fixture, Reply};

/// The ids `git ls-tree -r -t` gives for the files `seed` pushes next to `README.md`.
const README: &str = "68394c3550e4f592beebfa3b3c8f12990f5b88b6";
const CONFIG: &str = "0929cf0b2dbea2cabe1949e72f4c3f5ba473ea29";
const CONFIG_X: &str = "ab69b4abf3bb84d4e268bd42d84e4a9a5e242bd3";
const CONFIG_DB: &str = "972638e76274871f640d4364db892ace474a57e7";
const APP_YAML: &str = "fac04281a322e11c2c7da4a5a165ec088ac2a171";
const MAIN_YAML: &str = "47663cbbc0b64c34a5b899d867f907e04f7ffca1";
const X: &str = "587be6b4c3f93f93c489c0111bba5596147a26cb";
const EMPTY: &str = "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391";

/// Pushes a few files, among them names git sorts around a directory (`config-x`,
/// `config.txt`, `config/`); returns the commit before the push.
fn seed(fx: &Fixture) -> String {
    let before = fx.sim.branch_head(fx.project, "main").unwrap();
    let files = [
        ("config/app.yaml", Some("port: 80\n")),
        ("config/db/main.yaml", Some("db: main\n")),
        ("config-x/x", Some("x\n")),
        ("config.txt", Some("")),
    ];
    fx.sim.push(fx.project, fx.bot, "main", &files).unwrap();
    before
}

fn entry(id: &str, path: &str, tree: bool) -> Value {
    let (kind, mode) = if tree {
        ("tree", "040000")
    } else {
        ("blob", "100644")
    };
    let name = path.rsplit('/').next().unwrap();
    json!({ "id": id, "name": name, "type": kind, "path": path, "mode": mode })
}

fn header<'a>(reply: &'a Reply, name: &str) -> &'a str {
    reply.headers[name].to_str().unwrap()
}

#[tokio::test]
async fn tree_lists_git_ids_trees_first() {
    let fx = Fixture::start().await;
    let before = seed(&fx);
    let tree = format!("{}/repository/tree", fx.root);

    let root = fx.get(BOT, &tree).await;
    assert_eq!(root.status, 200, "{}", root.text);
    assert_eq!(
        root.body,
        json!([
            entry(CONFIG_X, "config-x", true),
            entry(CONFIG, "config", true),
            entry(README, "README.md", false),
            entry(EMPTY, "config.txt", false),
        ])
    );

    let recursive = fx
        .get(BOT, &format!("{tree}?recursive=true&ref=main"))
        .await;
    assert_eq!(
        recursive.body,
        json!([
            entry(CONFIG_X, "config-x", true),
            entry(CONFIG, "config", true),
            entry(CONFIG_DB, "config/db", true),
            entry(README, "README.md", false),
            entry(X, "config-x/x", false),
            entry(EMPTY, "config.txt", false),
            entry(APP_YAML, "config/app.yaml", false),
            entry(MAIN_YAML, "config/db/main.yaml", false),
        ])
    );

    let sub = fx.get(BOT, &format!("{tree}?path=config/")).await;
    assert_eq!(
        sub.body,
        json!([
            entry(CONFIG_DB, "config/db", true),
            entry(APP_YAML, "config/app.yaml", false),
        ])
    );

    // The Files API reports the same blob id.
    let file = fx
        .get(
            BOT,
            &format!("{}/repository/files/config%2Fapp.yaml?ref=main", fx.root),
        )
        .await;
    assert_eq!(file.body["blob_id"], APP_YAML);

    // At the older commit only the README existed.
    let old = fx.get(BOT, &format!("{tree}?ref={before}")).await;
    assert_eq!(old.body, json!([entry(README, "README.md", false)]));
    let head = fx.get(BOT, &format!("{tree}?ref=HEAD")).await;
    assert_eq!(head.body, root.body);
}

#[tokio::test]
async fn tree_pages_with_offset_headers_and_links() {
    let fx = Fixture::start().await;
    seed(&fx);
    let tree = format!("{}/repository/tree", fx.root);
    let first = fx.get(BOT, &format!("{tree}?recursive=1&per_page=3")).await;
    assert_eq!(first.body.as_array().unwrap().len(), 3);
    assert_eq!(header(&first, "x-page"), "1");
    assert_eq!(header(&first, "x-per-page"), "3");
    assert_eq!(header(&first, "x-next-page"), "2");
    assert_eq!(header(&first, "x-prev-page"), "");
    assert_eq!(header(&first, "x-total"), "8");
    assert_eq!(header(&first, "x-total-pages"), "3");
    let url = format!(
        "{}/projects/config%2Frepo/repository/tree",
        fx.sim.api_url()
    );
    assert_eq!(
        header(&first, "link"),
        format!(
            "<{url}?recursive=1&page=2&per_page=3>; rel=\"next\", \
             <{url}?recursive=1&page=1&per_page=3>; rel=\"first\", \
             <{url}?recursive=1&page=3&per_page=3>; rel=\"last\""
        )
    );
    let last = fx
        .get(BOT, &format!("{tree}?recursive=1&per_page=3&page=3"))
        .await;
    assert_eq!(
        last.body,
        json!([
            entry(APP_YAML, "config/app.yaml", false),
            entry(MAIN_YAML, "config/db/main.yaml", false),
        ])
    );
    assert_eq!(header(&last, "x-next-page"), "");
    assert_eq!(header(&last, "x-prev-page"), "2");
    assert!(header(&last, "link").starts_with(&format!(
        "<{url}?recursive=1&page=2&per_page=3>; rel=\"prev\", "
    )));

    // Past the last page Kaminari is out of range: no previous page either.
    let beyond = fx
        .get(BOT, &format!("{tree}?recursive=1&per_page=3&page=5"))
        .await;
    assert_eq!(beyond.body, json!([]));
    assert_eq!(header(&beyond, "x-page"), "5");
    assert_eq!(header(&beyond, "x-prev-page"), "");
    assert_eq!(header(&beyond, "x-next-page"), "");

    let default = fx.get(BOT, &format!("{tree}?recursive=true")).await;
    assert_eq!(header(&default, "x-per-page"), "20");
    let capped = fx.get(BOT, &format!("{tree}?per_page=500")).await;
    assert_eq!(header(&capped, "x-per-page"), "100");
    // Kaminari reads a page below 1 as the first and ignores a negative page size.
    let low = fx.get(BOT, &format!("{tree}?page=-2&per_page=-5")).await;
    assert_eq!(low.status, 200, "{}", low.text);
    assert_eq!(header(&low, "x-page"), "1");
    assert_eq!(header(&low, "x-per-page"), "20");
    for (query, error) in [
        ("per_page=0", "per_page has a value not allowed"),
        ("page=two", "page is invalid"),
        ("per_page=1.5", "per_page is invalid"),
    ] {
        let refused = fx.get(BOT, &format!("{tree}?{query}")).await;
        assert_eq!(refused.status, 400, "{query}");
        assert_eq!(refused.body, json!({ "error": error }), "{query}");
    }
}

#[tokio::test]
async fn tree_of_an_unknown_ref_or_path_is_404() {
    let fx = Fixture::start().await;
    seed(&fx);
    let tree = format!("{}/repository/tree", fx.root);
    let no_ref = fx.get(BOT, &format!("{tree}?ref=nowhere")).await;
    assert_eq!(no_ref.status, 404);
    assert_eq!(no_ref.body, json!({ "message": "404 Tree Not Found" }));
    for path in ["nowhere", "config/app.yaml", "config/nowhere"] {
        let missing = fx.get(BOT, &format!("{tree}?path={path}")).await;
        assert_eq!(missing.status, 404, "{path}");
        assert_eq!(
            missing.body,
            json!({ "message": "404 invalid revision or path Not Found" })
        );
    }
    let bad = fx.get(BOT, &format!("{tree}?recursive=maybe")).await;
    assert_eq!(bad.status, 400);
    assert_eq!(bad.body, json!({ "error": "recursive is invalid" }));
    assert_eq!(
        fx.get(BOT, "/projects/nope%2Fnope/repository/tree")
            .await
            .status,
        404
    );
}
