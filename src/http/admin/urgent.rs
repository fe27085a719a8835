//! `POST /admin/v1/operations/{operationId}/urgent`: an operator sends a
//! request that has not landed yet to its partition's urgent lane (SPEC
//! §12), audited with a reason. It goes in the next merge round, in a batch
//! of urgent requests only; a request already in a batch goes there when
//! that batch lets it go (it merges with it, or waits again after a failure).

use axum::Json;
use axum::extract::Path;

use super::attempt::Attempt;
use super::bodies::{RequiredReason, audited};
use super::operations::{
    ActedOn, answer, changed_meanwhile, owned, parse_operation_id, store_error,
};
use crate::batch::count_urgent;
use crate::db::Db;
use crate::db::batch_queue::{move_to_lane, partition_of_request};
use crate::db::operations::mark_urgent;
use crate::domain::{AWAITING_APPROVAL, IN_MERGE_QUEUE};
use crate::http::error::{ApiError, ApiResult};
use crate::http::extract::{AppJson, AuthUser, Database};
use crate::store::{Change, note_in, urgent_lane};
use crate::write_tx;

/// Marks a request urgent: the next merge round takes it, in a batch of
/// urgent requests only, built on the target branch as it is.
#[utoipa::path(post, path = "/admin/v1/operations/{operationId}/urgent", tag = "admin",
    operation_id = "mark_operation_urgent",
    params(("operationId" = uuid::Uuid, Path, description = "The operation id")),
    request_body = RequiredReason,
    responses((status = 200, description = "Urgent (also when it was already)", body = ActedOn),
        (status = 400, description = "INVALID_ARGUMENT: no usable reason"),
        (status = 404, description = "NOT_FOUND: no such operation"),
        (status = 409, description = "CONFLICT: it has landed or ended already, or changed meanwhile")))]
pub async fn mark_urgent_request(
    AuthUser(caller): AuthUser,
    Database(db): Database,
    Path(operation_id): Path<String>,
    AppJson(body): AppJson<RequiredReason>,
) -> ApiResult<Json<ActedOn>> {
    let reason = body.reason()?;
    let id = parse_operation_id(&operation_id)?;
    let operator = caller.identity.as_str();
    let attempt = Attempt::new(
        operator,
        "operation.urgent",
        id.clone(),
        audited(&body, operator),
    );
    let marked = attempt_mark(&db, &attempt, &id, &reason).await;
    attempt.refusal_audited(&db, marked).await
}

async fn attempt_mark(
    db: &Db,
    attempt: &Attempt<'_>,
    id: &str,
    reason: &str,
) -> ApiResult<Json<ActedOn>> {
    let (operation, status) = owned(db, id).await?;
    let waiting = [AWAITING_APPROVAL, IN_MERGE_QUEUE].concat();
    if !waiting.contains(&status) {
        return Err(ApiError::Conflict(
            "only a request that has not landed yet (awaiting approval or in the merge queue) can be made urgent",
        ));
    }
    if operation.urgent {
        return answer(db, id).await;
    }
    let operator = attempt.operator();
    let message = format!("marked urgent by {operator}: {reason}");
    write_tx!(db, |tx| {
        let change = Change {
            step: operation.step,
            message: Some(&message),
            actor: operator,
        };
        if !note_in(tx, id, &waiting, change)
            .await
            .map_err(store_error)?
            || !mark_urgent(tx.db(), id).await?
        {
            return Err(changed_meanwhile());
        }
        if let Some(partition) = partition_of_request(tx.db(), id).await? {
            move_to_lane(tx.db(), id, &urgent_lane(&partition)).await?;
        }
        attempt.done(tx.db()).await?;
        Ok::<_, ApiError>(())
    })
    .await?;
    count_urgent();
    answer(db, id).await
}
