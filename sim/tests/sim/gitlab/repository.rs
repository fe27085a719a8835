//! Branches, commits with actions, single commits, and the Files API over a real in-memory
//! tree.

use changegate_sim::gitlab::Endpoint;
use reqwest::Method;
use serde_json::{Value, json};

use super::support::{BOT, Fixture, REPORTER, Reply};

#[tokio::test]
async fn branch_create_get_and_delete() {
    let fx = Fixture::start().await;
    let fx = &fx;
    let branches = format!("{}/repository/branches", fx.root);
    let main_head = fx.sim.branch_head(fx.project, "main").expect("main exists");
    let created = fx
        .post(
            BOT,
            &branches,
            json!({ "branch": "bot/one", "ref": "main" }),
        )
        .await;
    assert_eq!(created.status, 201, "{}", created.text);
    assert_eq!(created.body["name"], "bot/one");
    assert_eq!(created.body["commit"]["id"], main_head.as_str());
    let again = fx
        .post(
            BOT,
            &branches,
            json!({ "branch": "bot/one", "ref": "main" }),
        )
        .await;
    assert_eq!(again.status, 400);
    assert_eq!(again.body, json!({ "message": "Branch already exists" }));
    let bad_ref = fx
        .post(
            BOT,
            &branches,
            json!({ "branch": "bot/two", "ref": "nowhere" }),
        )
        .await;
    assert_eq!(bad_ref.status, 400);
    assert_eq!(
        bad_ref.str("message"),
        "Failed to create branch 'bot/two': invalid reference name 'nowhere'"
    );
    let missing = fx.post(BOT, &branches, json!({ "branch": "x" })).await;
    assert_eq!(missing.body, json!({ "error": "ref is missing" }));
    let forbidden = fx
        .post(REPORTER, &branches, json!({ "branch": "r", "ref": "main" }))
        .await;
    assert_eq!(forbidden.status, 403);

    let got = fx.get(BOT, &format!("{branches}/bot%2Fone")).await;
    assert_eq!(got.status, 200);
    assert_eq!(got.body["merged"], true);
    let list = fx.get(BOT, &branches).await;
    assert_eq!(list.body.as_array().map(Vec::len), Some(2));
    assert_eq!(list.headers["x-total"], "2");

    let delete = |name: &str| {
        let path = format!("{branches}/{name}");
        async move { fx.send(Method::DELETE, Some(BOT), &path, None).await }
    };
    assert_eq!(delete("bot%2Fone").await.status, 204);
    let gone = delete("bot%2Fone").await;
    assert_eq!(gone.status, 404);
    assert_eq!(gone.body, json!({ "message": "404 Branch Not Found" }));
    assert_eq!(delete("main").await.status, 405);
    assert_eq!(fx.sim.branch_head(fx.project, "bot/one"), None);
}

