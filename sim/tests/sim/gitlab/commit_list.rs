//! `GET …/repository/commits`: a branch's history newest first, by path across renames,
//! paginated without a count.

use changegate_sim::gitlab::Endpoint;
use serde_json::json;

use super::support::{BOT, Fixture, Reply};

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
