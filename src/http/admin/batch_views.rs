//! What operators see of a merge batch: its number (what its MR title,
//! branch and messages call it) beside its id (what the routes take), and
//! where a retried half comes from, named by those numbers too.

use std::collections::HashMap;

use serde::Serialize;
use utoipa::openapi::schema::{Object, ObjectBuilder, Type};

use crate::db::Db;
use crate::db::batches::{BatchRow, shown_numbers};
use crate::http::api::status::rfc3339;

/// One batch.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct BatchView {
    /// Its id, as the routes take it (`/admin/v1/batches/{batchId}`).
    id: i64,
    /// Its number among its project's batches, 1, 2, 3, … without gaps:
    /// what its MR title, its branch and the requests' messages call it. A
    /// batch an earlier release claimed while this one was being rolled out
    /// has none and goes by its id, as that release named it.
    number: i64,
    #[schema(schema_with = batch_status_schema)]
    status: String,
    #[schema(schema_with = batch_phase_schema)]
    phase: String,
    /// The GitLab project of its MR.
    project: String,
    /// Its place in its partition's merge train while active (1: the
    /// front, the only one that may merge).
    train_position: i64,
    /// The batch it was built on (its branch starts at that batch's head);
    /// absent when built on the target branch.
    #[serde(skip_serializing_if = "Option::is_none")]
    ahead_batch_id: Option<i64>,
    /// The commit its branch starts from, when it was built in a train.
    #[serde(skip_serializing_if = "Option::is_none")]
    base_sha: Option<String>,
    /// The head its pipeline tests.
    #[serde(skip_serializing_if = "Option::is_none")]
    head_sha: Option<String>,
    /// How often it was built again (a batch ahead failed, or the target
    /// branch moved); each build has a branch and MR of its own.
    rebuilds: i32,
    /// The half of a failed batch it retries, as a path of batch ids and
    /// halves (`3a`, `3a/5b`); empty for a first try.
    split_group: String,
    /// The same path, each failed batch with its number, first try first.
    split_from: Vec<SplitStep>,
    /// Its MR, once opened.
    #[serde(skip_serializing_if = "Option::is_none")]
    merge_request: Option<BatchMergeRequest>,
    /// The head that was merged.
    #[serde(skip_serializing_if = "Option::is_none")]
    merge_sha: Option<String>,
    /// Why it ended as it did, or what it is waiting for.
    #[serde(skip_serializing_if = "Option::is_none")]
    message: Option<String>,
    #[schema(value_type = String, format = DateTime)]
    created_at: String,
    #[schema(value_type = String, format = DateTime)]
    updated_at: String,
}

/// The Merge Request of a batch; `url` is null when GitLab gave none.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct BatchMergeRequest {
    iid: i64,
    url: Option<String>,
}

/// One step of a split path: half `half` of the failed batch `batchId`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SplitStep {
    batch_id: i64,
    /// That batch's number, as [`BatchView`]'s.
    number: i64,
    /// `a` or `b`.
    half: String,
}

/// The statuses a batch row can hold (the active-slot column names
/// RUNNING and BLOCKED).
fn batch_status_schema() -> Object {
    strings(
        "`RUNNING`, `SUCCEEDED`, `FAILED` or `BLOCKED`",
        &["RUNNING", "SUCCEEDED", "FAILED", "BLOCKED"],
    )
}

/// The phases the runner moves a batch through.
fn batch_phase_schema() -> Object {
    strings(
        "`OPENING`, `PIPELINE`, `PASSED` (its pipeline passed; batches ahead merge first) or `MERGING` (meaningful while RUNNING)",
        &["OPENING", "PIPELINE", "PASSED", "MERGING"],
    )
}

fn strings(description: &str, values: &[&str]) -> Object {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .description(Some(description))
        .enum_values(Some(values.iter().copied()))
        .build()
}

/// The failed batches and halves a split group names (`3a/5b`: half a of
/// batch 3, then half b of batch 5), as the bisection writes them; a
/// segment of another shape is left out.
fn split_path(group: &str) -> Vec<(i64, &str)> {
    group
        .split('/')
        .filter_map(|segment| {
            let (id, half) = segment.split_at_checked(segment.len().checked_sub(1)?)?;
            let half_letter = half.bytes().all(|b| b.is_ascii_lowercase());
            let digits = !id.is_empty() && id.bytes().all(|b| b.is_ascii_digit());
            if !(half_letter && digits) {
                return None;
            }
            Some((id.parse().ok()?, half))
        })
        .collect()
}

/// The batches the split groups of `rows` name, each once.
fn named_batches<'a>(rows: impl IntoIterator<Item = &'a BatchRow>) -> Vec<i64> {
    let mut named: Vec<i64> = rows
        .into_iter()
        .flat_map(|row| split_path(&row.split_group))
        .map(|(id, _)| id)
        .collect();
    named.sort_unstable();
    named.dedup();
    named
}

/// The views of `rows`, with the numbers of the batches their split groups
/// name, in one read.
pub(super) async fn batch_views(
    db: &Db,
    rows: Vec<BatchRow>,
) -> Result<Vec<BatchView>, sqlx::Error> {
    let numbers = shown_numbers(db, &named_batches(&rows)).await?;
    Ok(rows
        .into_iter()
        .map(|row| BatchView::of(row, &numbers))
        .collect())
}

/// [`batch_views`] of one batch.
pub(super) async fn batch_view(db: &Db, row: BatchRow) -> Result<BatchView, sqlx::Error> {
    let numbers = shown_numbers(db, &named_batches([&row])).await?;
    Ok(BatchView::of(row, &numbers))
}

impl BatchView {
    /// The view of `row`; `numbers` holds those of the batches its split
    /// group names (one no longer found is left out of `splitFrom`).
    fn of(row: BatchRow, numbers: &HashMap<i64, i64>) -> Self {
        let split_from = split_path(&row.split_group)
            .into_iter()
            .filter_map(|(batch_id, half)| {
                Some(SplitStep {
                    batch_id,
                    number: *numbers.get(&batch_id)?,
                    half: half.to_owned(),
                })
            })
            .collect();
        Self {
            id: row.id,
            number: row.shown_number(),
            status: row.status,
            phase: row.phase,
            project: row.project,
            train_position: row.train_position,
            ahead_batch_id: row.ahead_batch_id,
            base_sha: row.base_sha,
            head_sha: row.head_sha,
            rebuilds: row.rebuilds,
            split_group: row.split_group,
            split_from,
            merge_request: row.mr_iid.map(|iid| BatchMergeRequest {
                iid,
                url: row.mr_url,
            }),
            merge_sha: row.merge_sha,
            message: row.message,
            created_at: rfc3339(row.created_at),
            updated_at: rfc3339(row.updated_at),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::split_path;

    #[test]
    fn a_split_group_names_each_failed_batch_and_half_from_the_first_try_on() {
        assert_eq!(split_path(""), vec![]);
        assert_eq!(split_path("3a"), vec![(3, "a")]);
        assert_eq!(split_path("3a/15b"), vec![(3, "a"), (15, "b")]);
        assert_eq!(split_path("a/x7/37/3b/é"), vec![(3, "b")]);
    }
}
