//! `[upstream.http]`: POSTs the ComputeNode primitive (a JSON value the caller builds) to a URL,
//! only when it differs from the last one that was accepted.
//!
//! In: [`HttpPushSettings`] and the primitive. Out: one POST per change (none otherwise).

use serde_json::Value;

use super::transport::transport_reason;
use super::UpstreamError;
use crate::config::upstream::HttpPushSettings;

/// The ComputeNode pusher.
#[derive(Debug)]
pub struct HttpPush {
    http: reqwest::Client,
    url: reqwest::Url,
    last_sent: Option<Value>,
    /// POSTs made.
    pub posts: u64,
}

impl HttpPush {
    /// A pusher; makes no request.
    pub fn new(settings: HttpPushSettings) -> Result<HttpPush, UpstreamError> {
        super::install_crypto_provider();
        let http = reqwest::Client::builder()
            .no_proxy()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(settings.timeout)
            .user_agent(concat!("rtrack/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| UpstreamError::Config {
                key: "upstream.http".into(),
                value: "(client)".into(),
                expected: format!("an HTTP client could not be built: {e}"),
            })?;
        Ok(HttpPush {
            http,
            url: settings.url,
            last_sent: None,
            posts: 0,
        })
    }

    /// POSTs `primitive` unless it equals the last one accepted. Returns whether it POSTed.
    /// A failed POST is retried by the next call (the value is not remembered).
    pub async fn push(&mut self, primitive: &Value) -> Result<bool, UpstreamError> {
        if self.last_sent.as_ref() == Some(primitive) {
            return Ok(false);
        }
        self.posts += 1;
        let resp = self
            .http
            .post(self.url.clone())
            .json(primitive)
            .send()
            .await
            .map_err(|e| UpstreamError::Transport {
                method: "POST".into(),
                url: self.url.to_string(),
                reason: transport_reason(&e),
            })?;
        let status = resp.status();
        if !status.is_success() {
            let body = resp.text().await.unwrap_or_default();
            return Err(UpstreamError::Placement {
                method: "POST".into(),
                path: self.url.path().to_string(),
                status: status.as_u16(),
                code: None,
                detail: body.chars().take(300).collect(),
                verbatim: body.chars().take(1000).collect(),
            });
        }
        self.last_sent = Some(primitive.clone());
        Ok(true)
    }
}