#[tokio::test]
async fn commits_apply_actions_to_the_branch_tree() {
    let fx = Fixture::start().await;
    let fx = &fx;
    let commits = format!("{}/repository/commits", fx.root);
    let main_head = fx.sim.branch_head(fx.project, "main").expect("main exists");
    let first = fx
        .post(
            BOT,
            &commits,
            json!({
                "branch": "bot/one",
                "start_branch": "main",
                "commit_message": "bot: add binding",
                "actions": [
                    { "action": "create", "file_path": "bindings/a.json", "content": "{}\n" },
                    { "action": "create", "file_path": "bindings/b.json", "content": "b\n" }
                ]
            }),
        )
        .await;
    assert_eq!(first.status, 201, "{}", first.text);
    let first_sha = first.str("id").to_owned();
    assert_eq!(first.body["parent_ids"], json!([main_head]));
    assert_eq!(first.body["stats"]["additions"], 2);
    assert_eq!(
        fx.sim.branch_head(fx.project, "bot/one"),
        Some(first_sha.clone())
    );

    let file = fx
        .get(
            BOT,
            &format!(
                "{}/repository/files/bindings%2Fa.json?ref=bot%2Fone",
                fx.root
            ),
        )
        .await;
    assert_eq!(file.status, 200);
    assert_eq!(file.body["encoding"], "base64");
    assert_eq!(file.body["content"], "e30K");
    assert_eq!(file.body["commit_id"], first_sha.as_str());
    let raw = fx
        .get(
            BOT,
            &format!(
                "{}/repository/files/bindings%2Fa.json/raw?ref=bot%2Fone",
                fx.root
            ),
        )
        .await;
    assert_eq!(raw.text, "{}\n");
    let on_main = fx
        .get(
            BOT,
            &format!("{}/repository/files/bindings%2Fa.json?ref=main", fx.root),
        )
        .await;
    assert_eq!(on_main.status, 404);
    assert_eq!(on_main.body, json!({ "message": "404 File Not Found" }));

    let refused = |action: &str, path: &str| {
        let body = json!({
            "branch": "bot/one",
            "commit_message": "x",
            "actions": [{ "action": action, "file_path": path, "content": "x" }]
        });
        let commits = commits.clone();
        async move { fx.post(BOT, &commits, body).await }
    };
    let exists = refused("create", "bindings/a.json").await;
    assert_eq!(exists.status, 400);
    assert_eq!(
        exists.body,
        json!({ "message": "A file with this name already exists" })
    );
    for action in ["update", "delete"] {
        let missing = refused(action, "nope.json").await;
        assert_eq!(missing.status, 400);
        assert_eq!(
            missing.body,
            json!({ "message": "A file with this name doesn't exist" })
        );
    }
    let bad_action = refused("copy", "x").await;
    assert_eq!(
        bad_action.str("message"),
        "400 Bad request - actions[0][action] must be one of: create, update, move, delete, chmod"
    );
    assert_eq!(
        fx.sim.branch_head(fx.project, "bot/one"),
        Some(first_sha.clone())
    );

    let second = fx
        .post(
            BOT,
            &commits,
            json!({
                "branch": "bot/one",
                "commit_message": "bot: rework",
                "actions": [
                    { "action": "update", "file_path": "bindings/a.json", "content": "{\"k\":1}\n" },
                    { "action": "move", "previous_path": "bindings/b.json", "file_path": "bindings/c.json" },
                    { "action": "delete", "file_path": "README.md" },
                    { "action": "create", "file_path": "d.txt", "content": "ZA==", "encoding": "base64" }
                ]
            }),
        )
        .await;
    assert_eq!(second.status, 201, "{}", second.text);
    assert_eq!(second.body["parent_ids"], json!([first_sha]));
    let files = fx.sim.files(fx.project, "bot/one").expect("branch exists");
    let paths: Vec<&str> = files.keys().map(String::as_str).collect();
    assert_eq!(paths, ["bindings/a.json", "bindings/c.json", "d.txt"]);
    assert_eq!(files["bindings/a.json"], "{\"k\":1}\n");
    assert_eq!(files["bindings/c.json"], "b\n");
    assert_eq!(files["d.txt"], "d");
    assert!(fx.sim.file(fx.project, "main", "README.md").is_some());
}

#[tokio::test]
async fn commit_branch_rules_follow_commits_create_service() {
    let fx = Fixture::start().await;
    let fx = &fx;
    let commits = format!("{}/repository/commits", fx.root);
    let body = |branch: &str, start: Option<&str>| {
        let mut body = json!({
            "branch": branch,
            "commit_message": "x",
            "actions": [{ "action": "create", "file_path": "x", "content": "x" }]
        });
        if let Some(start) = start {
            body["start_branch"] = json!(start);
        }
        body
    };
    let no_branch = fx.post(BOT, &commits, body("new", None)).await;
    assert_eq!(no_branch.status, 400);
    assert_eq!(
        no_branch.str("message"),
        "You can only create or edit files when you are on a branch"
    );
    let existing = fx.post(BOT, &commits, body("main", Some("other"))).await;
    assert_eq!(existing.status, 400);
    let created = fx.post(BOT, &commits, body("new", Some("main"))).await;
    assert_eq!(created.status, 201);
    let again = fx.post(BOT, &commits, body("new", Some("main"))).await;
    assert_eq!(
        again.str("message"),
        "A branch called 'new' already exists. Switch to that branch in order to make changes"
    );
    let forbidden = fx.post(REPORTER, &commits, body("new", None)).await;
    assert_eq!(forbidden.status, 403);
    assert_eq!(
        forbidden.str("message"),
        "403 Forbidden - You are not allowed to push into this branch"
    );
    let missing = fx.post(BOT, &commits, json!({ "branch": "new" })).await;
    assert_eq!(
        missing.str("message"),
        "400 Bad request - commit_message is required"
    );
    let empty = fx.send(Method::POST, Some(BOT), &commits, None).await;
    assert_eq!(empty.str("message"), "400 Bad request - branch is required");
}

