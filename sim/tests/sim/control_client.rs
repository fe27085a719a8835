//! A minimal JSON client for the simulators' `/_sim` control APIs.

use reqwest::Method;
use serde_json::Value;

/// A control API answer; the body is `Null` when empty or not JSON.
#[derive(Debug)]
pub(crate) struct Answer {
    /// The status code.
    pub(crate) status: u16,
    /// The JSON body.
    pub(crate) body: Value,
}

/// Sends `body` (if any) as JSON to `url`.
pub(crate) async fn call(method: Method, url: &str, body: Option<Value>) -> Answer {
    let mut request = crate::client::client().request(method, url);
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await.expect("control API answers");
    let status = response.status().as_u16();
    let text = response.text().await.expect("control API answer body");
    Answer {
        status,
        body: serde_json::from_str(&text).unwrap_or(Value::Null),
    }
}
