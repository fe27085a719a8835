//! `audit_log`: operator actions, append-only.

use serde_json::Value;

use super::{Db, DbTx};
use crate::{with_pool, with_tx};

/// The key the server writes the authenticated operator under, over
/// whatever the client sent there.
pub const OPERATOR_KEY: &str = "__authenticatedOperator";
const MAX_VALUE_CHARS: usize = 500;
const SECRET_WORDS: [&str; 5] = ["secret", "token", "password", "key", "credential"];

/// The client's parameters, copied, then the operator written over the
/// reserved key (in that order, so a client cannot forge it), with the
/// reserved key dropped wherever else the client put it (an entry must name
/// one operator, the authenticated one), secret-looking values redacted and
/// long strings cut.
pub fn audited_params(client: &Value, operator: &str) -> Value {
    let mut params = match client {
        Value::Object(map) => Value::Object(map.clone()),
        _ => Value::Object(serde_json::Map::new()),
    };
    redact(&mut params);
    params[OPERATOR_KEY] = Value::String(operator.to_owned());
    params
}

fn redact(value: &mut Value) {
    match value {
        Value::Object(map) => {
            map.remove(OPERATOR_KEY);
            for (key, inner) in map.iter_mut() {
                let lower = key.to_lowercase();
                if SECRET_WORDS.iter().any(|word| lower.contains(word)) {
                    *inner = Value::String("[redacted]".to_owned());
                } else {
                    redact(inner);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(redact),
        Value::String(text) => {
            if let Some(shown) = url_without_secrets(text) {
                *text = shown;
            }
            if text.chars().count() > MAX_VALUE_CHARS {
                *text = text.chars().take(MAX_VALUE_CHARS).collect::<String>() + "…";
            }
        }
        _ => {}
    }
}

/// `text` as a URL fit to show, when it is an http(s) URL that carries
/// credentials (`user:password@`) or a secret-looking query parameter
/// (`?token=…`): those are replaced by `[redacted]`. `None` when there is
/// nothing to hide (or it is no such URL).
pub fn url_without_secrets(text: &str) -> Option<String> {
    let mut url = url::Url::parse(text).ok()?;
    if !matches!(url.scheme(), "http" | "https") {
        return None;
    }
    let mut changed = false;
    if !url.username().is_empty() || url.password().is_some() {
        let _ = url.set_username("[redacted]");
        let _ = url.set_password(None);
        changed = true;
    }
    let pairs: Vec<(String, String)> = url
        .query_pairs()
        .map(|(key, value)| {
            let lower = key.to_lowercase();
            if SECRET_WORDS.iter().any(|word| lower.contains(word)) || lower.contains("sig") {
                changed |= value != "[redacted]";
                (key.into_owned(), "[redacted]".to_owned())
            } else {
                (key.into_owned(), value.into_owned())
            }
        })
        .collect();
    if !changed {
        return None;
    }
    if !pairs.is_empty() {
        url.query_pairs_mut().clear().extend_pairs(pairs);
    }
    Some(url.to_string())
}

/// The outcome of an action that was done.
pub const DONE: &str = "DONE";
/// The outcome of an action the state did not allow (answered 409).
pub const REFUSED: &str = "REFUSED";
/// What the `refusal_reason` column holds.
const MAX_REFUSAL_REASON_CHARS: usize = 500;

/// Appends one entry for an action that was done, in the caller's
/// transaction (the action's own, so the entry exists if and only if the
/// action happened).
pub async fn append_audit(
    tx: &mut DbTx,
    actor: &str,
    action: &str,
    subject: &str,
    params: &Value,
) -> Result<(), sqlx::Error> {
    insert(tx, actor, action, subject, params, DONE, None).await
}

/// Appends one entry for an action that was refused, with `reason`, the
/// refusal's message (cut to what the column holds).
pub async fn append_refusal(
    tx: &mut DbTx,
    actor: &str,
    action: &str,
    subject: &str,
    params: &Value,
    reason: &str,
) -> Result<(), sqlx::Error> {
    let reason: String = reason.chars().take(MAX_REFUSAL_REASON_CHARS).collect();
    insert(tx, actor, action, subject, params, REFUSED, Some(&reason)).await
}

async fn insert(
    tx: &mut DbTx,
    actor: &str,
    action: &str,
    subject: &str,
    params: &Value,
    outcome: &str,
    refusal_reason: Option<&str>,
) -> Result<(), sqlx::Error> {
    let sql = "INSERT INTO audit_log (actor, action, subject, params, outcome, refusal_reason) \
               VALUES (?, ?, ?, ?, ?, ?)";
    let params = params.to_string();
    with_tx!(tx, |conn| {
        sqlx::query(sql)
            .bind(actor)
            .bind(action)
            .bind(subject)
            .bind(&params)
            .bind(outcome)
            .bind(refusal_reason)
            .execute(conn)
            .await
            .map(|_| ())
    })
}

/// `params` as they may be shown: without the keys the server reserves
/// (those starting with `__`, at any depth), whose values are kept in
/// columns of their own (the operator is the entry's actor).
pub fn shown_params(params: &Value) -> Value {
    match params {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(key, _)| !key.starts_with("__"))
                .map(|(key, inner)| (key.clone(), shown_params(inner)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(shown_params).collect()),
        other => other.clone(),
    }
}

/// One audit entry.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct AuditRow {
    /// Who.
    pub actor: String,
    /// What.
    pub action: String,
    /// On what.
    pub subject: String,
    /// Parameters (JSON).
    pub params: String,
    /// [`DONE`] or [`REFUSED`].
    pub outcome: String,
    /// Why it was refused (the answer's message); none when done.
    pub refusal_reason: Option<String>,
}

/// One audit entry with its place and time.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct AuditEntry {
    /// Row id; also the cursor.
    pub id: i64,
    /// The entry.
    #[sqlx(flatten)]
    pub row: AuditRow,
    /// Database time it was written.
    pub created_at: chrono::NaiveDateTime,
}

/// Entries newest first, below `before_id` when given (the primary key serves it).
pub async fn list_audit_page(
    db: &Db,
    before_id: Option<i64>,
    limit: u32,
) -> Result<Vec<AuditEntry>, sqlx::Error> {
    let sql = "SELECT id, actor, action, subject, params, outcome, refusal_reason, created_at \
               FROM audit_log WHERE id < ? ORDER BY id DESC LIMIT ?";
    with_pool!(db, reader, |pool| {
        sqlx::query_as(sql)
            .bind(before_id.unwrap_or(i64::MAX))
            .bind(limit)
            .fetch_all(pool)
            .await
    })
}

/// The entries about `subject`, oldest first.
pub async fn list_audit(db: &Db, subject: &str) -> Result<Vec<AuditRow>, sqlx::Error> {
    let sql = "SELECT actor, action, subject, params, outcome, refusal_reason FROM audit_log \
               WHERE subject = ? ORDER BY id";
    with_pool!(db, reader, |pool| {
        sqlx::query_as(sql).bind(subject).fetch_all(pool).await
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn the_server_writes_the_operator_over_the_clients_value_and_redacts_secrets() {
        let client = json!({
            "reason": "x".repeat(600),
            "__authenticatedOperator": "mallory",
            "apiToken": "abc",
            "nested": { "password": "p", "keep": 1, "__authenticatedOperator": "mallory" },
            "list": [{ "__authenticatedOperator": "mallory", "n": 2 }],
        });
        let params = audited_params(&client, "admin");
        assert!(!params.to_string().contains("mallory"), "{params}");
        assert_eq!(params["list"][0]["n"], 2);
        assert_eq!(params[OPERATOR_KEY], "admin");
        assert_eq!(params["apiToken"], "[redacted]");
        assert_eq!(params["nested"]["password"], "[redacted]");
        assert_eq!(params["nested"]["keep"], 1);
        assert_eq!(params["reason"].as_str().unwrap().chars().count(), 501);
    }

    #[test]
    fn shown_parameters_leave_out_the_reserved_keys_at_any_depth() {
        let stored = json!({
            "reason": "stale",
            "__authenticatedOperator": "admin",
            "nested": { "__internal": 1, "keep": { "__deeper": true, "n": 2 } },
            "list": [{ "__authenticatedOperator": "admin", "n": 3 }, "_single"],
        });
        assert_eq!(
            shown_params(&stored),
            json!({
                "reason": "stale",
                "nested": { "keep": { "n": 2 } },
                "list": [{ "n": 3 }, "_single"],
            })
        );
    }

    #[test]
    fn urls_in_parameters_lose_their_credentials_and_secret_query_values() {
        let client = json!({
            "url": "https://bot:hunter2@hooks.example.com/in?token=abc&team=ops&X-Amz-Signature=f00",
            "plain": "https://hooks.example.com/in?team=ops",
        });
        let params = audited_params(&client, "admin");
        let url = params["url"].as_str().unwrap();
        assert!(
            !url.contains("hunter2") && !url.contains("abc") && !url.contains("f00"),
            "{url}"
        );
        assert!(url.contains("team=ops"), "{url}");
        assert_eq!(params["plain"], "https://hooks.example.com/in?team=ops");
    }
}
