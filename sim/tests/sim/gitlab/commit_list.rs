//! `GET …/repository/commits`: a branch's history newest first, by path across renames,
//! paginated without a count; and rewriting a branch's history with a forced push.

use changegate_sim::gitlab::{Endpoint, SimError};
use reqwest::Method;
use serde_json::json;

use super::support::{BOT, Fixture, Reply};
use crate::control_client::call;

/// A header's value, `None` when it is absent.
fn header<'a>(reply: &'a Reply, name: &str) -> Option<&'a str> {
    reply.headers.get(name).map(|value| value.to_str().unwrap())
}

/// The ids of a listing, in order.
fn ids(reply: &Reply) -> Vec<&str> {
    let list = reply.body.as_array().expect("a list");
    list.iter().map(|c| c["id"].as_str().unwrap()).collect()
}

/// Pushes one commit to main.
fn push(fx: &Fixture, changes: &[(&str, Option<&str>)]) -> String {
    fx.sim.push(fx.project, fx.bot, "main", changes).unwrap()
}

#[tokio::test]
async fn commits_are_listed_newest_first_with_uncounted_pages() {
    let fx = Fixture::start().await;
    let root = fx.sim.branch_head(fx.project, "main").unwrap();
    let c1 = push(&fx, &[("a.txt", Some("1\n"))]);
    let c2 = push(&fx, &[("b.txt", Some("b\n"))]);
    let c3 = push(&fx, &[("a.txt", Some("2\n"))]);
    let commits = format!("{}/repository/commits", fx.root);

    let all = fx.get(BOT, &commits).await;
    assert_eq!(all.status, 200, "{}", all.text);
    assert_eq!(ids(&all), [&c3, &c2, &c1, &root]);
    let newest = &all.body[0];
    assert_eq!(newest["short_id"], &c3[..11]);
    assert_eq!(newest["title"], "External push");
    assert_eq!(newest["message"], "External push");
    assert_eq!(newest["author_name"], "change-bot");
    assert_eq!(newest["parent_ids"], json!([c2]));
    assert_eq!(newest["trailers"], json!({}));
    assert!(newest["web_url"].as_str().unwrap().ends_with(&c3));
    assert!(newest.get("stats").is_none());
    assert_eq!(all.body[3]["parent_ids"], json!([]));
    assert_eq!(header(&all, "x-page"), Some("1"));
    assert_eq!(header(&all, "x-per-page"), Some("20"));
    assert_eq!(header(&all, "x-next-page"), Some(""));
    assert_eq!(header(&all, "x-prev-page"), Some(""));
    // GitLab does not count the commits of a list: no totals and no `last` link.
    assert_eq!(header(&all, "x-total"), None);
    assert_eq!(header(&all, "x-total-pages"), None);
    let url = format!("{}{commits}", fx.sim.api_url());
    assert_eq!(
        header(&all, "link"),
        Some(format!("<{url}?page=1&per_page=20>; rel=\"first\"").as_str())
    );

    let page = |n: u32| {
        let path = format!("{commits}?per_page=2&page={n}");
        let fx = &fx;
        async move { fx.get(BOT, &path).await }
    };
    let first = page(1).await;
    assert_eq!(ids(&first), [&c3, &c2]);
    assert_eq!(header(&first, "x-next-page"), Some("2"));
    assert_eq!(
        header(&first, "link"),
        Some(
            format!(
                "<{url}?page=2&per_page=2>; rel=\"next\", <{url}?page=1&per_page=2>; rel=\"first\""
            )
            .as_str()
        )
    );
    // A full page always promises a next one (`offset + commits.size + 1`), even the last.
    let second = page(2).await;
    assert_eq!(ids(&second), [&c1, &root]);
    assert_eq!(header(&second, "x-next-page"), Some("3"));
    assert_eq!(header(&second, "x-prev-page"), Some("1"));
    let third = page(3).await;
    assert_eq!(third.body, json!([]));
    assert_eq!(header(&third, "x-next-page"), Some(""));
    assert_eq!(header(&third, "x-prev-page"), Some("2"));

    // `HEAD` and an empty `ref_name` are the default branch; a branch or a commit lists
    // its own history.
    for reference in ["HEAD", "", "main"] {
        let listed = fx
            .get(BOT, &format!("{commits}?ref_name={reference}"))
            .await;
        assert_eq!(listed.body, all.body, "{reference}");
    }
    let at_c2 = fx
        .get(BOT, &format!("{commits}?ref_name={}", &c2[..8]))
        .await;
    assert_eq!(ids(&at_c2), [&c2, &c1, &root]);
    // A range leaves out the left side and its ancestors.
    let range = fx.get(BOT, &format!("{commits}?ref_name={c1}..main")).await;
    assert_eq!(ids(&range), [&c3, &c2]);
    let stats = fx.get(BOT, &format!("{commits}?with_stats=true")).await;
    assert_eq!(
        stats.body[0]["stats"],
        json!({ "additions": 1, "deletions": 1, "total": 2 })
    );

    // The listing and the commit endpoint share a path, each counted as its own.
    let created = fx
        .post(
            BOT,
            &commits,
            json!({ "branch": "main", "commit_message": "api: add", "actions": [
                { "action": "create", "file_path": "c.txt", "content": "c\n" }
            ] }),
        )
        .await;
    assert_eq!(created.status, 201, "{}", created.text);
    assert_eq!(
        fx.get(BOT, &commits).await.body[0]["id"],
        created.body["id"]
    );
    assert_eq!(fx.sim.calls(Endpoint::ListCommits), 11);
    assert_eq!(fx.sim.calls(Endpoint::CreateCommit), 1);
}

