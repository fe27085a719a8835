//! changegate on a multi-primary MariaDB Galera cluster, one instance per
//! node, run by `.ci/galera.sh`, which starts a 3-node cluster of its own
//! and names its nodes in `CHANGEGATE_TEST_GALERA_URLS` (comma-separated
//! server URLs, node 1 first). Without it these tests are skipped, unless
//! `CHANGEGATE_TEST_REQUIRE_GALERA` says they must run.

mod node_loss;
mod scripts;

use std::time::Duration;

use changegate::db::{Db, open};
use sqlx::Connection;
use tokio::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

use crate::helpers::database_settings;

const NODES_VAR: &str = "CHANGEGATE_TEST_GALERA_URLS";
const REQUIRE_VAR: &str = "CHANGEGATE_TEST_REQUIRE_GALERA";

/// A test that kills a node has the cluster to itself; the others share it.
static CLUSTER: RwLock<()> = RwLock::const_new(());

/// One database, created on node 1 (Galera replicates the DDL), named
/// through each node; dropped at the end.
pub struct GaleraDb {
    nodes: Vec<url::Url>,
    name: String,
    _shared: Option<RwLockReadGuard<'static, ()>>,
    _alone: Option<RwLockWriteGuard<'static, ()>>,
}

impl GaleraDb {
    /// A new database on the cluster, if one is configured, while no test
    /// has the cluster to itself.
    pub async fn create() -> Option<Self> {
        let nodes = Self::configured_nodes()?;
        Some(Self::create_on(nodes, Some(CLUSTER.read().await), None).await)
    }

    /// A new database on the cluster, if one is configured, once no other
    /// test uses the cluster: for a test that stops nodes.
    pub async fn create_alone() -> Option<Self> {
        let nodes = Self::configured_nodes()?;
        Some(Self::create_on(nodes, None, Some(CLUSTER.write().await)).await)
    }

    fn configured_nodes() -> Option<Vec<url::Url>> {
        match std::env::var(NODES_VAR) {
            Ok(text) if !text.trim().is_empty() => Some(
                text.split(',')
                    .map(|node| url::Url::parse(node.trim()).expect("a node URL"))
                    .collect(),
            ),
            _ => {
                assert!(
                    std::env::var_os(REQUIRE_VAR).is_none(),
                    "{REQUIRE_VAR} is set but {NODES_VAR} is not: the Galera tests cannot run"
                );
                eprintln!("skipped: {NODES_VAR} is not set (run .ci/galera.sh)");
                None
            }
        }
    }

    async fn create_on(
        nodes: Vec<url::Url>,
        shared: Option<RwLockReadGuard<'static, ()>>,
        alone: Option<RwLockWriteGuard<'static, ()>>,
    ) -> Self {
        let db = Self {
            nodes,
            name: format!("cg_galera_{}", uuid::Uuid::new_v4().simple()),
            _shared: shared,
            _alone: alone,
        };
        db.admin(&format!("CREATE DATABASE `{}`", db.name)).await;
        db.visible_on_every_node().await;
        db
    }

    /// Waits until every node has applied the `CREATE DATABASE`: node 1
    /// answers once it has, the others apply it a moment later, and a
    /// connection naming the database fails on a node that has not yet.
    async fn visible_on_every_node(&self) {
        for (index, node) in self.nodes.iter().enumerate() {
            let mut conn = sqlx::MySqlConnection::connect(node.as_str())
                .await
                .unwrap_or_else(|err| panic!("connect to Galera node {}: {err}", index + 1));
            let deadline = std::time::Instant::now() + Duration::from_secs(10);
            loop {
                let found: Option<String> = sqlx::query_scalar(
                    "SELECT SCHEMA_NAME FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = ?",
                )
                .bind(&self.name)
                .fetch_optional(&mut conn)
                .await
                .expect("list the node's databases");
                if found.is_some() {
                    break;
                }
                assert!(
                    std::time::Instant::now() < deadline,
                    "Galera node {} never saw the database {}",
                    index + 1,
                    self.name
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            let _ = conn.close().await;
        }
    }

    /// The database's URL through node `index` (0-based).
    pub fn url(&self, index: usize) -> String {
        let mut url = self.nodes[index].clone();
        url.set_path(&self.name);
        url.into()
    }

    /// Node `index`'s `host:port`, as `database.failover_hosts` names it.
    pub fn address(&self, index: usize) -> String {
        let node = &self.nodes[index];
        format!(
            "{}:{}",
            node.host_str().expect("a node URL has a host"),
            node.port().unwrap_or(3306)
        )
    }

    /// How many nodes the cluster has.
    pub fn nodes(&self) -> usize {
        self.nodes.len()
    }

    async fn admin(&self, sql: &str) {
        let mut conn = sqlx::MySqlConnection::connect(self.nodes[0].as_str())
            .await
            .expect("connect to Galera node 1");
        sqlx::raw_sql(sqlx::AssertSqlSafe(sql.to_owned()))
            .execute(&mut conn)
            .await
            .expect("admin statement");
    }
}

impl Drop for GaleraDb {
    fn drop(&mut self) {
        let sql = format!("DROP DATABASE IF EXISTS `{}`", self.name);
        let server = self.nodes[0].to_string();
        let cleanup = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("cleanup runtime");
            runtime.block_on(async {
                if let Ok(mut conn) = sqlx::MySqlConnection::connect(&server).await {
                    let _ = sqlx::raw_sql(sqlx::AssertSqlSafe(sql))
                        .execute(&mut conn)
                        .await;
                }
            });
        });
        let _ = cleanup.join();
    }
}

