//! Authentication headers for Placement: noauth2's `X-Auth-Token`/`X-Roles`, a static token, or
//! a Keystone v3 password token that is cached and renewed before it expires.
//!
//! In: [`AuthSettings`]. Out: the headers to add to each request. Keystone is asked only when
//! there is no token yet, when the cached one is close to expiry, or after Placement answered
//! 401 (token revoked). Neither the password nor a token is ever put in an error or a log line.

use std::time::{Duration, Instant, SystemTime};

use reqwest::header::{HeaderMap, HeaderValue};
use serde_json::json;

use super::UpstreamError;
use crate::config::upstream::{AuthSettings, KeystonePassword, Secret};

/// A token and when to stop using it.
#[derive(Debug, Clone)]
struct CachedToken {
    token: Secret,
    renew_at: Instant,
}

/// Produces the auth headers; holds the Keystone token cache.
#[derive(Debug)]
pub struct Authenticator {
    settings: AuthSettings,
    cached: Option<CachedToken>,
    /// Keystone token requests made (for tests and metrics).
    pub keystone_requests: u64,
}

/// How long before expiry a token is renewed: a tenth of its lifetime, at least 60 s and at most
/// 10 min, so a request never goes out with a token about to lapse.
pub fn renew_margin(lifetime: Duration) -> Duration {
    (lifetime / 10).clamp(Duration::from_secs(60), Duration::from_secs(600))
}

impl Authenticator {
    /// A new authenticator; no request is made until headers are needed.
    pub fn new(settings: AuthSettings) -> Authenticator {
        Authenticator {
            settings,
            cached: None,
            keystone_requests: 0,
        }
    }

    /// Forgets the Keystone token (after a 401 from Placement).
    pub fn invalidate(&mut self) {
        self.cached = None;
    }

    /// Whether a 401 can be cured by getting a new token.
    pub fn can_renew(&self) -> bool {
        matches!(self.settings, AuthSettings::Password(_))
    }

    /// The headers for one request.
    pub async fn headers(&mut self, http: &reqwest::Client) -> Result<HeaderMap, UpstreamError> {
        let mut h = HeaderMap::new();
        let token = match &self.settings {
            AuthSettings::NoAuth { user, roles } => {
                if let Some(r) = roles {
                    h.insert("x-roles", header_value("placement.roles", r)?);
                }
                user.clone()
            }
            AuthSettings::Token(t) => t.clone(),
            AuthSettings::Password(k) => {
                let fresh = self
                    .cached
                    .as_ref()
                    .filter(|c| Instant::now() < c.renew_at)
                    .map(|c| c.token.clone());
                match fresh {
                    Some(t) => t,
                    None => {
                        let k = k.clone();
                        self.keystone_requests += 1;
                        let c = issue_token(http, &k).await?;
                        let t = c.token.clone();
                        self.cached = Some(c);
                        t
                    }
                }
            }
        };
        let mut v = header_value("placement.token", token.expose())?;
        v.set_sensitive(true);
        h.insert("x-auth-token", v);
        Ok(h)
    }
}

fn header_value(key: &str, s: &str) -> Result<HeaderValue, UpstreamError> {
    HeaderValue::from_str(s).map_err(|_| UpstreamError::Config {
        key: key.to_string(),
        value: "(hidden)".into(),
        expected: "must be printable ASCII (it is sent as an HTTP header)".into(),
    })
}

/// `POST {auth_url}/auth/tokens` with the password method, scoped to the project.
async fn issue_token(
    http: &reqwest::Client,
    k: &KeystonePassword,
) -> Result<CachedToken, UpstreamError> {
    let url = format!("{}/auth/tokens", k.auth_url.as_str().trim_end_matches('/'));
    let body = json!({"auth": {
        "identity": {"methods": ["password"], "password": {"user": {
            "name": k.username,
            "domain": {"name": k.user_domain_name},
            "password": k.password.expose(),
        }}},
        "scope": {"project": {"name": k.project_name, "domain": {"name": k.project_domain_name}}},
    }});
    let err = |reason: String| UpstreamError::Auth {
        url: url.clone(),
        reason,
    };
    let resp = http
        .post(&url)
        .json(&body)
        .send()
        .await
        .map_err(|e| err(super::transport::transport_reason(&e)))?;
    let status = resp.status();
    if !status.is_success() {
        // Keystone's message says which part was wrong; it does not contain the password.
        let text = resp.text().await.unwrap_or_default();
        let msg = serde_json::from_str::<serde_json::Value>(&text)
            .ok()
            .and_then(|v| v["error"]["message"].as_str().map(str::to_string))
            .unwrap_or_default();
        return Err(err(format!(
            "token request for user {:?} answered {status}{}",
            k.username,
            if msg.is_empty() {
                String::new()
            } else {
                format!(": {msg}")
            }
        )));
    }
    let token = resp
        .headers()
        .get("x-subject-token")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
        .ok_or_else(|| err("answer has no X-Subject-Token header".into()))?;
    let v: serde_json::Value = resp
        .json()
        .await
        .map_err(|e| err(format!("answer is not JSON: {e}")))?;
    let expires = v["token"]["expires_at"]
        .as_str()
        .ok_or_else(|| err("answer has no token.expires_at".into()))?;
    let expires_at =
        time::OffsetDateTime::parse(expires, &time::format_description::well_known::Rfc3339)
            .map_err(|e| err(format!("token.expires_at {expires:?} is not RFC 3339: {e}")))?;
    let now = time::OffsetDateTime::from(SystemTime::now());
    let lifetime = Duration::try_from(expires_at - now).unwrap_or(Duration::ZERO);
    Ok(CachedToken {
        token: Secret::new(token),
        renew_at: Instant::now() + lifetime.saturating_sub(renew_margin(lifetime)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renewal_margin_is_a_tenth_clamped() {
        assert_eq!(
            renew_margin(Duration::from_secs(3600)),
            Duration::from_secs(360)
        );
        assert_eq!(
            renew_margin(Duration::from_secs(100)),
            Duration::from_secs(60)
        );
        assert_eq!(
            renew_margin(Duration::from_secs(86400)),
            Duration::from_secs(600)
        );
    }

    #[tokio::test]
    async fn noauth_headers_hide_the_token() {
        let mut a = Authenticator::new(AuthSettings::NoAuth {
            user: Secret::new("admin"),
            roles: Some("service".into()),
        });
        crate::upstream::install_crypto_provider();
        let h = a.headers(&reqwest::Client::new()).await.unwrap();
        assert_eq!(h["x-roles"], "service");
        assert!(h["x-auth-token"].is_sensitive());
        assert!(!format!("{h:?}").contains("admin"));
    }
}
