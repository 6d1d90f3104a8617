//! HTTP details shared by every upstream caller (Placement, Keystone, the ComputeNode push):
//! transport errors in words, microversion negotiation, Placement's error bodies.
//!
//! In: a reqwest error, Placement's version range from `GET /`, an error answer's status and body,
//! a JSON answer. Out: the error in words, the microversion to use (none outside
//! [`MIN_MICROVERSION`] to [`MAX_MICROVERSION`]), an [`UpstreamError`], the decoded answer.

use serde_json::Value;

use super::patience::Patience;
use super::UpstreamError;

/// Lowest microversion rtrack works with (`reserved` may equal `total`; codes in errors).
pub const MIN_MICROVERSION: (u32, u32) = (1, 26);
/// Highest microversion rtrack uses (`consumer_type` in allocations needs 1.38).
pub const MAX_MICROVERSION: (u32, u32) = (1, 39);

/// A transport error in words, without the URL (callers add it).
pub fn transport_reason(e: &reqwest::Error) -> String {
    let mut reason = if e.is_timeout() {
        "timed out".to_string()
    } else if e.is_connect() {
        "cannot connect".to_string()
    } else {
        "request failed".to_string()
    };
    let mut src = std::error::Error::source(e);
    let mut last = None;
    while let Some(s) = src {
        last = Some(s.to_string());
        src = s.source();
    }
    if let Some(l) = last {
        reason.push_str(": ");
        reason.push_str(&l);
    }
    reason
}

/// A request that got no answer from `url`; a timeout (not of connecting) makes the next wait
/// longer.
pub fn no_answer(
    patience: &mut Patience,
    method: &reqwest::Method,
    url: String,
    e: &reqwest::Error,
) -> UpstreamError {
    if e.is_timeout() && !e.is_connect() {
        patience.no_answer_in_time();
    }
    UpstreamError::Transport {
        method: method.to_string(),
        url,
        reason: transport_reason(e),
    }
}

pub fn parse_version(s: &str) -> Option<(u32, u32)> {
    let (a, b) = s.split_once('.')?;
    Some((a.parse().ok()?, b.parse().ok()?))
}

/// Picks the microversion: the server's maximum, at most [`MAX_MICROVERSION`], at least
/// [`MIN_MICROVERSION`].
pub fn choose_microversion(min: (u32, u32), max: (u32, u32)) -> Option<(u32, u32)> {
    let v = max.min(MAX_MICROVERSION);
    (v >= MIN_MICROVERSION && v >= min).then_some(v)
}

/// Maps an error answer to [`UpstreamError::Placement`]: `status` and `code` from the first
/// entry of `errors` (`code` exists from 1.23 on), `detail` kept short for messages.
pub fn error_from_body(method: &str, path: &str, status: u16, body: &str) -> UpstreamError {
    let v: Value = serde_json::from_str(body).unwrap_or(Value::Null);
    let first = &v["errors"][0];
    let code = first["code"].as_str().map(str::to_string);
    let words = first["detail"]
        .as_str()
        .or_else(|| first["title"].as_str())
        .or_else(|| v["message"].as_str())
        .unwrap_or(body);
    let detail = words.split_whitespace().collect::<Vec<_>>().join(" ");
    let detail: String = detail.chars().take(300).collect();
    UpstreamError::Placement {
        method: method.to_string(),
        path: path.to_string(),
        status,
        code,
        detail,
        verbatim: words.chars().take(1000).collect(),
    }
}

pub fn decode<T: serde::de::DeserializeOwned>(
    method: &str,
    path: &str,
    v: Value,
) -> Result<T, UpstreamError> {
    serde_json::from_value(v).map_err(|e| UpstreamError::Decode {
        method: method.to_string(),
        path: path.to_string(),
        reason: e.to_string(),
    })
}
