//! 1,000 applications submitted at once, through approval, the merge queue
//! (`batch.max_requests = 500`), pipelines that take 2 s, two reviewer
//! approvals, merge and deploy confirmation: the time until every one is
//! VALIDATED (target: under 60 s). changegate runs in-process with its real
//! workflow against the three simulators on loopback.
//!
//! ```sh
//! cargo bench --bench merge_queue_flow                                                  # SQLite
//! CHANGEGATE_TEST_MYSQL_URL=mysql://root@127.0.0.1:3306 cargo bench --bench merge_queue_flow   # MariaDB
//! ```

use std::time::{Duration, Instant};

use changegate_sim::gitlab::GitLabSimOptions;
use serde_json::json;

#[path = "support/outside.rs"]
mod support;
use support::outside;

const REQUESTS: usize = 1000;

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

async fn run(name: &str, database_url: &str) {
    let world = outside(GitLabSimOptions {
        pipeline_duration: Duration::from_secs(2),
        pipeline_steps_per_poll: 3,
        ..GitLabSimOptions::default()
    })
    .await;
    let (gitlab, project) = (&world.gitlab, world.project);
    let text = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\n[database]\nurl = {database_url:?}\nmax_connections = 20\n\
         [log]\nlevel = \"warn\"\n[access]\nmode = \"OPEN\"\n[rate_limit]\napply = 0\n\
         [authz.rules]\napply = [\"r\"]\nread = [\"r\"]\n[authz.grants]\n\"r\" = [\"*\"]\n\
         [targets.\"demo.feature-flags\"]\ndescription = \"bench\"\n\
         [executor]\nworkers = 16\nqueue_capacity = 4096\npoll_interval = \"200ms\"\n\
         [batch]\ninterval = \"1s\"\nmax_requests = 500\n\
         {}",
        world.sections()
    );
    let running = world.start_changegate(&text).await;
    let (address, client) = (&running.address, &running.client);

    let started = Instant::now();
    let mut submitters = tokio::task::JoinSet::new();
    for worker in 0..32 {
        let (client, address) = (client.clone(), address.clone());
        submitters.spawn(async move {
            for n in (worker..REQUESTS).step_by(32) {
                let answer = client
                    .post(format!("{address}/api/v1/applications"))
                    .header("x-auth-request-user", format!("user{n}"))
                    .json(&json!({ "targetKey": "demo.feature-flags", "reason": "bench" }))
                    .send()
                    .await
                    .expect("apply");
                assert_eq!(
                    answer.status(),
                    202,
                    "{}",
                    answer.text().await.unwrap_or_default()
                );
            }
        });
    }
    submitters.join_all().await;
    let submitted = started.elapsed();
    let db = &running.db;
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let validated: i64 = changegate::with_pool!(db, reader, |pool| {
            sqlx::query_scalar("SELECT COUNT(*) FROM binding WHERE status = 'VALIDATED'")
                .fetch_one(pool)
                .await
        })
        .expect("count");
        if validated as usize == REQUESTS || Instant::now() > deadline {
            let mrs = (1..)
                .map_while(|iid| gitlab.merge_request(project, iid))
                .count();
            println!(
                "| {name} | {REQUESTS} | {:.1} | {:.1} | {validated} | {mrs} |",
                submitted.as_secs_f64(),
                started.elapsed().as_secs_f64()
            );
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    running.stop().await;
}

fn main() {
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async {
        println!(
            "| database | requests | all submitted s | all VALIDATED s | validated | batch MRs |"
        );
        println!("|---|---|---|---|---|---|");
        let dir = tempfile::tempdir().expect("temp dir");
        run(
            "SQLite",
            &format!("sqlite://{}", dir.path().join("flow.db").display()),
        )
        .await;
        if let Ok(server) = std::env::var("CHANGEGATE_TEST_MYSQL_URL") {
            let server = server.trim_end_matches('/').to_owned();
            let name = format!("cg_flow_{}", std::process::id());
            admin(&server, &format!("CREATE DATABASE {name}")).await;
            run("MariaDB", &format!("{server}/{name}")).await;
            admin(&server, &format!("DROP DATABASE {name}")).await;
        }
    });
}
