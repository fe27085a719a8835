//! What the audit log records of an operator action, whichever way it
//! ends: done (in the action's own transaction) or refused because the state
//! did not allow it (answered 409). A refusal changed nothing, so its entry
//! is written after the action's transaction rolled back, in one of its own:
//! the log shows who tried what, on what, and why it was refused.

use axum::http::StatusCode;
use serde_json::Value;

use crate::db::audit::{append_audit, append_refusal};
use crate::db::{Db, DbTx};
use crate::http::error::{ApiError, ApiResult};
use crate::write_tx;

/// An operator action as it is audited.
pub struct Attempt<'a> {
    operator: &'a str,
    action: &'static str,
    subject: String,
    params: Value,
}

impl<'a> Attempt<'a> {
    /// `operator` doing `action` on `subject` with `params` (as
    /// [`super::bodies::audited`] makes them).
    pub fn new(
        operator: &'a str,
        action: &'static str,
        subject: impl Into<String>,
        params: Value,
    ) -> Self {
        Self {
            operator,
            action,
            subject: subject.into(),
            params,
        }
    }

    /// Who acts.
    pub fn operator(&self) -> &'a str {
        self.operator
    }

    /// Audits the action as done, in its transaction.
    pub async fn done(&self, tx: &mut DbTx) -> Result<(), sqlx::Error> {
        append_audit(tx, self.operator, self.action, &self.subject, &self.params).await
    }

    /// `result`, once a refusal in it (any 409) is audited with its message.
    /// When that entry cannot be written the answer is the database's error:
    /// the refusal would otherwise go unrecorded.
    pub async fn refusal_audited<T>(&self, db: &Db, result: ApiResult<T>) -> ApiResult<T> {
        let refusal = match &result {
            Err(err) if err.status_and_code().0 == StatusCode::CONFLICT => err.to_string(),
            _ => return result,
        };
        write_tx!(db, |tx| {
            append_refusal(
                tx.db(),
                self.operator,
                self.action,
                &self.subject,
                &self.params,
                &refusal,
            )
            .await?;
            Ok::<_, ApiError>(())
        })
        .await?;
        result
    }
}
