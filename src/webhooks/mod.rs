//! Outbound webhooks (SPEC §9): the relay from the `event` outbox into
//! deliveries, the delivery worker every instance runs, and endpoint URL rules.
//!
//! Delivery is at least once: a receiver can see a `webhook-id` again (an
//! instance died after sending and before recording the answer) and must
//! dedupe on it. No instance ever sends a delivery another instance holds:
//! claims are compare-and-swap writes and the database decides.

pub mod relay;
mod retry;
pub mod sealed;
mod send;
pub mod target;
pub mod worker;

use serde::Deserialize;

use crate::db::events::EventRow;

/// The bytes a subscriber receives for `event`, serialised once by the relay
/// and stored: `{"type", "timestamp", "data"}` (the Standard Webhooks shape).
pub fn body_of(event: &EventRow) -> String {
    let payload = serde_json::from_str::<serde_json::Value>(&event.payload)
        .unwrap_or_else(|_| serde_json::Value::String(event.payload.clone()));
    let body = serde_json::json!({
        "type": event.event_type,
        "timestamp": event.created_at.and_utc()
            .to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        "data": {
            "eventId": event.id,
            "operationId": event.operation_id,
            "subjectId": event.subject_id,
            "targetKey": event.target_key,
            "fromStatus": event.from_status,
            "toStatus": event.to_status,
            "payload": payload,
        },
    });
    body.to_string()
}

/// What a delivery's body says of the event it carries: the binding that
/// changed, how, and by which operation. Read back from the stored body
/// rather than the outbox row, because the body lives as long as the
/// delivery while retention may prune the event first (events age from
/// their creation, deliveries from their last attempt). A field the body
/// lacks (or a body that is not [`body_of`]'s JSON) is `None`.
#[derive(Debug, Default, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SentEvent {
    /// The operation whose flip it reports.
    pub operation_id: Option<String>,
    /// The binding's subject.
    pub subject_id: Option<String>,
    /// The binding's target.
    pub target_key: Option<String>,
    /// Status before (none for a new binding).
    pub from_status: Option<String>,
    /// Status after.
    pub to_status: Option<String>,
}

impl SentEvent {
    /// The event in a body [`body_of`] wrote.
    pub fn of_body(body: &str) -> Self {
        #[derive(Deserialize)]
        struct Sent {
            data: SentEvent,
        }
        serde_json::from_str::<Sent>(body)
            .map(|sent| sent.data)
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sent_body_names_the_binding_the_operation_and_the_flip() {
        let event = EventRow {
            id: 7,
            event_type: crate::db::events::BINDING_STATUS_CHANGED.to_owned(),
            operation_id: "op-1".to_owned(),
            subject_id: "alice".to_owned(),
            target_key: "demo.feature-flags".to_owned(),
            from_status: Some("MR_CREATED".to_owned()),
            to_status: "MERGED".to_owned(),
            payload: r#"{"step":"MERGED","operationId":"not this one"}"#.to_owned(),
            created_at: chrono::DateTime::UNIX_EPOCH.naive_utc(),
        };
        assert_eq!(
            SentEvent::of_body(&body_of(&event)),
            SentEvent {
                operation_id: Some("op-1".to_owned()),
                subject_id: Some("alice".to_owned()),
                target_key: Some("demo.feature-flags".to_owned()),
                from_status: Some("MR_CREATED".to_owned()),
                to_status: Some("MERGED".to_owned()),
            }
        );
    }

    #[test]
    fn a_body_of_another_shape_names_nothing() {
        assert_eq!(SentEvent::of_body("not json"), SentEvent::default());
        assert_eq!(
            SentEvent::of_body(r#"{"type":"x","data":{"other":1}}"#),
            SentEvent::default()
        );
    }
}
