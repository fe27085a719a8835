//! Standard Webhooks signing and verification, checked against the official
//! `standardwebhooks` crate in both directions.

use std::time::Duration;

use axum::http::{HeaderMap, HeaderValue};
use changegate::signature::{
    self, DEFAULT_TOLERANCE, HEADER_ID, HEADER_SIGNATURE, HEADER_TIMESTAMP, SecretError,
    SignatureError, WebhookSecret,
};
use standardwebhooks::Webhook;

/// The official crate's own test vector.
const SECRET: &str = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD";
const MSG_ID: &str = "msg_27UH4WbU6Z5A5EzD8u03UvzRbpk";
const BODY: &[u8] = br#"{"email":"test@example.com","username":"test_user"}"#;

fn now() -> i64 {
    chrono::Utc::now().timestamp()
}

fn headers(id: &str, timestamp: i64, signature: &str) -> HeaderMap {
    let mut headers = HeaderMap::new();
    headers.insert(HEADER_ID, HeaderValue::from_str(id).expect("visible ASCII"));
    headers.insert(HEADER_TIMESTAMP, HeaderValue::from(timestamp));
    headers.insert(
        HEADER_SIGNATURE,
        HeaderValue::from_str(signature).expect("visible ASCII"),
    );
    headers
}

fn secret(text: &str) -> WebhookSecret {
    WebhookSecret::parse(text).expect("valid secret")
}

fn check(
    secrets: &[WebhookSecret],
    headers: &HeaderMap,
    body: &[u8],
) -> Result<(), SignatureError> {
    signature::verify(secrets, headers, body, now(), DEFAULT_TOLERANCE)
}

#[test]
fn sign_matches_the_official_test_vector() {
    let signed = signature::sign(&secret(SECRET), MSG_ID, 1_649_367_553, BODY);
    assert_eq!(signed, "v1,tZ1I4/hDygAJgO5TYxiSd6Sd0kDW6hPenDe+bTa3Kkw=");
}

#[test]
fn the_official_library_accepts_our_signatures() {
    let ours = WebhookSecret::generate();
    let official = Webhook::new(&ours.expose()).unwrap();
    let timestamp = now();
    let signed = signature::sign(&ours, MSG_ID, timestamp, BODY);
    official
        .verify(BODY, &headers(MSG_ID, timestamp, &signed))
        .unwrap();
    // The official verifier is not lenient: a changed body fails there too.
    let tampered = br#"{"email":"evil@example.com","username":"test_user"}"#;
    assert!(
        official
            .verify(tampered, &headers(MSG_ID, timestamp, &signed))
            .is_err()
    );
}

#[test]
fn we_accept_the_official_librarys_signatures() {
    let official = Webhook::new(SECRET).unwrap();
    let timestamp = now();
    let signed = official.sign(MSG_ID, timestamp, BODY).unwrap();
    let headers = headers(MSG_ID, timestamp, &signed);
    assert_eq!(check(&[secret(SECRET)], &headers, BODY), Ok(()));
    assert_eq!(
        check(&[WebhookSecret::generate()], &headers, BODY),
        Err(SignatureError::NoMatch)
    );
}

#[test]
fn the_exact_bytes_are_signed_even_when_they_are_not_utf8() {
    let key = WebhookSecret::generate();
    let body = [0xff, 0x00, b'{', 0xfe];
    let timestamp = now();
    let signed = signature::sign(&key, MSG_ID, timestamp, &body);
    let headers = headers(MSG_ID, timestamp, &signed);
    assert_eq!(check(std::slice::from_ref(&key), &headers, &body), Ok(()));
    assert_eq!(
        check(&[key], &headers, &body[..3]),
        Err(SignatureError::NoMatch)
    );
}

#[test]
fn rotation_accepts_any_listed_signature_with_any_current_secret() {
    let (old, new) = (WebhookSecret::generate(), WebhookSecret::generate());
    let timestamp = now();
    let by_old = signature::sign(&old, MSG_ID, timestamp, BODY);
    let by_new = signature::sign(&new, MSG_ID, timestamp, BODY);
    // A sender mid-rotation sends both signatures; a receiver that knows only one is fine.
    let both = headers(MSG_ID, timestamp, &format!("{by_old} {by_new}"));
    assert_eq!(check(std::slice::from_ref(&new), &both, BODY), Ok(()));
    assert_eq!(check(std::slice::from_ref(&old), &both, BODY), Ok(()));
    // A receiver mid-rotation accepts either secret.
    let receiver = [old.clone(), new.clone()];
    assert_eq!(
        check(&receiver, &headers(MSG_ID, timestamp, &by_old), BODY),
        Ok(())
    );
    assert_eq!(
        check(&receiver, &headers(MSG_ID, timestamp, &by_new), BODY),
        Ok(())
    );
    // Entries of unknown versions or broken encoding are skipped, not fatal.
    let mixed = format!("v2,abc v1,!!notbase64 garbage {by_new}");
    assert_eq!(
        check(&[new], &headers(MSG_ID, timestamp, &mixed), BODY),
        Ok(())
    );
    assert_eq!(
        check(&[WebhookSecret::generate()], &both, BODY),
        Err(SignatureError::NoMatch)
    );
    assert_eq!(check(&[], &both, BODY), Err(SignatureError::NoMatch));
}

