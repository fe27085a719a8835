//! Why a Galera node never gets a transaction as one multi-statement script
//! (`Db::script_pool`): when a write replicated from another node aborts
//! the script's transaction while the script runs (a "brute force" abort),
//! MariaDB rolls back the statements before the abort and commits the ones
//! after it. Sent statement by statement, the same transaction is told of
//! the abort as a deadlock and commits nothing.

use changegate::db::script::run_transaction;
use changegate::db::statement::{SqlValue, Statement};
use changegate::db::{Db, is_retryable_conflict, open};
use sqlx::{Connection, MySqlConnection, MySqlPool};

use super::GaleraDb;
use crate::helpers::{database_settings, wait_until};

/// Which node's row `claimed` holds for `k`, as node 2 sees it once it has
/// applied every write the cluster acknowledged (its pool waits to read).
async fn claimed_by(pool: &MySqlPool, k: i64) -> Option<String> {
    sqlx::query_scalar("SELECT node FROM claimed WHERE k = ?")
        .bind(k)
        .fetch_optional(pool)
        .await
        .unwrap()
}

async fn written_after(pool: &MySqlPool, k: i64) -> bool {
    sqlx::query_scalar::<_, i64>("SELECT COUNT(*) FROM written_after WHERE k = ?")
        .bind(k)
        .fetch_one(pool)
        .await
        .unwrap()
        > 0
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_aborted_script_commits_what_followed_the_abort_and_statement_by_statement_nothing() {
    let Some(cluster) = GaleraDb::create().await else {
        return;
    };
    let node_2 = open(&database_settings(&cluster.url(1))).await.unwrap();
    assert!(
        node_2.script_pool().is_none(),
        "a Galera node takes no scripts"
    );
    let Db::MySql(mysql) = &node_2 else {
        panic!("a Galera node is MySQL");
    };
    let pool = &mysql.pool;
    let mut node_1 = MySqlConnection::connect(&cluster.url(0)).await.unwrap();
    for ddl in [
        "CREATE TABLE claimed (k BIGINT PRIMARY KEY, node VARCHAR(8) NOT NULL)",
        "CREATE TABLE written_after (k BIGINT PRIMARY KEY)",
    ] {
        sqlx::raw_sql(ddl).execute(&mut node_1).await.unwrap();
    }
    let claim_on_node_1 = async |conn: &mut MySqlConnection, k: i64| {
        sqlx::query("INSERT INTO claimed (k, node) VALUES (?, 'node1')")
            .bind(k)
            .execute(conn)
            .await
            .unwrap();
    };

    // A script that claims 1 on node 2, pauses, and writes after the pause.
    let script = tokio::spawn({
        let pool = pool.clone();
        async move {
            let statements = [
                Statement {
                    sql: "INSERT INTO claimed (k, node) VALUES (?, 'node2')".to_owned(),
                    values: vec![SqlValue::Int(1)],
                },
                Statement {
                    sql: "DO SLEEP(5)".to_owned(),
                    values: Vec::new(),
                },
                Statement {
                    sql: "INSERT INTO written_after (k) VALUES (?)".to_owned(),
                    values: vec![SqlValue::Int(1)],
                },
            ];
            run_transaction(&pool, &statements)
                .await
                .map_err(|f| f.error)
        }
    });
    let mut watcher = MySqlConnection::connect(&cluster.url(1)).await.unwrap();
    wait_until("the script pauses on node 2", async || {
        sqlx::query_scalar::<_, i64>(
            "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE INFO LIKE 'DO SLEEP%'",
        )
        .fetch_one(&mut watcher)
        .await
        .unwrap()
            > 0
    })
    .await;
    // The same key claimed on node 1 commits first; replicated to node 2,
    // it aborts the script's transaction in its pause.
    claim_on_node_1(&mut node_1, 1).await;
    let answered = script.await.unwrap();
    assert_eq!(claimed_by(pool, 1).await.as_deref(), Some("node1"));
    assert!(
        written_after(pool, 1).await,
        "the statement after the abort is committed though the script's first is not \
         ({answered:?}); if this MariaDB keeps scripts whole, Db::script_pool may allow Galera"
    );

    // The same transaction, statement by statement, as every transaction
    // on a Galera node is written.
    let mut tx = pool.begin().await.unwrap();
    sqlx::query("INSERT INTO claimed (k, node) VALUES (2, 'node2')")
        .execute(&mut *tx)
        .await
        .unwrap();
    claim_on_node_1(&mut node_1, 2).await;
    wait_until("node 2 applies node 1's claim", async || {
        claimed_by(pool, 2).await.is_some()
    })
    .await;
    let after = sqlx::query("INSERT INTO written_after (k) VALUES (2)")
        .execute(&mut *tx)
        .await
        .expect_err("the abort is answered");
    assert!(is_retryable_conflict(&after), "{after:?}");
    drop(tx);
    assert_eq!(claimed_by(pool, 2).await.as_deref(), Some("node1"));
    assert!(!written_after(pool, 2).await, "nothing of it is committed");
    node_2.close().await;
}
