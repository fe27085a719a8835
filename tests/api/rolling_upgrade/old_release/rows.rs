//! Rows as the earlier releases' code declared them. Columns only the
//! release through 0012 read are `#[sqlx(default)]`: absent from the
//! release through 0008's result sets because its SQL never names them, and
//! decoded from the 0012 release's, whose statements name them, so a
//! column it reads that is gone fails its statement before any decoding.

use chrono::NaiveDateTime;
use sqlx::FromRow;

use changegate::domain::StepStatus;

/// An operation row as that release's `OperationRow` read it.
#[derive(Debug, Clone, FromRow)]
#[allow(
    dead_code,
    reason = "every column is decoded as the release did; only some are asserted on"
)]
pub struct OperationRow {
    pub id: i64,
    pub operation_id: String,
    pub kind: String,
    pub subject_id: String,
    pub target_key: String,
    pub requested_by: String,
    pub flow_order: String,
    pub step_code: i32,
    pub message: Option<String>,
    /// Migration 0009.
    #[sqlx(default)]
    pub obstacle: Option<String>,
    /// Migration 0012.
    #[sqlx(default)]
    pub unreachable_since: Option<NaiveDateTime>,
    pub params: String,
    pub reason: String,
    pub expires_at: Option<NaiveDateTime>,
    pub mr_iid: Option<i64>,
    pub mr_url: Option<String>,
    pub version: i64,
    pub due_at: Option<NaiveDateTime>,
    pub attempts: i32,
    pub created_at: NaiveDateTime,
    pub updated_at: NaiveDateTime,
}

/// A binding row as that release's `BindingRow` read it.
#[derive(Debug, Clone, FromRow)]
#[allow(
    dead_code,
    reason = "every column is decoded as the release did; only some are asserted on"
)]
pub struct BindingRow {
    pub id: i64,
    pub subject_id: String,
    pub target_key: String,
    pub operation_id: String,
    pub status: String,
    pub requested_by: String,
    pub params: String,
    pub expires_at: Option<NaiveDateTime>,
    pub version: i64,
    pub created_at: NaiveDateTime,
    pub updated_at: NaiveDateTime,
}

/// The status answer's row: the operation, its binding and its batch.
#[derive(Debug, Clone, FromRow)]
pub struct OperationPage {
    #[sqlx(flatten)]
    pub operation: OperationRow,
    pub binding_status: Option<String>,
    #[allow(dead_code, reason = "decoded as the release did")]
    pub binding_owner: Option<String>,
    #[allow(dead_code, reason = "decoded as the release did")]
    pub batch_id: Option<i64>,
    /// What keeps its batch from progressing (migration 0009).
    #[sqlx(default)]
    pub batch_obstacle: Option<String>,
}

/// A row of the operators' listing.
#[derive(Debug, Clone, FromRow)]
#[allow(dead_code, reason = "decoded as the release did")]
pub(super) struct ListedOperation {
    #[sqlx(flatten)]
    operation: OperationRow,
    binding_status: Option<String>,
    binding_owner: Option<String>,
}

/// An outbox event as the webhook relay read it.
#[derive(Debug, Clone, FromRow)]
#[allow(dead_code, reason = "decoded as the release did")]
pub(super) struct EventRow {
    id: i64,
    event_type: String,
    operation_id: String,
    subject_id: String,
    target_key: String,
    from_status: Option<String>,
    to_status: String,
    payload: String,
    created_at: NaiveDateTime,
}

/// A merge batch as the 0012 release's `BatchRow` read it.
#[derive(Debug, Clone, FromRow)]
#[allow(dead_code, reason = "decoded as the release did")]
pub(super) struct BatchRow {
    pub id: i64,
    pub status: String,
    pub partition_key: String,
    pub project: String,
    pub split_group: String,
    pub phase: String,
    pub mr_iid: Option<i64>,
    pub mr_url: Option<String>,
    pub merge_sha: Option<String>,
    pub merge_commit_sha: Option<String>,
    pub polls: i32,
    pub message: Option<String>,
    pub obstacle: Option<String>,
    pub version: i64,
    pub created_at: NaiveDateTime,
    pub updated_at: NaiveDateTime,
}

/// A request waiting for a merge round (its `Waiting`).
#[derive(Debug, Clone, FromRow)]
pub(super) struct Waiting {
    pub id: i64,
    pub operation_id: String,
    pub project: String,
    pub split_group: String,
}

/// A member's operation as a set-based move locked it.
#[derive(Debug, Clone, FromRow)]
pub(super) struct LockedOperation {
    pub operation_id: String,
    pub step_code: i32,
    pub version: i64,
}

/// A member's binding as a set-based move locked it.
#[derive(Debug, Clone, FromRow)]
#[allow(dead_code, reason = "decoded as the release did")]
pub(super) struct LockedBinding {
    pub operation_id: String,
    pub subject_id: String,
    pub target_key: String,
    pub status: String,
}

/// An operation a deploy callback may flip (its `MrOperation`).
#[derive(Debug, Clone, FromRow)]
#[allow(dead_code, reason = "decoded as the release did")]
pub(super) struct MrOperation {
    pub operation_id: String,
    pub target_key: String,
}

/// A step's name, as the event payload carries it.
pub(super) fn step_name(code: i64) -> &'static str {
    i32::try_from(code)
        .ok()
        .and_then(|code| StepStatus::from_code(code).ok())
        .map_or("UNKNOWN", StepStatus::name)
}
