//! `GET /admin/v1/overview`: the ops console's first glance: requests by
//! status, the one waiting longest in each unfinished status, and the
//! outcomes of the last day hour by hour.

use axum::Json;
use chrono::NaiveDateTime;
use serde::Serialize;

use crate::db::overview::{oldest_unfinished, outcomes_by_hour, requests_by_status};
use crate::http::api::status::rfc3339;
use crate::http::error::ApiResult;
use crate::http::extract::Database;

/// The hours the outcome chart covers.
const HOURS: u32 = 24;

/// The overview.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Overview {
    /// Every status that holds requests, with how many (a request's status
    /// is its binding's: superseded requests are counted under the request
    /// that holds their binding now).
    statuses: Vec<StatusCount>,
    /// In each unfinished status that holds requests, the one longest in it.
    oldest: Vec<Oldest>,
    /// How many hours `outcomes` covers, ending now.
    hours: u32,
    /// How many requests reached each outcome, per hour (UTC), oldest
    /// first; hours and statuses without any are left out.
    outcomes: Vec<HourlyOutcome>,
}

/// Requests in one status.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
struct StatusCount {
    status: String,
    requests: i64,
}

/// The request longest in an unfinished status.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
struct Oldest {
    status: String,
    #[schema(value_type = uuid::Uuid)]
    operation_id: String,
    /// When it entered the status.
    #[schema(value_type = String, format = DateTime)]
    since: String,
}

/// Requests that reached `status` within one hour.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
struct HourlyOutcome {
    /// The hour's start (UTC).
    #[schema(value_type = String, format = DateTime)]
    hour: String,
    /// An outcome: `VALIDATED`, `CLOSED`, `REJECTED`, `BUSY_REJECTED`,
    /// `ABANDONED`, `CREATE_FAILED`, `HANDLE_FAILED` or `CLOSE_FAILED`.
    status: String,
    requests: i64,
}

/// Requests by status, the oldest in each unfinished status, and the last
/// day's outcomes by hour.
#[utoipa::path(get, path = "/admin/v1/overview", tag = "admin", operation_id = "get_overview",
    responses((status = 200, description = "The overview", body = Overview)))]
pub async fn get_overview(Database(db): Database) -> ApiResult<Json<Overview>> {
    let statuses = requests_by_status(&db)
        .await?
        .into_iter()
        .map(|(status, requests)| StatusCount { status, requests })
        .collect();
    let oldest = oldest_unfinished(&db)
        .await?
        .into_iter()
        .map(|(status, operation_id, since)| Oldest {
            status,
            operation_id,
            since: rfc3339(since),
        })
        .collect();
    let outcomes = outcomes_by_hour(&db, HOURS)
        .await?
        .into_iter()
        .filter_map(|(hour, status, requests)| {
            Some(HourlyOutcome {
                hour: hour_start(&hour)?,
                status,
                requests,
            })
        })
        .collect();
    Ok(Json(Overview {
        statuses,
        oldest,
        hours: HOURS,
        outcomes,
    }))
}

/// `"YYYY-MM-DD HH"` as the RFC 3339 start of that hour.
fn hour_start(hour: &str) -> Option<String> {
    NaiveDateTime::parse_from_str(&format!("{hour}:00:00"), "%Y-%m-%d %H:%M:%S")
        .ok()
        .map(rfc3339)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_hour_reads_as_its_start() {
        assert_eq!(
            hour_start("2026-12-02 07").as_deref(),
            Some("2026-12-02T07:00:00.000Z")
        );
        assert_eq!(hour_start("not an hour"), None);
    }
}
