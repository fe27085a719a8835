//! Requests shown in a merge batch whose row the database does not hold
//! (a claim whose first write was lost while its later ones committed, as
//! a Galera node once did) go back to wait, and merge in the next batch.

use changegate::db::Db;

use super::batched::{apply_for, approve_all, manual_rounds, rounds_until_settled};
use super::end_to_end::world_with;
use super::train::until;
use crate::helpers::each_backend;

/// A batch id no row has.
const MISSING_BATCH: i64 = 987_654;

/// Points the waiting rows of `ids` at [`MISSING_BATCH`], as the torn claim
/// left its members.
async fn point_at_missing_batch(db: &Db, ids: &[String]) {
    for id in ids {
        changegate::with_pool!(db, writer, |pool| {
            sqlx::query("UPDATE merge_batch_request SET batch_id = ? WHERE operation_id = ?")
                .bind(MISSING_BATCH)
                .bind(id)
                .execute(pool)
                .await
                .map(|_| ())
        })
        .unwrap();
    }
}

/// How many history entries of `id` say its batch was lost.
async fn requeued_entries(db: &Db, id: &str) -> i64 {
    let sql = "SELECT COUNT(*) FROM operation_history WHERE operation_id = ? \
               AND message LIKE '%merge batch it was put in was lost%'";
    changegate::with_pool!(db, writer, |pool| {
        sqlx::query_scalar(sql).bind(id).fetch_one(pool).await
    })
    .unwrap()
}

#[tokio::test]
async fn requests_pointing_at_a_merge_batch_that_does_not_exist_wait_again_and_merge() {
    for test_db in each_backend().await {
        let w = world_with(&test_db.url, manual_rounds()).await;
        let ids = vec![
            apply_for(&w, "member0", "read").await,
            apply_for(&w, "member1", "read").await,
        ];
        approve_all(&w, &ids).await;
        until(&w, &ids[1], |v| v["step"]["name"] == "QUEUED").await;
        point_at_missing_batch(&test_db.db, &ids).await;

        // The driver's next round finds them and puts them back to wait;
        // no claim round ran, so nothing else could have moved them.
        for id in &ids {
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
            while requeued_entries(&test_db.db, id).await == 0 {
                assert!(
                    std::time::Instant::now() < deadline,
                    "{}: {id} was not put back to wait",
                    test_db.name
                );
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
            let waiting = until(&w, id, |v| v["step"]["name"] == "QUEUED").await;
            assert!(waiting["batchId"].is_null(), "{}: {waiting}", test_db.name);
        }

        let views = rounds_until_settled(&w, &ids).await;
        for view in &views {
            assert_eq!(view["status"], "VALIDATED", "{}: {view}", test_db.name);
            assert_ne!(view["batchId"].as_i64(), Some(MISSING_BATCH));
        }
        for id in &ids {
            assert_eq!(
                requeued_entries(&test_db.db, id).await,
                1,
                "{}",
                test_db.name
            );
        }
        w.app.stop().await.unwrap();
    }
}
