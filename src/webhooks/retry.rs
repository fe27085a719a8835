//! How an attempt's answer becomes the next step: delivered, retried after a
//! jittered pause from `webhooks.retry_schedule` (at least `Retry-After` for
//! 429 and 503), or failed for good.

use std::time::Duration;

use reqwest::StatusCode;

use crate::clients::http::CallError;
use crate::config::WebhookSettings;
use crate::db::webhook_deliveries::{DeliveryRow, Ending};

/// The longest `Retry-After` honoured.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(24 * 3600);

/// How an attempt ends: 2xx delivered; 410 failed for good; anything else
/// (3xx included, and no answer) retried on the schedule, after at least
/// `Retry-After` for 429 and 503, until the schedule runs out.
pub(super) fn classify(
    answer: &Result<reqwest::Response, CallError>,
    delivery: &DeliveryRow,
    hooks: &WebhookSettings,
) -> (Ending, Option<StatusCode>, Option<String>) {
    let (status, error, retry_after) = match answer {
        Ok(response) => {
            let status = response.status();
            if status.is_success() {
                return (Ending::Delivered, Some(status), None);
            }
            if status == StatusCode::GONE {
                return (Ending::Failed, Some(status), Some("410 Gone".to_owned()));
            }
            let retry_after = matches!(
                status,
                StatusCode::TOO_MANY_REQUESTS | StatusCode::SERVICE_UNAVAILABLE
            )
            .then(|| retry_after(response))
            .flatten();
            (Some(status), format!("answered {status}"), retry_after)
        }
        Err(err) => {
            // Never the URL: it may carry a token.
            let what = match err {
                CallError::Timeout => "timed out".to_owned(),
                CallError::Unreachable { failure, .. } => {
                    format!("could not connect: {}", failure.reason())
                }
                CallError::Failed(_) => "request failed".to_owned(),
            };
            (None, what, None)
        }
    };
    let made = usize::try_from(delivery.attempts).unwrap_or(usize::MAX);
    let ending = match hooks.retry_schedule.get(made) {
        Some(pause) => Ending::RetryIn(jitter(*pause).max(retry_after.unwrap_or_default())),
        None => Ending::Failed,
    };
    (ending, status, Some(error))
}

fn retry_after(response: &reqwest::Response) -> Option<Duration> {
    let text = response
        .headers()
        .get(reqwest::header::RETRY_AFTER)?
        .to_str()
        .ok()?;
    let seconds: u64 = text.trim().parse().ok()?;
    Some(Duration::from_secs(seconds).min(MAX_RETRY_AFTER))
}

fn random_u64() -> u64 {
    let mut bytes = [0_u8; 8];
    // Without randomness the schedule simply has no jitter.
    let _ = getrandom::fill(&mut bytes);
    u64::from_le_bytes(bytes)
}

/// `pause` spread by ±20%, so failures that happened together do not retry together.
fn jitter(pause: Duration) -> Duration {
    if pause.is_zero() {
        return pause;
    }
    let factor = 0.8 + 0.4 * (random_u64() % 10_000) as f64 / 10_000.0;
    pause.mul_f64(factor)
}

pub(super) fn shuffle<T>(items: &mut [T]) {
    for i in (1..items.len()).rev() {
        let j = usize::try_from(random_u64() % (i as u64 + 1)).unwrap_or(0);
        items.swap(i, j);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jitter_stays_within_a_fifth() {
        for _ in 0..1000 {
            let spread = jitter(Duration::from_secs(100));
            assert!(spread >= Duration::from_secs(80) && spread <= Duration::from_secs(120));
        }
        assert_eq!(jitter(Duration::ZERO), Duration::ZERO);
    }
}
