//! Several nodes of one database (a Galera cluster, say): `database.url`
//! names the first, `database.failover_hosts` the others, each reached with
//! everything else the URL says. At start-up and then every few seconds the
//! nodes are checked in order (a fresh connection that answers and, on a
//! Galera node with `database.galera_require_synced`, is `Synced`), and the
//! pool's new connections go to the first healthy one: away from a node
//! that failed, and back to an earlier one once it is healthy again.
//! Connections still open to a failed node fail and leave the pool.

use std::time::Duration;

use sqlx::mysql::{MySqlConnectOptions, MySqlConnection, MySqlPool};
use sqlx::{ConnectOptions, Connection};
use tokio_util::sync::CancellationToken;

use super::mysql_url::MySqlUrl;
use super::{Db, DbSlot};
use crate::config::DatabaseSettings;

/// How often the nodes are checked.
const CHECK_INTERVAL: Duration = Duration::from_secs(2);

/// The nodes of one database, in the order they are preferred.
#[derive(Debug, Clone)]
pub struct Nodes {
    options: Vec<MySqlConnectOptions>,
    require_synced: bool,
    timeout: Duration,
}

impl Nodes {
    /// The nodes `settings` name: the URL's host first.
    pub fn of(settings: &DatabaseSettings, url: &MySqlUrl) -> Self {
        let first = url.options.clone();
        let mut options = vec![first.clone()];
        for (host, port) in &settings.failover_hosts {
            options.push(first.clone().host(host).port(*port));
        }
        Self {
            options,
            require_synced: settings.galera_require_synced,
            timeout: settings.connect_timeout,
        }
    }

    /// The nodes of a MySQL `settings` with failover hosts; `None` with one node.
    pub fn configured(settings: &DatabaseSettings) -> Option<Self> {
        if settings.failover_hosts.is_empty() {
            return None;
        }
        let url = MySqlUrl::parse(&settings.url).ok()?;
        Some(Self::of(settings, &url))
    }

    /// The first node's options.
    pub fn first(&self) -> &MySqlConnectOptions {
        &self.options[0]
    }

    /// The first node, in order, that passes its health check.
    pub async fn first_healthy(&self) -> Option<&MySqlConnectOptions> {
        for options in &self.options {
            match self.check(options).await {
                Ok(()) => return Some(options),
                Err(reason) => {
                    tracing::debug!(node = %address(options), "database node not healthy: {reason}")
                }
            }
        }
        None
    }

    async fn check(&self, options: &MySqlConnectOptions) -> Result<(), String> {
        let check = async {
            let mut conn = options.connect().await.map_err(|err| err.to_string())?;
            let verdict = node_problem(&mut conn, self.require_synced).await;
            let _ = conn.close().await;
            verdict.map_or(Ok(()), Err)
        };
        tokio::time::timeout(self.timeout, check)
            .await
            .unwrap_or_else(|_| Err("no answer in time".to_owned()))
    }
}

/// Why the node `conn` is on should not be used, if it should not: a
/// Galera node that is not `Synced` (joining, a donor, cut off from the
/// cluster) when `require_synced`.
pub async fn node_problem(conn: &mut MySqlConnection, require_synced: bool) -> Option<String> {
    let galera = match super::open::wsrep_on(&mut *conn).await {
        Ok(galera) => galera,
        Err(err) => return Some(err.to_string()),
    };
    if !galera || !require_synced {
        return None;
    }
    let state: Option<(String, String)> =
        sqlx::query_as("SHOW STATUS LIKE 'wsrep_local_state_comment'")
            .fetch_optional(&mut *conn)
            .await
            .ok()
            .flatten();
    match state {
        Some((_, state)) if state == "Synced" => None,
        Some((_, state)) => Some(format!("the Galera node is {state}, not Synced")),
        None => Some("the Galera node reports no state".to_owned()),
    }
}

fn address(options: &MySqlConnectOptions) -> String {
    format!("{}:{}", options.get_host(), options.get_port())
}

/// Every `CHECK_INTERVAL`, points `slot`'s pool at the first healthy node,
/// until `shutdown`.
pub async fn watch(slot: DbSlot, nodes: Nodes, shutdown: CancellationToken) {
    let mut none_healthy = false;
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep(CHECK_INTERVAL) => {}
        }
        let Some(Db::MySql(mysql)) = slot.get() else {
            continue;
        };
        match nodes.first_healthy().await {
            Some(healthy) => {
                none_healthy = false;
                point_at(&mysql.pool, healthy);
            }
            None if !none_healthy => {
                none_healthy = true;
                tracing::warn!("no database node is healthy; requests answer 503 until one is");
            }
            None => {}
        }
    }
}

fn point_at(pool: &MySqlPool, node: &MySqlConnectOptions) {
    let current = pool.connect_options();
    if (current.get_host(), current.get_port()) == (node.get_host(), node.get_port()) {
        return;
    }
    tracing::warn!(
        from = %address(&current),
        to = %address(node),
        "database failed over: new connections go to another node"
    );
    pool.set_connect_options(node.clone());
}
