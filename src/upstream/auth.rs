//! Authentication headers for Placement: noauth2's `X-Auth-Token`/`X-Roles`, a static token, or
//! a Keystone v3 token (password or application credential) that is cached and renewed before
//! it expires; with Keystone, also Placement's endpoint from the token's service catalog.
//!
//! In: [`AuthSettings`]. Out: the headers to add to each request, and the catalog's Placement
//! endpoint. Keystone is asked only when there is no token yet, when the cached one is close to
//! expiry, or after Placement answered 401 (token revoked). Neither the password, the secret nor
//! a token is ever put in an error or a log line.

use std::time::{Duration, Instant, SystemTime};

use reqwest::header::{HeaderMap, HeaderValue};
use serde_json::{json, Value};

use super::UpstreamError;
use crate::config::upstream::{
    AppCredential, AuthSettings, Domain, KeystoneAuth, KeystoneMethod, Named, Secret,
};

/// A token, when to stop using it, and the Placement endpoint its catalog gave.
#[derive(Debug, Clone)]
struct CachedToken {
    token: Secret,
    renew_at: Instant,
    endpoint: Option<String>,
}

/// Produces the auth headers; holds the Keystone token cache.
#[derive(Debug)]
pub struct Authenticator {
    settings: AuthSettings,
    /// Placement's endpoint is configured: the catalog is not needed.
    endpoint_known: bool,
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
    /// A new authenticator; no request is made until headers are needed. `endpoint_known`:
    /// Placement's endpoint is configured, so the catalog need not name it.
    pub fn new(settings: AuthSettings, endpoint_known: bool) -> Authenticator {
        Authenticator {
            settings,
            endpoint_known,
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
        matches!(self.settings, AuthSettings::Keystone(_))
    }

    /// Placement's endpoint from the last token's catalog (Keystone, no endpoint configured).
    pub fn catalog_endpoint(&self) -> Option<&str> {
        self.cached.as_ref().and_then(|c| c.endpoint.as_deref())
    }

    /// The headers for one request (getting a Keystone token first when needed).
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
            AuthSettings::Keystone(k) => {
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
                        let c = issue_token(http, &k, !self.endpoint_known).await?;
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

fn domain_json(d: &Domain) -> Value {
    match d {
        Domain::Id(id) => json!({ "id": id }),
        Domain::Name(n) => json!({ "name": n }),
    }
}

fn named_json(n: &Named) -> Value {
    match n {
        Named::Id(id) => json!({ "id": id }),
        Named::Name { name, domain } => json!({ "name": name, "domain": domain_json(domain) }),
    }
}

/// The body of `POST /v3/auth/tokens`. A password token is scoped to the project; an
/// application credential's token is scoped already (Keystone refuses a scope with it).
pub fn token_request(k: &KeystoneAuth) -> Value {
    match &k.method {
        KeystoneMethod::Password {
            user,
            password,
            project,
        } => {
            let mut user = named_json(user);
            user["password"] = json!(password.expose());
            json!({"auth": {
                "identity": {"methods": ["password"], "password": {"user": user}},
                "scope": {"project": named_json(project)},
            }})
        }
        KeystoneMethod::ApplicationCredential { credential, secret } => {
            let cred = match credential {
                AppCredential::Id(id) => json!({"id": id, "secret": secret.expose()}),
                AppCredential::Name { name, user } => {
                    json!({"name": name, "user": named_json(user), "secret": secret.expose()})
                }
            };
            json!({"auth": {"identity": {
                "methods": ["application_credential"],
                "application_credential": cred,
            }}})
        }
    }
}

/// Placement's endpoint in a token's catalog, keystoneauth's way: service type `placement`,
/// the first of `interfaces` (in that order) that has one, in `region` when one is set; the
/// first such endpoint in catalog order.
pub fn placement_endpoint(
    catalog: &Value,
    interfaces: &[String],
    region: Option<&str>,
) -> Option<String> {
    let services = catalog.as_array()?;
    let endpoints: Vec<&Value> = services
        .iter()
        .filter(|s| s["type"].as_str() == Some("placement"))
        .filter_map(|s| s["endpoints"].as_array())
        .flatten()
        .collect();
    interfaces.iter().find_map(|iface| {
        endpoints
            .iter()
            .filter(|e| e["interface"].as_str() == Some(iface.as_str()))
            .filter(|e| {
                region.is_none_or(|r| {
                    e["region_id"].as_str() == Some(r) || e["region"].as_str() == Some(r)
                })
            })
            .find_map(|e| e["url"].as_str())
            .map(|u| u.trim_end_matches('/').to_string())
    })
}

/// `POST {auth_url}/auth/tokens`; with `want_endpoint`, Placement's endpoint from the catalog
/// too (an error when the catalog has none).
async fn issue_token(
    http: &reqwest::Client,
    k: &KeystoneAuth,
    want_endpoint: bool,
) -> Result<CachedToken, UpstreamError> {
    let url = format!("{}/auth/tokens", k.auth_url.as_str().trim_end_matches('/'));
    let body = token_request(k);
    let err = |reason: String| UpstreamError::Auth {
        url: url.clone(),
        reason,
    };
    // A token request may be sent twice: a second token is harmless, and a kept-alive
    // connection the server closed under the first is the usual cause of its failure.
    let resp = match http.post(&url).json(&body).send().await {
        Err(e) if !e.is_connect() && !e.is_timeout() => http.post(&url).json(&body).send().await,
        other => other,
    }
    .map_err(|e| err(super::transport::transport_reason(&e)))?;
    let status = resp.status();
    if !status.is_success() {
        // Keystone's message says which part was wrong; it does not contain the secret.
        let text = resp.text().await.unwrap_or_default();
        let msg = serde_json::from_str::<Value>(&text)
            .ok()
            .and_then(|v| v["error"]["message"].as_str().map(crate::echo::bounded))
            .unwrap_or_default();
        // A deleted application credential is 404 by id, 401 by name; a wrong password 401.
        let hint = if matches!(status.as_u16(), 401 | 404) {
            "; the credentials are wrong, revoked or deleted: configure valid ones and reload (SIGHUP)"
        } else {
            ""
        };
        return Err(err(format!(
            "token request for {} answered {status}{}{hint}",
            k.who(),
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
    let v: Value = resp
        .json()
        .await
        .map_err(|e| err(format!("answer is not JSON: {e}")))?;
    let expires = v["token"]["expires_at"]
        .as_str()
        .ok_or_else(|| err("answer has no token.expires_at".into()))?;
    let expires_at =
        time::OffsetDateTime::parse(expires, &time::format_description::well_known::Rfc3339)
            .map_err(|e| {
                err(format!(
                    "token.expires_at {} is not RFC 3339: {e}",
                    crate::echo::quoted(expires)
                ))
            })?;
    let endpoint = if want_endpoint {
        let found = placement_endpoint(&v["token"]["catalog"], &k.interfaces, k.region.as_deref());
        match found {
            Some(e) if e.starts_with("http://") || e.starts_with("https://") => Some(e),
            Some(e) => {
                return Err(err(format!(
                    "the catalog's placement endpoint {} is not an http(s) URL",
                    crate::echo::quoted(&e)
                )))
            }
            None => {
                return Err(err(format!(
                    "the service catalog has no placement endpoint on interface {}{}; set placement.endpoint, or register Placement in Keystone's catalog",
                    k.interfaces.join(" or "),
                    k.region
                        .as_deref()
                        .map(|r| format!(" in region {r:?}"))
                        .unwrap_or_default()
                )))
            }
        }
    } else {
        None
    };
    let now = time::OffsetDateTime::from(SystemTime::now());
    let lifetime = Duration::try_from(expires_at - now).unwrap_or(Duration::ZERO);
    Ok(CachedToken {
        token: Secret::new(token),
        renew_at: Instant::now() + lifetime.saturating_sub(renew_margin(lifetime)),
        endpoint,
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
        let mut a = Authenticator::new(
            AuthSettings::NoAuth {
                user: Secret::new("admin"),
                roles: Some("service".into()),
            },
            true,
        );
        crate::upstream::install_crypto_provider();
        let h = a.headers(&reqwest::Client::new()).await.unwrap();
        assert_eq!(h["x-roles"], "service");
        assert!(h["x-auth-token"].is_sensitive());
        assert!(!format!("{h:?}").contains("admin"));
    }

    fn keystone(method: KeystoneMethod) -> KeystoneAuth {
        KeystoneAuth {
            auth_url: reqwest::Url::parse("http://k/v3").unwrap(),
            method,
            interfaces: vec!["internal".into(), "public".into()],
            region: None,
        }
    }

    #[test]
    fn token_requests_as_keystone_takes_them() {
        let pw = keystone(KeystoneMethod::Password {
            user: Named::Name {
                name: "rtrack".into(),
                domain: Domain::Name("Default".into()),
            },
            password: Secret::new("pw"),
            project: Named::Id("p1".into()),
        });
        assert_eq!(
            token_request(&pw),
            json!({"auth": {"identity": {"methods": ["password"], "password": {"user":
                {"name": "rtrack", "domain": {"name": "Default"}, "password": "pw"}}},
                "scope": {"project": {"id": "p1"}}}})
        );
        let by_id = keystone(KeystoneMethod::ApplicationCredential {
            credential: AppCredential::Id("abc".into()),
            secret: Secret::new("s"),
        });
        let body = token_request(&by_id);
        assert_eq!(
            body,
            json!({"auth": {"identity": {"methods": ["application_credential"],
                "application_credential": {"id": "abc", "secret": "s"}}}})
        );
        assert!(
            body["auth"].get("scope").is_none(),
            "Keystone refuses a scope here"
        );
        let by_name = keystone(KeystoneMethod::ApplicationCredential {
            credential: AppCredential::Name {
                name: "rt".into(),
                user: Named::Name {
                    name: "rtrack".into(),
                    domain: Domain::Id("default".into()),
                },
            },
            secret: Secret::new("s"),
        });
        assert_eq!(
            token_request(&by_name)["auth"]["identity"]["application_credential"],
            json!({"name": "rt", "user": {"name": "rtrack", "domain": {"id": "default"}}, "secret": "s"})
        );
        assert_eq!(
            by_name.who(),
            "application credential \"rt\" of user \"rtrack\""
        );
    }

    #[test]
    fn catalog_endpoint_by_interface_order_then_region() {
        let catalog = json!([
            {"type": "identity", "endpoints": [{"interface": "internal", "region_id": "R1", "url": "http://k/v3"}]},
            {"type": "placement", "endpoints": [
                {"interface": "public", "region_id": "R1", "region": "R1", "url": "http://pub1:8778/"},
                {"interface": "internal", "region_id": "R2", "region": "R2", "url": "http://int2:8778"},
                {"interface": "public", "region_id": "R2", "region": "R2", "url": "http://pub2:8778"},
            ]},
        ]);
        let ifs = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            placement_endpoint(&catalog, &ifs(&["internal", "public"]), None).as_deref(),
            Some("http://int2:8778")
        );
        assert_eq!(
            placement_endpoint(&catalog, &ifs(&["internal", "public"]), Some("R1")).as_deref(),
            Some("http://pub1:8778")
        );
        assert_eq!(
            placement_endpoint(&catalog, &ifs(&["public"]), None).as_deref(),
            Some("http://pub1:8778")
        );
        assert_eq!(placement_endpoint(&catalog, &ifs(&["admin"]), None), None);
        assert_eq!(
            placement_endpoint(&json!({"x": 1}), &ifs(&["public"]), None),
            None
        );
    }
}
