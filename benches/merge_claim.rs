//! How long one claim transaction of 500 waiting requests takes (target:
//! under 100 ms on the local MariaDB): the slot insert, the plain read, the
//! guarded claim UPDATE, the membership history and the members' move (their
//! operation, binding, history and outbox rows), all set-based.
//!
//! ```sh
//! cargo bench --bench merge_claim                                                  # SQLite
//! CHANGEGATE_TEST_MYSQL_URL=mysql://root@127.0.0.1:3306 cargo bench --bench merge_claim   # + MariaDB
//! ```

use std::time::{Duration, Instant};

use changegate::batch::{Claimed, Ordinary, Room, claim_batch};
use changegate::config::resolve::FlowOrder;
use changegate::config::{Settings, source};
use changegate::db::batch_queue::enqueue;
use changegate::db::{self, Db};
use changegate::domain::{BindingStatus, OperationId, OperationKind, StepStatus};
use changegate::store::{self, Change, Controls, NewRequest};

const MEMBERS: usize = 500;
const ROUNDS: usize = 7;

fn database(url: &str) -> changegate::config::DatabaseSettings {
    let table = source::parse(&format!("[database]\nurl = {url:?}\n")).expect("toml");
    Settings::from_table(&table, None).0.database
}

/// `MEMBERS` approved requests waiting for a round, as the approval step leaves them.
async fn waiting(db: &Db, round: usize) {
    for n in 0..MEMBERS {
        let request = NewRequest {
            operation_id: OperationId::new(),
            kind: OperationKind::Apply,
            subject_id: format!("r{round}-s{n}"),
            target_key: "demo.feature-flags".to_owned(),
            requested_by: format!("r{round}-s{n}"),
            flow_order: FlowOrder::ApprovalFirst,
            params: serde_json::json!({}),
            reason: "bench".to_owned(),
            expires_at: None,
            idempotency: None,
            busy: false,
            expired: false,
            trace_parent: None,
            controls: Controls::default(),
        };
        store::submit(db, &request).await.expect("submit");
        let id = request.operation_id.as_string();
        let queued = Change {
            step: StepStatus::Queued,
            message: None,
            actor: "bench",
        };
        store::transition(db, &id, 1, Some(BindingStatus::MrCreating), queued)
            .await
            .expect("approve");
        let mut tx = db.begin().await.expect("begin");
        enqueue(&mut tx, &id, "", "config/repo", None)
            .await
            .expect("enqueue");
        tx.commit().await.expect("commit");
    }
    tokio::time::sleep(Duration::from_millis(5)).await;
}

async fn measure(name: &str, url: &str) {
    let db = db::open(&database(url)).await.expect("open");
    let mut times = Vec::new();
    for round in 0..ROUNDS {
        waiting(&db, round).await;
        let started = Instant::now();
        let room = Room {
            members: MEMBERS as u32,
            in_flight: 1,
            ordinary: Ordinary::Unpaced,
        };
        let claimed = claim_batch(&db, "", room, &|_| true).await.expect("claim");
        times.push(started.elapsed());
        assert!(matches!(claimed, Claimed::Batch { ref members, .. } if members.len() == MEMBERS));
        let mut tx = db.begin().await.expect("begin");
        changegate::with_tx!(&mut tx, |conn| {
            sqlx::query("UPDATE merge_batch SET status = 'SUCCEEDED' WHERE status = 'RUNNING'")
                .execute(conn)
                .await
                .map(|_| ())
        })
        .expect("free the slot");
        tx.commit().await.expect("commit");
    }
    times.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    println!(
        "| {name} | {MEMBERS} | {:.1} | {:.1} | {:.1} |",
        ms(times[0]),
        ms(times[times.len() / 2]),
        ms(times[times.len() - 1])
    );
    db.close().await;
}

async fn admin(server: &str, sql: &str) {
    use sqlx::Connection;
    let mut conn = sqlx::MySqlConnection::connect(server)
        .await
        .expect("connect");
    sqlx::raw_sql(sqlx::AssertSqlSafe(sql.to_owned()))
        .execute(&mut conn)
        .await
        .expect("admin statement");
}

fn main() {
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async {
        println!("| database | members | min ms | median ms | max ms |");
        println!("|---|---|---|---|---|");
        let dir = tempfile::tempdir().expect("temp dir");
        measure(
            "SQLite",
            &format!("sqlite://{}", dir.path().join("claim.db").display()),
        )
        .await;
        if let Ok(server) = std::env::var("CHANGEGATE_TEST_MYSQL_URL") {
            let server = server.trim_end_matches('/').to_owned();
            let name = format!("cg_claim_{}", std::process::id());
            admin(&server, &format!("CREATE DATABASE {name}")).await;
            measure("MariaDB", &format!("{server}/{name}")).await;
            admin(&server, &format!("DROP DATABASE {name}")).await;
        }
    });
}