#[tokio::test]
async fn files_are_read_at_a_merge_commit_and_at_an_older_commit() {
    let fx = Fixture::start().await;
    let initial = fx.sim.branch_head(fx.project, "main").unwrap();
    let iid = fx.ready_mr("bot/one", &[("a.json", "{\"a\":1}\n")]).await;
    let merged = fx.put(BOT, &fx.mr_path(iid, "/merge"), json!({})).await;
    assert_eq!(merged.status, 200, "{}", merged.text);
    let merge_sha = merged.str("merge_commit_sha").to_owned();
    // A later push leaves the merge commit behind main's head.
    fx.sim
        .push(
            fx.project,
            fx.bot,
            "main",
            &[("a.json", Some("{\"a\":2}\n"))],
        )
        .unwrap();
    let file = |reference: &str| format!("{}/repository/files/a.json?ref={reference}", fx.root);

    let at_merge = fx.get(BOT, &file(&merge_sha)).await;
    assert_eq!(at_merge.status, 200, "{}", at_merge.text);
    assert_eq!(at_merge.body["ref"], merge_sha.as_str());
    assert_eq!(at_merge.body["commit_id"], merge_sha.as_str());
    assert_eq!(at_merge.body["content"], "eyJhIjoxfQo=");
    let raw = fx
        .get(
            BOT,
            &format!("{}/repository/files/a.json/raw?ref={merge_sha}", fx.root),
        )
        .await;
    assert_eq!(raw.text, "{\"a\":1}\n");
    assert_eq!(
        fx.get(BOT, &file("main")).await.body["content"],
        "eyJhIjoyfQo="
    );

    let before = fx.get(BOT, &file(&initial)).await;
    assert_eq!(before.status, 404);
    assert_eq!(before.body, json!({ "message": "404 File Not Found" }));
    let readme = fx
        .get(
            BOT,
            &format!("{}/repository/files/README.md/raw?ref={initial}", fx.root),
        )
        .await;
    assert_eq!(readme.text, "# repo\n");
}

#[tokio::test]
async fn a_single_commit_is_read_by_its_id_a_unique_prefix_a_branch_or_head() {
    let fx = Fixture::start().await;
    let iid = fx.open_mr("bot/one", &[("a.json", "{\"a\":1}\n")]).await;
    let head = fx.sim.merge_request(fx.project, iid).unwrap().sha;
    let commit = |reference: &str| format!("{}/repository/commits/{reference}", fx.root);

    let by_id = fx.get(BOT, &commit(&head)).await;
    assert_eq!(by_id.status, 200, "{}", by_id.text);
    assert_eq!(by_id.body["id"], head.as_str());
    assert_eq!(by_id.body["title"], "bot: add");
    assert_eq!(
        by_id.body["stats"],
        json!({ "additions": 1, "deletions": 0, "total": 1 })
    );
    assert_eq!(by_id.body["project_id"], fx.project);
    assert_eq!(by_id.body["last_pipeline"]["sha"], head.as_str());
    assert_eq!(by_id.body["status"], by_id.body["last_pipeline"]["status"]);
    assert_eq!(fx.get(BOT, &commit(&head[..10])).await.body, by_id.body);
    assert_eq!(
        fx.get(BOT, &commit("bot%2Fone")).await.body["id"],
        head.as_str()
    );
    let main = fx.get(BOT, &commit("main")).await;
    assert_eq!(main.body["parent_ids"], json!([]));
    assert_eq!(main.body["status"], Value::Null);
    // `HEAD` is the default branch, as the symbolic ref of a GitLab repository.
    assert_eq!(fx.get(BOT, &commit("HEAD")).await.body, main.body);
    let without_stats = fx.get(BOT, &format!("{}?stats=false", commit(&head))).await;
    assert!(without_stats.body.get("stats").is_none());

    for unknown in ["0".repeat(40), "nope".to_owned()] {
        let missing = fx.get(BOT, &commit(&unknown)).await;
        assert_eq!(missing.status, 404);
        assert_eq!(missing.body, json!({ "message": "404 Commit Not Found" }));
    }
}

