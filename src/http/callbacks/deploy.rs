//! `POST /callbacks/deploy`: the deploy pipeline reports a merged MR deployed.

use axum::Json;
use serde::Deserialize;
use serde_json::Value;

use super::signed::{DeployPipeline, SignedJson};
use super::{Answer, first_receipt, valid_callback_id};
use crate::db::callbacks::{CallbackSource, insert_deploy_report, operations_of_mr};
use crate::domain::{BindingStatus, OperationId, StepStatus};
use crate::http::error::{ApiError, ApiResult};
use crate::http::extract::Database;
use crate::store::{Change, StoreError, flip_in, note_in};
use crate::write_tx;

/// The deploy outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
enum DeployStatus {
    Success,
    Failed,
}

/// What the deploy pipeline sends.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct DeployCallback {
    callback_id: String,
    mr_iid: i64,
    status: DeployStatus,
    #[serde(default)]
    operation_ids: Option<Vec<String>>,
    #[serde(default)]
    sha: Option<String>,
}

/// Marks the MR's MERGED operations VALIDATED (or notes the failure). When the
/// callback names its operations, exactly those are meant (beyond the notes,
/// which match by MR only). Each flip goes through flip-once, so this and the
/// reconciliation job never both count a binding.
#[utoipa::path(post, path = "/callbacks/deploy", tag = "callbacks",
    request_body = DeployCallback,
    params(("webhook-id" = String, Header), ("webhook-timestamp" = String, Header),
        ("webhook-signature" = String, Header, description = "Standard Webhooks `v1,<base64 HMAC-SHA256>`")),
    responses((status = 200, description = "`{code: OK | DUPLICATE | IGNORED_STALE}`", body = Object),
        (status = 401, description = "INVALID_SIGNATURE")))]
pub async fn deploy_callback(
    Database(db): Database,
    SignedJson(callback, _): SignedJson<DeployCallback, DeployPipeline>,
) -> ApiResult<Json<Value>> {
    if !valid_callback_id(&callback.callback_id) {
        return Err(ApiError::InvalidArgument(
            "field `callbackId`: 1 to 191 printable characters".to_owned(),
        ));
    }
    let success = callback.status == DeployStatus::Success;
    let sha = callback.sha.as_deref().filter(|sha| sha.len() <= 64);
    let applied = write_tx!(&db, |tx| {
        if !first_receipt(tx, CallbackSource::Deploy, &callback.callback_id).await? {
            return Ok(None);
        }
        insert_deploy_report(
            tx.db(),
            &callback.callback_id,
            callback.mr_iid,
            sha,
            success,
        )
        .await?;
        // Named operations count only if they are this MR's; the list comes
        // sorted, so concurrent callbacks lock rows in one order.
        let mut operations = operations_of_mr(tx.db(), callback.mr_iid).await?;
        if let Some(named) = &callback.operation_ids {
            let named: Vec<String> = named
                .iter()
                .filter_map(|id| OperationId::parse(id).ok())
                .map(|id| id.as_string())
                .collect();
            operations.retain(|id| named.contains(id));
        }
        let mut applied = 0;
        for operation_id in &operations {
            let outcome = if success {
                let change = Change {
                    step: StepStatus::DeployConfirmed,
                    message: None,
                    actor: "deploy-callback",
                };
                flip_in(
                    tx,
                    operation_id,
                    &[BindingStatus::Merged],
                    BindingStatus::Validated,
                    change,
                )
                .await
                .map(|flip| flip.is_some())
            } else {
                let change = Change {
                    step: StepStatus::DeployFailed,
                    message: Some("the deploy pipeline reported a failure"),
                    actor: "deploy-callback",
                };
                note_in(tx, operation_id, &[BindingStatus::Merged], change).await
            };
            match outcome {
                Ok(true) => applied += 1,
                Ok(false) | Err(StoreError::NotFound) => {}
                Err(err) => return Err(ApiError::internal(err)),
            }
        }
        Ok::<_, ApiError>(Some(applied))
    })
    .await?;
    let Some(applied) = applied else {
        return Ok(Answer::Duplicate.json());
    };
    Ok(if applied > 0 {
        Answer::Ok
    } else {
        Answer::IgnoredStale
    }
    .json())
}