#[test]
fn timestamps_outside_the_tolerance_are_rejected_both_ways() {
    let key = WebhookSecret::generate();
    let now = now();
    let tolerance = Duration::from_secs(300);
    for (offset, accepted) in [(-300, true), (300, true), (-301, false), (301, false)] {
        let timestamp = now + offset;
        let signed = signature::sign(&key, MSG_ID, timestamp, BODY);
        let verdict = signature::verify(
            std::slice::from_ref(&key),
            &headers(MSG_ID, timestamp, &signed),
            BODY,
            now,
            tolerance,
        );
        let expected = if accepted {
            Ok(())
        } else {
            Err(SignatureError::Expired { timestamp, now })
        };
        assert_eq!(verdict, expected, "offset {offset}");
    }
    assert_eq!(DEFAULT_TOLERANCE, tolerance);
}

#[test]
fn tampering_with_body_id_or_timestamp_breaks_the_signature() {
    let key = WebhookSecret::generate();
    let timestamp = now();
    let signed = signature::sign(&key, MSG_ID, timestamp, BODY);
    let keys = [key];
    let mut body = BODY.to_vec();
    body[3] ^= 1;
    assert_eq!(
        check(&keys, &headers(MSG_ID, timestamp, &signed), &body),
        Err(SignatureError::NoMatch)
    );
    assert_eq!(
        check(&keys, &headers("msg_other", timestamp, &signed), BODY),
        Err(SignatureError::NoMatch)
    );
    assert_eq!(
        check(&keys, &headers(MSG_ID, timestamp - 1, &signed), BODY),
        Err(SignatureError::NoMatch)
    );
}

#[test]
fn missing_or_unreadable_headers_are_named() {
    let key = WebhookSecret::generate();
    let timestamp = now();
    let signed = signature::sign(&key, MSG_ID, timestamp, BODY);
    let keys = [key];
    for name in [HEADER_ID, HEADER_TIMESTAMP, HEADER_SIGNATURE] {
        let mut partial = headers(MSG_ID, timestamp, &signed);
        partial.remove(name);
        assert_eq!(
            check(&keys, &partial, BODY),
            Err(SignatureError::MissingHeader(name))
        );
    }
    let mut binary = headers(MSG_ID, timestamp, &signed);
    binary.insert(HEADER_ID, HeaderValue::from_bytes(&[0xff]).unwrap());
    assert_eq!(
        check(&keys, &binary, BODY),
        Err(SignatureError::InvalidHeader(HEADER_ID))
    );
    let mut not_a_number = headers(MSG_ID, timestamp, &signed);
    not_a_number.insert(HEADER_TIMESTAMP, HeaderValue::from_static("yesterday"));
    assert_eq!(
        check(&keys, &not_a_number, BODY),
        Err(SignatureError::BadTimestamp)
    );
}

#[test]
fn secrets_parse_with_or_without_prefix_and_stay_out_of_logs() {
    let prefixed = secret(SECRET);
    let bare = secret(SECRET.trim_start_matches("whsec_"));
    assert_eq!(prefixed.expose(), SECRET);
    assert_eq!(bare.expose(), SECRET);
    assert_eq!(SECRET.parse::<WebhookSecret>().unwrap().expose(), SECRET);
    assert_eq!(
        WebhookSecret::parse("whsec_not base64!").unwrap_err(),
        SecretError::NotBase64
    );
    assert_eq!(
        WebhookSecret::parse("whsec_dGVzdA==").unwrap_err(),
        SecretError::TooShort(4)
    );
    assert_eq!(format!("{prefixed:?}"), "WebhookSecret(<redacted>)");
}

#[test]
fn generated_secrets_are_random_and_round_trip() {
    let first = WebhookSecret::generate();
    let second = WebhookSecret::generate();
    assert_ne!(first.expose(), second.expose());
    let text = first.expose();
    assert!(text.starts_with("whsec_"));
    assert_eq!(secret(&text).expose(), text);
    assert!(!format!("{first:?}").contains(&text[6..]));
}