#[tokio::test]
async fn a_path_lists_the_commits_that_changed_it_across_renames() {
    let fx = Fixture::start().await;
    let c1 = push(&fx, &[("a.txt", Some("1\n"))]);
    let c2 = push(&fx, &[("dir/b.txt", Some("b\n"))]);
    let c3 = push(&fx, &[("a.txt", Some("2\n"))]);
    // An exact rename: a.txt's content moves to c.txt.
    let c4 = push(&fx, &[("a.txt", None), ("c.txt", Some("2\n"))]);
    let c5 = push(&fx, &[("c.txt", Some("3\n"))]);
    let commits = format!("{}/repository/commits", fx.root);
    let by_path = |path: &str| {
        let path = format!("{commits}?path={path}");
        let fx = &fx;
        async move { fx.get(BOT, &path).await }
    };

    assert_eq!(ids(&by_path("c.txt").await), [&c5, &c4, &c3, &c1]);
    // Deleting a file is a change of it; no rename leads to it.
    assert_eq!(ids(&by_path("a.txt").await), [&c4, &c3, &c1]);
    assert_eq!(ids(&by_path("dir").await), [&c2]);
    assert_eq!(ids(&by_path("dir/").await), [&c2]);
    assert_eq!(ids(&by_path("dir%2Fb.txt").await), [&c2]);
    assert_eq!(by_path("nothing").await.body, json!([]));
    let paged = fx
        .get(BOT, &format!("{commits}?path=c.txt&per_page=3"))
        .await;
    assert_eq!(ids(&paged), [&c5, &c4, &c3]);
    assert_eq!(header(&paged, "x-next-page"), Some("2"));

    // A merge shows no diff: the branch's commit is listed for its file, the merge
    // commit is not, unless first parents are followed.
    let iid = fx.ready_mr("bot/one", &[("m.txt", "m\n")]).await;
    let branch_commit = fx.sim.merge_request(fx.project, iid).unwrap().sha;
    let merged = fx.put(BOT, &fx.mr_path(iid, "/merge"), json!({})).await;
    assert_eq!(merged.status, 200, "{}", merged.text);
    let merge = merged.str("merge_commit_sha").to_owned();
    assert_eq!(ids(&by_path("m.txt").await), [&branch_commit]);
    let everything = fx.get(BOT, &commits).await;
    assert_eq!(ids(&everything)[..3], [&merge, &branch_commit, &c5]);
    let first_parent = fx
        .get(BOT, &format!("{commits}?path=m.txt&first_parent=true"))
        .await;
    assert_eq!(ids(&first_parent), [&merge]);
    let mainline = fx.get(BOT, &format!("{commits}?first_parent=1")).await;
    assert_eq!(ids(&mainline)[..2], [&merge, &c5]);
}

#[tokio::test]
async fn an_unknown_ref_lists_nothing_and_unsupported_filters_are_refused() {
    let fx = Fixture::start().await;
    let commits = format!("{}/repository/commits", fx.root);
    // Gitaly's `CommitNotFound`, which `Repository#log` turns into no commits.
    for reference in ["nowhere", "0000000000", "nowhere..main"] {
        let unknown = fx
            .get(BOT, &format!("{commits}?ref_name={reference}"))
            .await;
        assert_eq!(unknown.status, 200, "{reference}");
        assert_eq!(unknown.body, json!([]), "{reference}");
        assert_eq!(header(&unknown, "x-next-page"), Some(""));
    }
    for reference in ["-main", "main%20branch", "main:README.md", "a%5Cb"] {
        let invalid = fx
            .get(BOT, &format!("{commits}?ref_name={reference}"))
            .await;
        assert_eq!(invalid.status, 400, "{reference}");
        assert_eq!(invalid.body, json!({ "message": "ref_name is invalid" }));
    }
    for (query, error) in [
        ("with_stats=maybe", "with_stats is invalid"),
        ("order=newest", "order does not have a valid value"),
        (
            "since=2024-01-01",
            "since is not supported by the simulator",
        ),
        ("author=alice", "author is not supported by the simulator"),
        ("all=true", "all is not supported by the simulator"),
        ("order=topo", "order is not supported by the simulator"),
        (
            "trailers=true",
            "trailers is not supported by the simulator",
        ),
        ("per_page=0", "per_page has a value not allowed"),
    ] {
        let refused = fx.get(BOT, &format!("{commits}?{query}")).await;
        assert_eq!(refused.status, 400, "{query}");
        assert_eq!(refused.body, json!({ "error": error }), "{query}");
    }
    // The defaults of those filters change nothing.
    let defaults = "all=false&order=default&trailers=false&author=";
    let plain = fx.get(BOT, &format!("{commits}?{defaults}")).await;
    assert_eq!(plain.body.as_array().map(Vec::len), Some(1));
    let missing = fx
        .get(BOT, "/projects/nope%2Fnope/repository/commits")
        .await;
    assert_eq!(missing.status, 404);
}

