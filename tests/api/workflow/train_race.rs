//! Three instances building and merging one merge train on one database,
//! as separate processes: every request lands exactly once, and every merge
//! put on `main` exactly the tree its batch's pipeline tested, right after
//! the batch it was built on.

use std::time::Duration;

use changegate::db::batches::{BatchRow, list_batches, membership_history};
use changegate_sim::approval::{Decision, DecisionPolicy};
use changegate_sim::gitlab::MergeMethod;

use crate::durability::{all_validated, apply_as, config, free_port, outside, start};
use crate::helpers::{each_backend, train_depth};

const INSTANCES: usize = 3;
const REQUESTS: usize = 36;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_instances_build_and_merge_one_train_and_no_merge_precedes_the_batch_ahead() {
    for test_db in each_backend().await {
        let name = test_db.name;
        let outside = outside(DecisionPolicy::Auto {
            result: Decision::Approved,
            delay: Duration::from_millis(100),
        })
        .await;
        outside
            .gitlab
            .update_settings(outside.project, |s| s.merge_method = MergeMethod::Merge)
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let client = crate::helpers::plain_client()
            .timeout(Duration::from_secs(30))
            .build()
            .unwrap();
        let mut addresses = Vec::new();
        let mut services = Vec::new();
        for n in 0..INSTANCES {
            let port = free_port();
            let address = format!("http://127.0.0.1:{port}");
            let path = dir.path().join(format!("changegate-{n}.toml"));
            std::fs::write(
                &path,
                config(&test_db.url, port, &outside, "approval_first", true),
            )
            .unwrap();
            services.push(start(&path, &address, &client).await);
            addresses.push(address);
        }
        // Callbacks reach the first; every instance claims and drives.
        outside
            .approval
            .set_callback_url(format!("{}/callbacks/approval", addresses[0]));
        outside
            .deploy
            .set_callback_url(format!("{}/callbacks/deploy", addresses[0]));
        // Requests arrive over a few seconds, so batches board a train
        // whose pipelines (a second each) are running.
        let mut requests = Vec::new();
        for n in 0..REQUESTS {
            let user = format!("user{n}");
            let id = apply_as(&client, &addresses[n % INSTANCES], &user).await;
            requests.push((user, id));
            tokio::time::sleep(Duration::from_millis(80)).await;
        }
        all_validated(&client, &addresses[0], &requests, Duration::from_secs(120)).await;

        let batches = list_batches(&test_db.db, None, 500).await.unwrap();
        for (_, id) in &requests {
            let merged: Vec<i64> = batches
                .iter()
                .filter(|b| b.status == "SUCCEEDED")
                .map(|b| b.id)
                .collect();
            let mut times = 0;
            for batch in &merged {
                times += membership_history(&test_db.db, *batch)
                    .await
                    .unwrap()
                    .iter()
                    .filter(|row| row.operation_id == *id && row.event == "MERGED")
                    .count();
            }
            assert_eq!(times, 1, "{name}: {id} merged once");
        }
        let by_id = |id: i64| batches.iter().find(|b| b.id == id);
        let mut stacked = 0;
        for batch in batches.iter().filter(|b| b.merge_commit_sha.is_some()) {
            assert_eq!(batch.merge_sha, batch.head_sha, "{name}: {batch:?}");
            let Some(base) = &batch.base_sha else {
                continue;
            };
            let before = match batch.ahead_batch_id {
                Some(ahead) => {
                    stacked += 1;
                    let ahead: &BatchRow = by_id(ahead).unwrap();
                    assert_eq!(ahead.status, "SUCCEEDED", "{name}: {batch:?}");
                    assert_eq!(ahead.head_sha.as_ref(), Some(base), "{name}");
                    ahead.merge_commit_sha.clone().unwrap()
                }
                None => base.clone(),
            };
            let sha = batch.merge_commit_sha.as_deref().unwrap();
            let parents = outside.gitlab.commit_parents(outside.project, sha).unwrap();
            assert_eq!(
                parents,
                [before, batch.head_sha.clone().unwrap()],
                "{name}: batch #{} merged onto exactly what it was built on",
                batch.shown_number()
            );
        }
        if train_depth() > 1 {
            assert!(stacked > 0, "{name}: no batch was built on another");
        }
        drop(services);
    }
}
