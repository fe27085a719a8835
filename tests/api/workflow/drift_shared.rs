//! Drift of a shared file (a target that edits one key of it), on both
//! backends: a value changed by hand, a binding's entry removed and an
//! entry nobody asked for are reported key by key, with the diff of the
//! file; adopting a changed value gives the binding those parameters, and
//! a restore writes the removed entry again through the normal flow.

use serde_json::{Value, json};

use super::drift::{drift_until, events, kinds, repair};
use super::end_to_end::{World, WorldOptions, world_with};
use super::wait_for_as;
use crate::helpers::each_backend;

const FILE: &str = "config/pools.toml";

const CONFIG: &str = r#"
[drift]
interval = "200ms"
restore_requires_approval = false

[targets."team.pools"]
self_only = false
edit = { file = "config/pools.toml", key = "pools.{subject}" }
[targets."team.pools".params_schema]
type = "object"
additionalProperties = false
[targets."team.pools".params_schema.properties.size]
type = "integer"
minimum = 1
maximum = 500
default = 20
[targets."team.pools".params_schema.properties.mode]
type = "string"
enum = ["read", "read-write"]
default = "read"
"#;

/// The shared file as people keep it: one entry of their own.
const POOLS: &str = "\
# Connection pools, one table per team.

[pools.legacy]
size = 5 # do not raise: the old primary
";

fn place(subject: &str) -> String {
    format!("{FILE}#pools.{subject}")
}

async fn applied(w: &World, subject: &str, params: Value) -> String {
    let answer: Value = w
        .app
        .post_as(
            subject,
            "/api/v1/applications",
            &json!({ "targetKey": "team.pools", "subjectId": subject, "params": params,
                     "reason": "a pool" }),
        )
        .await
        .json()
        .await
        .unwrap();
    let id = answer["operationId"].as_str().unwrap().to_owned();
    let view = wait_for_as(&w.app, subject, &id, |v| {
        v["status"] == "VALIDATED" || v["next"] == "CONTACT_TEAM"
    })
    .await;
    assert_eq!(view["status"], "VALIDATED", "{view}");
    id
}

#[tokio::test]
async fn a_shared_file_drifts_key_by_key_and_is_adopted_or_restored_per_key() {
    for test_db in each_backend().await {
        let w = world_with(
            &test_db.url,
            WorldOptions {
                extra: CONFIG.to_owned(),
                ..WorldOptions::default()
            },
        )
        .await;
        w.gitlab
            .push(w.project, w.users[0], "main", &[(FILE, Some(POOLS))])
            .unwrap();
        applied(&w, "payments", json!({ "size": 40 })).await;
        applied(&w, "search", json!({ "mode": "read-write" })).await;
        // The entry people wrote themselves is one no binding names.
        let legacy = vec![(place("legacy"), "UNEXPECTED".to_owned())];
        drift_until(&w, |items| kinds(items) == legacy).await;

        let text = w.gitlab.file(w.project, "main", FILE).unwrap();
        let edited = text
            .replace("size = 40", "size = 41")
            .replace("[pools.search]\nmode = \"read-write\"\nsize = 20\n", "")
            + "\n[pools.mallory]\nsize = 1\n";
        assert!(!edited.contains("pools.search"), "{edited}");
        let hand = w
            .gitlab
            .push(w.project, w.users[1], "main", &[(FILE, Some(&edited))])
            .unwrap();
        let expected = vec![
            (place("legacy"), "UNEXPECTED".to_owned()),
            (place("mallory"), "UNEXPECTED".to_owned()),
            (place("payments"), "CHANGED".to_owned()),
            (place("search"), "MISSING".to_owned()),
        ];
        let items = drift_until(&w, |items| kinds(items) == expected).await;
        let payments = items
            .iter()
            .find(|i| i["path"] == place("payments"))
            .unwrap();
        assert_eq!(payments["file"], FILE, "{payments}");
        assert_eq!(payments["key"], json!(["pools", "payments"]));
        assert_eq!(payments["subjectId"], "payments");
        assert_eq!(
            payments["lastCommit"]["id"], hand,
            "{}: {payments}",
            test_db.name
        );
        let mallory = items
            .iter()
            .find(|i| i["path"] == place("mallory"))
            .unwrap();
        assert_eq!(mallory["subjectId"], "mallory", "{mallory}");

        // The diff is of the file: the binding's value against the branch's.
        let diff: Value = w
            .app
            .get_as(
                "admin",
                "/admin/v1/drift/diff?project=config%2Frepo&path=config%2Fpools.toml%23pools.payments",
            )
            .await
            .json()
            .await
            .unwrap();
        let patch = diff["diff"].as_str().unwrap();
        assert!(
            patch.contains("-size = 40") && patch.contains("+size = 41"),
            "{}: {diff}",
            test_db.name
        );

        // Adopted, the binding takes the value the branch holds.
        let (status, adopted) = repair(&w, &place("payments"), "adopt").await;
        assert_eq!(status, 200, "{adopted}");
        assert_eq!(
            adopted["adopted"],
            json!({ "targetKey": "team.pools", "subjectId": "payments",
                    "params": { "size": 41, "mode": "read" } }),
            "{}",
            test_db.name
        );
        let params: String = changegate::with_pool!(&test_db.db, reader, |pool| {
            sqlx::query_scalar(
                "SELECT params FROM binding WHERE subject_id = 'payments' AND target_key = 'team.pools'",
            )
            .fetch_one(pool)
            .await
            .unwrap()
        });
        assert_eq!(
            serde_json::from_str::<Value>(&params).unwrap(),
            json!({ "size": 41, "mode": "read" })
        );
        for place in [place("legacy"), place("mallory")] {
            let (status, ignored) = repair(&w, &place, "ignore").await;
            assert_eq!(status, 200, "{ignored}");
        }

        // Restored, the removed entry is written again by a change request.
        let answer = w
            .app
            .post_as(
                "admin",
                "/admin/v1/drift/restore",
                &json!({ "project": "config/repo", "path": place("search"),
                         "reason": "removed by mistake" }),
            )
            .await;
        assert_eq!(answer.status(), 202, "{}", test_db.name);
        let answer: Value = answer.json().await.unwrap();
        let id = answer["operationId"].as_str().unwrap().to_owned();
        let view = wait_for_as(&w.app, "admin", &id, |v| {
            v["status"] == "VALIDATED" || v["next"] == "CONTACT_TEAM"
        })
        .await;
        assert_eq!(view["status"], "VALIDATED", "{}: {view}", test_db.name);
        let text = w.gitlab.file(w.project, "main", FILE).unwrap();
        assert!(
            text.contains("[pools.search]") && text.contains("[pools.mallory]"),
            "the entry is back and the others stay: {text}"
        );
        drift_until(&w, |items| items.is_empty()).await;
        assert_eq!(
            events(&test_db.db, "binding.drift_resolved").await,
            vec![
                place("legacy"),
                place("mallory"),
                place("payments"),
                place("search")
            ],
            "{}",
            test_db.name
        );
    }
}