#[tokio::test]
async fn files_carry_their_metadata_as_x_gitlab_headers() {
    let fx = Fixture::start().await;
    let created = fx
        .sim
        .push(fx.project, fx.bot, "main", &[("dir/a.json", Some("{}\n"))]);
    let last = created.unwrap();
    let head = fx
        .sim
        .push(fx.project, fx.bot, "main", &[("b.txt", Some("b\n"))]);
    let head = head.unwrap();
    let file = format!("{}/repository/files/dir%2Fa.json", fx.root);
    // `git hash-object` and `sha256sum` of "{}\n".
    let blob = "0967ef424bce6791893e9a57bb952f80fd536e93";
    let sha256 = "ca3d163bab055381827226140568f3bef7eaac187cebd76878e0b63e9e442356";
    let expected = |reference: &str| {
        [
            ("x-gitlab-blob-id", blob.to_owned()),
            ("x-gitlab-commit-id", head.clone()),
            ("x-gitlab-content-sha256", sha256.to_owned()),
            ("x-gitlab-encoding", "base64".to_owned()),
            ("x-gitlab-execute-filemode", "false".to_owned()),
            ("x-gitlab-file-name", "a.json".to_owned()),
            ("x-gitlab-file-path", "dir/a.json".to_owned()),
            ("x-gitlab-last-commit-id", last.clone()),
            ("x-gitlab-ref", reference.to_owned()),
            ("x-gitlab-size", "3".to_owned()),
        ]
    };
    let assert_headers = |reply: &Reply, reference: &str| {
        for (name, value) in expected(reference) {
            assert_eq!(reply.headers[name].to_str().unwrap(), value, "{name}");
        }
    };

    let got = fx.get(BOT, &format!("{file}?ref=main")).await;
    assert_eq!(got.status, 200, "{}", got.text);
    assert_headers(&got, "main");
    assert_eq!(got.body["blob_id"], blob);
    assert_eq!(got.body["content_sha256"], sha256);
    assert_eq!(got.body["last_commit_id"], last.as_str());

    let metadata = fx
        .send(Method::HEAD, Some(BOT), &format!("{file}?ref=HEAD"), None)
        .await;
    assert_eq!(metadata.status, 200);
    assert_eq!(metadata.text, "");
    assert_headers(&metadata, "HEAD");
    assert_eq!(fx.sim.calls(Endpoint::GetFileMetadata), 1);
    assert_eq!(fx.sim.calls(Endpoint::GetFile), 1);
    let missing = fx
        .send(Method::HEAD, Some(BOT), &format!("{file}x?ref=main"), None)
        .await;
    assert_eq!(missing.status, 404);
    assert!(missing.headers.get("x-gitlab-blob-id").is_none());

    let raw = fx.get(BOT, &format!("{file}/raw?ref={head}")).await;
    assert_eq!(raw.text, "{}\n");
    assert_headers(&raw, &head);
    // The raw endpoint's `ref` is optional: the default branch, echoed as empty.
    let raw_default = fx.get(BOT, &format!("{file}/raw")).await;
    assert_eq!(raw_default.status, 200, "{}", raw_default.text);
    assert_eq!(raw_default.text, "{}\n");
    assert_headers(&raw_default, "");

    for (path, error) in [
        (file.clone(), "ref is missing"),
        (format!("{file}?ref="), "ref is empty"),
        (format!("{file}/raw?ref=%20"), "ref is empty"),
    ] {
        let refused = fx.get(BOT, &path).await;
        assert_eq!(refused.status, 400, "{path}");
        assert_eq!(refused.body, json!({ "error": error }), "{path}");
    }
}
