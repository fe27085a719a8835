//! Outbound webhooks (SPEC §9): the relay from the `event` outbox into
//! deliveries, the delivery worker every instance runs, and endpoint URL rules.
//!
//! Delivery is at least once: a receiver can see a `webhook-id` again (an
//! instance died after sending and before recording the answer) and must
//! dedupe on it. No instance ever sends a delivery another instance holds:
//! claims are compare-and-swap writes and the database decides.

pub mod relay;
mod retry;
pub mod target;
pub mod worker;

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