async fn session_sync_wait(db: &Db) -> u64 {
    let Db::MySql(mysql) = db else {
        panic!("a Galera node is MySQL");
    };
    sqlx::query_scalar("SELECT @@SESSION.wsrep_sync_wait")
        .fetch_one(&mysql.pool)
        .await
        .unwrap()
}

#[tokio::test]
async fn every_connection_to_a_galera_node_waits_to_read_its_writes() {
    let Some(cluster) = GaleraDb::create().await else {
        return;
    };
    let mut settings = database_settings(&cluster.url(1));
    settings.connect_timeout = Duration::from_secs(10);
    let db = open(&settings).await.unwrap();
    assert_eq!(session_sync_wait(&db).await, 1, "the default: reads wait");
    db.close().await;
    settings.galera_sync_wait = 0;
    let db = open(&settings).await.unwrap();
    assert_eq!(session_sync_wait(&db).await, 0, "as configured");
    db.close().await;
}

#[tokio::test]
async fn three_migrates_on_three_nodes_at_once_all_succeed() {
    let dir = tempfile::tempdir().unwrap();
    for round in 0..10 {
        let Some(cluster) = GaleraDb::create().await else {
            return;
        };
        let children: Vec<std::process::Child> = (0..cluster.nodes())
            .map(|node| {
                crate::helpers::changegate_command()
                    .arg("migrate")
                    .current_dir(dir.path())
                    .env("CHANGEGATE_DATABASE_URL", cluster.url(node))
                    .stdout(std::process::Stdio::piped())
                    .stderr(std::process::Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        for (node, child) in children.into_iter().enumerate() {
            let output = child.wait_with_output().unwrap();
            assert!(
                output.status.success(),
                "round {round}, node {}: {}",
                node + 1,
                String::from_utf8_lossy(&output.stderr)
            );
        }
        let mut conn = sqlx::MySqlConnection::connect(&cluster.url(2))
            .await
            .unwrap();
        let recorded: (i64, i64) =
            sqlx::query_as("SELECT COUNT(*), CAST(SUM(success) AS SIGNED) FROM _sqlx_migrations")
                .fetch_one(&mut conn)
                .await
                .unwrap();
        let all = i64::try_from(changegate::db::MYSQL_MIGRATIONS.iter().count()).unwrap();
        assert_eq!(recorded, (all, all), "round {round}");
        conn.close().await.unwrap();
    }
}

#[tokio::test]
async fn submitted_on_one_node_and_approved_on_another_at_once_never_5xx_or_404() {
    let Some(cluster) = GaleraDb::create().await else {
        return;
    };
    let config = crate::helpers::REQUESTER_CONFIG;
    let first = crate::helpers::spawn_app(&cluster.url(0), config).await;
    first.wait_until_ready().await;
    let second = crate::helpers::spawn_app(&cluster.url(1), config).await;
    second.wait_until_ready().await;

    let (mut server_errors, mut not_found, mut approved) = (Vec::new(), 0, 0);
    for n in 0..150 {
        let body = serde_json::json!({ "targetKey": "team.access", "subjectId": format!("member{n}"),
                                       "params": { "level": "read" }, "reason": "cross-node" });
        let submitted = first
            .post_as(&format!("member{n}"), "/api/v1/applications", &body)
            .await;
        assert_eq!(submitted.status(), 202, "request {n}");
        let submitted: serde_json::Value = submitted.json().await.unwrap();
        let id = submitted["operationId"].as_str().unwrap().to_owned();

        let seen = second
            .get_as("admin", &format!("/api/v1/operations/{id}"))
            .await
            .status();
        match seen.as_u16() {
            404 => not_found += 1,
            500..=599 => server_errors.push(format!("GET {n}: {seen}")),
            _ => {}
        }
        let approve = format!("/admin/v1/approvals/{id}/approve");
        let answer = second
            .post_as("admin", &approve, &serde_json::json!({}))
            .await
            .status();
        match answer.as_u16() {
            200 => approved += 1,
            500..=599 => server_errors.push(format!("approve {n}: {answer}")),
            other => panic!("approve {n} answered {other}"),
        }
    }
    assert_eq!(server_errors, Vec::<String>::new());
    assert_eq!(
        not_found, 0,
        "a read on node 2 missed a write acknowledged on node 1"
    );
    assert_eq!(approved, 150);
    first.stop().await.unwrap();
    second.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn applied_for_on_one_node_and_decided_on_the_next_every_request_lands() {
    let Some(cluster) = GaleraDb::create().await else {
        return;
    };
    let urls: Vec<String> = (0..cluster.nodes()).map(|node| cluster.url(node)).collect();
    crate::contention::contend_on(&urls, "galera").await;
}
