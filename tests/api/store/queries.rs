//! Lookups for requesters and operators.

use changegate::db::bindings::{get_binding_of, list_bindings_of_requester};
use changegate::db::operation_listing::{
    ListedOperation, OperationFilter, StatusFilter, list_operations,
};
use changegate::domain::{BindingStatus, StepStatus};
use changegate::store;

use super::{TO_MERGED, TO_REJECTED, apply, drive};
use crate::helpers::each_backend;

#[tokio::test]
async fn my_bindings_come_newest_first_in_cursor_pages() {
    for test_db in each_backend().await {
        let db = &test_db.db;
        for target in ["a", "b", "c", "d", "e"] {
            let mut request = apply("app-1", target);
            request.requested_by = "alice".to_owned();
            store::submit(db, &request).await.unwrap();
        }
        store::submit(db, &apply("app-2", "a")).await.unwrap();

        let first = list_bindings_of_requester(db, "alice", None, 2)
            .await
            .unwrap();
        let targets: Vec<&str> = first.iter().map(|b| b.target_key.as_str()).collect();
        assert_eq!(targets, ["e", "d"], "{}", test_db.name);
        let second = list_bindings_of_requester(db, "alice", first.last().map(|b| b.id), 2)
            .await
            .unwrap();
        let third = list_bindings_of_requester(db, "alice", second.last().map(|b| b.id), 2)
            .await
            .unwrap();
        let rest: Vec<&str> = second
            .iter()
            .chain(&third)
            .map(|b| b.target_key.as_str())
            .collect();
        assert_eq!(rest, ["c", "b", "a"]);
        assert!(
            list_bindings_of_requester(db, "alice", third.last().map(|b| b.id), 2)
                .await
                .unwrap()
                .is_empty()
        );
    }
}

#[tokio::test]
async fn operators_filter_operations_by_status_step_age_target_and_subject() {
    for test_db in each_backend().await {
        let db = &test_db.db;
        let (merged, _) = drive(db, &apply("app-1", "t"), TO_MERGED).await;
        let (rejected, _) = drive(db, &apply("app-2", "t"), TO_REJECTED).await;
        let request = apply("app-3", "t");
        store::submit(db, &request).await.unwrap();
        let fresh = request.operation_id.as_string();

        let ids = |rows: Vec<ListedOperation>| {
            rows.into_iter()
                .map(|row| row.operation.operation_id)
                .collect::<Vec<_>>()
        };
        let all = list_operations(
            db,
            &OperationFilter {
                limit: 10,
                ..Default::default()
            },
        )
        .await
        .unwrap();
        assert_eq!(
            ids(all),
            [fresh.clone(), rejected.clone(), merged.clone()],
            "{}",
            test_db.name
        );

        let by_status = OperationFilter {
            status: Some(StatusFilter::Binding(BindingStatus::Merged)),
            limit: 10,
            ..Default::default()
        };
        let found = list_operations(db, &by_status).await.unwrap();
        assert_eq!(found[0].status, Some(BindingStatus::Merged));
        assert_eq!(ids(found), [merged.as_str()]);

        let by_step = OperationFilter {
            step: Some(StepStatus::CalledBackRejected),
            limit: 10,
            ..Default::default()
        };
        assert_eq!(
            ids(list_operations(db, &by_step).await.unwrap()),
            [rejected.as_str()]
        );

        let stale = OperationFilter {
            unchanged_for_ms: Some(60_000),
            limit: 10,
            ..Default::default()
        };
        assert!(
            list_operations(db, &stale).await.unwrap().is_empty(),
            "{}: nothing is a minute old",
            test_db.name
        );
        tokio::time::sleep(std::time::Duration::from_millis(30)).await;
        let recent = OperationFilter {
            unchanged_for_ms: Some(10),
            limit: 10,
            ..Default::default()
        };
        assert_eq!(
            list_operations(db, &recent).await.unwrap().len(),
            3,
            "{}",
            test_db.name
        );

        let page = OperationFilter {
            limit: 2,
            ..Default::default()
        };
        let first_page = list_operations(db, &page).await.unwrap();
        let next = OperationFilter {
            before_id: Some(first_page[1].operation.id),
            limit: 2,
            ..Default::default()
        };
        assert_eq!(
            ids(list_operations(db, &next).await.unwrap()),
            [merged.as_str()]
        );

        let by_subject = OperationFilter {
            subject_id: Some("app-2".to_owned()),
            limit: 10,
            ..Default::default()
        };
        assert_eq!(
            ids(list_operations(db, &by_subject).await.unwrap()),
            [rejected.as_str()]
        );
        let by_target = |target: &str| OperationFilter {
            target_key: Some(target.to_owned()),
            limit: 10,
            ..Default::default()
        };
        assert_eq!(list_operations(db, &by_target("t")).await.unwrap().len(), 3);
        assert!(
            list_operations(db, &by_target("u"))
                .await
                .unwrap()
                .is_empty()
        );

        let owned = get_binding_of(db, &merged).await.unwrap().unwrap();
        assert_eq!(owned.subject_id, "app-1");
    }
}

#[tokio::test]
async fn a_status_many_bindings_hold_is_listed_by_walking_the_operations() {
    for test_db in each_backend().await {
        let db = &test_db.db;
        let (merged, _) = drive(db, &apply("app-1", "t"), TO_MERGED).await;
        drive(db, &apply("app-2", "t"), TO_REJECTED).await;
        // More MERGED bindings than the listing sorts (1,000), of
        // operations that are not there: only the join order changes.
        let others = (0..1000)
            .map(|n| format!("('other-{n}', 't', 'gone-{n}', 'MERGED', 'x', '{{}}')"))
            .collect::<Vec<_>>()
            .join(", ");
        let insert = format!(
            "INSERT INTO binding (subject_id, target_key, operation_id, status, requested_by, params) \
             VALUES {others}"
        );
        changegate::with_pool!(db, writer, |pool| {
            sqlx::raw_sql(sqlx::AssertSqlSafe(insert.clone()))
                .execute(pool)
                .await
                .map(drop)
        })
        .unwrap();
        let by_status = OperationFilter {
            status: Some(StatusFilter::Binding(BindingStatus::Merged)),
            limit: 10,
            ..Default::default()
        };
        let found = list_operations(db, &by_status).await.unwrap();
        assert_eq!(found.len(), 1, "{}", test_db.name);
        assert_eq!(found[0].operation.operation_id, merged);
        assert_eq!(found[0].status, Some(BindingStatus::Merged));
    }
}
