//! The pages behind the simulator's `web_url`s.

use serde_json::json;

use changegate_sim::gitlab::Endpoint;

use super::support::{BOT, Fixture, Reply};

impl Fixture {
    /// `GET` of a web URL, without a token, as a browser opens it.
    async fn open(&self, url: &str) -> Reply {
        let response = self.client.get(url).send().await.unwrap();
        Self::reply(response).await.unwrap()
    }
}

#[tokio::test]
async fn merge_request_web_url_serves_an_escaped_page() {
    let fx = Fixture::start().await;
    let iid = fx
        .ready_mr(
            "bot/<one>",
            &[("cfg/a&b.yaml", "key: <b>\"v\"</b> & 'w'\n")],
        )
        .await;
    let retitled = fx
        .put(
            BOT,
            &fx.mr_path(iid, ""),
            json!({ "title": "<script>alert(1)</script> & co", "description": "Why: <i>x</i>" }),
        )
        .await;
    assert_eq!(retitled.status, 200, "{}", retitled.text);
    let url = retitled.str("web_url").to_owned();
    assert_eq!(
        url,
        format!("{}/config/repo/-/merge_requests/{iid}", fx.sim.base_url())
    );
    let polls_before = fx.sim.calls(Endpoint::GetMergeRequest);

    let page = fx.open(&url).await;
    assert_eq!(page.status, 200);
    assert!(
        page.headers["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/html")
    );
    let html = &page.text;
    for expected in [
        "&lt;script&gt;alert(1)&lt;/script&gt; &amp; co",
        "<dd class=\"state\">opened</dd>",
        "<dd class=\"source-branch\">bot/&lt;one&gt;</dd>",
        "<dd class=\"target-branch\">main</dd>",
        "<dd class=\"pipeline\">success</dd>",
        "<dd class=\"approved-by\">rev-alice, rev-bob</dd>",
        "Why: &lt;i&gt;x&lt;/i&gt;",
        "<h3 class=\"file\">cfg/a&amp;b.yaml</h3>",
        "key: &lt;b&gt;&quot;v&quot;&lt;/b&gt; &amp; &#39;w&#39;",
    ] {
        assert!(html.contains(expected), "{expected} missing from {html}");
    }
    assert!(
        !html.contains("<script>") && !html.contains("<i>"),
        "{html}"
    );
    // The page is no API call: nothing polled, nothing logged.
    assert_eq!(fx.sim.calls(Endpoint::GetMergeRequest), polls_before);

    let merged = fx.put(BOT, &fx.mr_path(iid, "/merge"), json!({})).await;
    assert_eq!(merged.status, 200, "{}", merged.text);
    let after = fx.open(&url).await.text;
    assert!(after.contains("<dd class=\"state\">merged</dd>"), "{after}");
    assert!(after.contains("cfg/a&amp;b.yaml"), "{after}");

    let unapproved = fx.open_mr("bot/two", &[("b", "b")]).await;
    let other = fx
        .open(&format!(
            "{}/config/repo/-/merge_requests/{unapproved}",
            fx.sim.base_url()
        ))
        .await;
    assert!(other.text.contains("<dd class=\"approved-by\">none</dd>"));

    let missing = fx
        .open(&format!(
            "{}/config/repo/-/merge_requests/99",
            fx.sim.base_url()
        ))
        .await;
    assert_eq!(missing.status, 404);
    let unknown = fx
        .open(&format!(
            "{}/nope/nope/-/merge_requests/1",
            fx.sim.base_url()
        ))
        .await;
    assert_eq!(unknown.status, 404);
}