#[tokio::test]
async fn a_forced_push_rewrites_a_branch_onto_a_divergent_history() {
    let fx = Fixture::start().await;
    let root = fx.sim.branch_head(fx.project, "main").unwrap();
    let c1 = push(&fx, &[("a.txt", Some("1\n"))]);
    let c2 = push(&fx, &[("a.txt", Some("2\n"))]);

    // A commit built off c1, on no branch until the forced push.
    let rewritten = fx
        .sim
        .push_onto(fx.project, fx.bot, &c1, &[("b.txt", Some("b\n"))])
        .unwrap();
    assert_eq!(fx.sim.branch_head(fx.project, "main").unwrap(), c2);
    assert_eq!(
        fx.sim.commit_parents(fx.project, &rewritten),
        Some(vec![c1.clone()])
    );
    fx.sim
        .force_push(fx.project, fx.bot, "main", &rewritten)
        .unwrap();
    assert_eq!(fx.sim.branch_head(fx.project, "main").unwrap(), rewritten);
    let files = fx.sim.files(fx.project, "main").unwrap();
    assert_eq!(files["a.txt"], "1\n");
    assert_eq!(files["b.txt"], "b\n");
    let commits = format!("{}/repository/commits", fx.root);
    assert_eq!(ids(&fx.get(BOT, &commits).await), [&rewritten, &c1, &root]);
    // The commit left behind is still readable by its id, as git keeps it.
    let old = fx
        .get(BOT, &format!("{}/repository/commits/{c2}", fx.root))
        .await;
    assert_eq!(old.status, 200);

    // Back to an older commit; a branch's merge request takes its forced head.
    fx.sim
        .force_push(fx.project, fx.bot, "main", &root)
        .unwrap();
    assert_eq!(ids(&fx.get(BOT, &commits).await), [&root]);
    let iid = fx.open_mr("bot/one", &[("x.txt", "x\n")]).await;
    let before = fx.sim.merge_request(fx.project, iid).unwrap();
    fx.sim
        .force_push(fx.project, fx.bot, "bot/one", &rewritten)
        .unwrap();
    let after = fx.sim.merge_request(fx.project, iid).unwrap();
    assert_eq!(after.sha, rewritten);
    assert_ne!(after.head_pipeline, before.head_pipeline);

    assert!(matches!(
        fx.sim.force_push(fx.project, fx.bot, "ghost", &root),
        Err(SimError::UnknownBranch(_))
    ));
    assert!(matches!(
        fx.sim.force_push(fx.project, fx.bot, "main", "nope"),
        Err(SimError::UnknownCommit(_))
    ));
    assert!(matches!(
        fx.sim.push_onto(fx.project, fx.bot, "nope", &[]),
        Err(SimError::UnknownCommit(_))
    ));
    assert!(matches!(
        fx.sim.push_onto(
            fx.project,
            fx.bot,
            &root,
            &[("README.md", None), ("README.md", None)]
        ),
        Err(SimError::Refused(_))
    ));

    // The same over the control API.
    let project = format!("{}/_sim/projects/{}", fx.sim.base_url(), fx.project);
    let onto = json!({ "user_id": fx.bot, "base": "main", "changes": [
        { "path": "z.txt", "content": "z\n" }
    ] });
    let built = call(Method::POST, &format!("{project}/commits"), Some(onto)).await;
    assert_eq!(built.status, 201, "{:?}", built.body);
    let sha = built.body["sha"].as_str().unwrap().to_owned();
    assert_eq!(fx.sim.branch_head(fx.project, "main").unwrap(), root);
    let force = |sha: &str| {
        let body = json!({ "user_id": fx.bot, "sha": sha });
        let url = format!("{project}/branches/main");
        async move { call(Method::PUT, &url, Some(body)).await }
    };
    let forced = force(&sha).await;
    assert_eq!(forced.status, 204, "{:?}", forced.body);
    assert_eq!(fx.sim.branch_head(fx.project, "main").unwrap(), sha);
    assert_eq!(force("nope").await.status, 404);
}
