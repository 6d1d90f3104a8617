//! The Placement HTTP API, as typed calls behind the [`PlacementApi`] trait so the reporter's
//! logic does not depend on HTTP; [`HttpPlacement`] is the reqwest implementation.
//!
//! In: the [`PlacementSettings`] (endpoint, credentials, timeout) and the reporter's typed calls:
//! providers, inventories, traits, aggregates and allocations to read or write. Out: Placement's
//! answers as typed values with provider generations, or an [`UpstreamError`]; the requests counted
//! by kind ([`RequestCounts`]).
//!
//! Every request goes to the configured endpoint (no proxy, no redirects), carries the auth
//! headers and `OpenStack-API-Version: placement X.Y` (the version negotiated from `GET /`: at
//! least 1.26, at most 1.39), and is counted by kind. Errors are mapped from Placement's
//! `{"errors": [{"status", "code", "detail"}]}` body; callers match on status and code only.

use std::collections::{BTreeMap, BTreeSet};

use reqwest::{Method, StatusCode};
use serde::Deserialize;
use serde_json::{json, Value};
use uuid::Uuid;

use super::allocations::{Amounts, Owner};
use super::api::{reshaper_body, sendable_type, BEFORE_CONSUMER_TYPES, CONSUMER_TYPES};
use super::api::{ConsumerAllocations, PlacementApi, ProviderInfo, RequestCounts};
use super::auth::Authenticator;
use super::patience::Patience;
use super::plan::InventoryRecord;
use super::transport::{choose_microversion, decode, error_from_body, no_answer, parse_version};
pub use super::transport::{MAX_MICROVERSION, MIN_MICROVERSION};
use super::UpstreamError;
use crate::config::upstream::PlacementSettings;

/// Placement over HTTP (reqwest, rustls).
#[derive(Debug)]
pub struct HttpPlacement {
    http: reqwest::Client,
    /// Configured, else Keystone's catalog gives it (see [`HttpPlacement::endpoint`]).
    endpoint: Option<String>,
    auth: Authenticator,
    version: Option<(u32, u32)>,
    counts: RequestCounts,
    /// The wait for each answer: `timeout_s`, longer while Placement is slow (see `patience`).
    patience: Patience,
}

#[derive(Deserialize)]
struct ProviderList {
    resource_providers: Vec<ProviderInfo>,
}

#[derive(Deserialize)]
struct Inventories {
    resource_provider_generation: u64,
    inventories: BTreeMap<String, InventoryRecord>,
}

#[derive(Deserialize)]
struct Traits {
    resource_provider_generation: u64,
    traits: BTreeSet<String>,
}

#[derive(Deserialize)]
struct Aggregates {
    resource_provider_generation: u64,
    aggregates: BTreeSet<Uuid>,
}

#[derive(Deserialize)]
struct Usages {
    usages: BTreeMap<String, u64>,
}

#[derive(Deserialize)]
struct ProviderAllocations {
    allocations: BTreeMap<Uuid, ConsumerEntry>,
}

#[derive(Deserialize)]
struct ConsumerBody {
    allocations: BTreeMap<Uuid, ConsumerEntry>,
    consumer_generation: Option<u64>,
    project_id: Option<String>,
    user_id: Option<String>,
    consumer_type: Option<String>,
}

#[derive(Deserialize)]
struct ConsumerEntry {
    resources: BTreeMap<String, u64>,
}

impl HttpPlacement {
    /// A client for `settings.endpoint`. Makes no request.
    pub fn new(settings: &PlacementSettings) -> Result<HttpPlacement, UpstreamError> {
        super::install_crypto_provider();
        let http = reqwest::Client::builder()
            // Proxies from the environment would send loopback or management traffic
            // elsewhere; Placement is reached directly.
            .no_proxy()
            .redirect(reqwest::redirect::Policy::none())
            // Reports come a minute apart and their requests back to back: a connection kept
            // longer than servers keep theirs (gunicorn 2 s, Apache 5 s) would be closed under
            // the next request ("connection closed before message completed").
            .pool_idle_timeout(std::time::Duration::from_millis(900))
            // Keystone's answers; Placement's wait is set per request (`patience`), which
            // overrides this. Connecting is never stretched: a full listen queue holds no work.
            .timeout(settings.timeout)
            .connect_timeout(settings.timeout)
            .user_agent(concat!("rtrack/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| UpstreamError::Config {
                key: "placement".into(),
                value: "(client)".into(),
                expected: format!("an HTTP client could not be built: {e}"),
            })?;
        Ok(HttpPlacement {
            http,
            endpoint: settings
                .endpoint
                .as_ref()
                .map(|e| e.as_str().trim_end_matches('/').to_string()),
            auth: Authenticator::new(settings.auth.clone(), settings.endpoint.is_some()),
            version: None,
            counts: RequestCounts::default(),
            patience: Patience::new(settings.timeout),
        })
    }

    /// Placement's base URL: configured, else from the last Keystone token's catalog.
    pub fn endpoint(&self) -> Result<String, UpstreamError> {
        match &self.endpoint {
            Some(e) => Ok(e.clone()),
            None => self
                .auth
                .catalog_endpoint()
                .map(str::to_string)
                .ok_or_else(|| {
                    UpstreamError::Input(
                        "no Placement endpoint: none is configured and no Keystone token (with its catalog) was issued yet".into(),
                    )
                }),
        }
    }

    /// Keystone token requests made so far.
    pub fn keystone_requests(&self) -> u64 {
        self.auth.keystone_requests
    }

    /// The negotiated microversion.
    pub fn microversion(&self) -> Option<(u32, u32)> {
        self.version
    }

    /// Sends one request and returns the status and JSON body (Null when empty). Error
    /// statuses become [`UpstreamError::Placement`] unless listed in `ok_errors`.
    async fn call(
        &mut self,
        kind: &'static str,
        method: Method,
        path: &str,
        query: &[(&str, &str)],
        body: Option<&Value>,
        ok_errors: &[u16],
    ) -> Result<(StatusCode, Value), UpstreamError> {
        let version = match self.version {
            Some((a, b)) => format!("placement {a}.{b}"),
            None => "placement latest".to_string(),
        };
        let mut renewed = false;
        loop {
            let headers = self.auth.headers(&self.http).await?;
            let base = self.endpoint()?;
            let mut url = reqwest::Url::parse(&format!("{base}{path}")).map_err(|e| {
                UpstreamError::Decode {
                    method: method.to_string(),
                    path: path.to_string(),
                    reason: format!("bad URL: {e}"),
                }
            })?;
            if !query.is_empty() {
                url.query_pairs_mut().extend_pairs(query);
            }
            let mut req = self
                .http
                .request(method.clone(), url.clone())
                .timeout(self.patience.current())
                .headers(headers)
                .header("openstack-api-version", &version)
                .header("accept", "application/json");
            if let Some(b) = body {
                req = req.json(b);
            }
            *self.counts.0.entry(kind).or_default() += 1;
            tracing::debug!(%method, path, "placement request");
            let sent = std::time::Instant::now();
            let resp = req
                .send()
                .await
                .map_err(|e| no_answer(&mut self.patience, &method, format!("{base}{path}"), &e))?;
            let status = resp.status();
            if status == StatusCode::UNAUTHORIZED && self.auth.can_renew() && !renewed {
                // The cached token was revoked or expired early: get a new one, once.
                self.auth.invalidate();
                renewed = true;
                continue;
            }
            let text = resp
                .text()
                .await
                .map_err(|e| no_answer(&mut self.patience, &method, format!("{base}{path}"), &e))?;
            self.patience.answered(sent.elapsed());
            if status.is_client_error() || status.is_server_error() {
                if ok_errors.contains(&status.as_u16()) {
                    return Ok((status, Value::Null));
                }
                return Err(error_from_body(
                    method.as_str(),
                    path,
                    status.as_u16(),
                    &text,
                ));
            }
            let v = if text.trim().is_empty() {
                Value::Null
            } else {
                serde_json::from_str(&text).map_err(|e| UpstreamError::Decode {
                    method: method.to_string(),
                    path: path.to_string(),
                    reason: format!("not JSON: {e}"),
                })?
            };
            return Ok((status, v));
        }
    }

    fn version_at_least(&self, v: (u32, u32)) -> bool {
        self.version.is_some_and(|have| have >= v)
    }

    /// A write at the last microversion without consumer types (when the negotiated one has
    /// them), so that Placement keeps each existing consumer's type as it is.
    async fn call_before_types(
        &mut self,
        kind: &'static str,
        method: Method,
        path: &str,
        body: &Value,
    ) -> Result<(StatusCode, Value), UpstreamError> {
        let negotiated = self.version;
        if self.version_at_least(CONSUMER_TYPES) {
            self.version = Some(BEFORE_CONSUMER_TYPES);
        }
        let answer = self.call(kind, method, path, &[], Some(body), &[]).await;
        self.version = negotiated;
        answer
    }
}

impl PlacementApi for HttpPlacement {
    async fn negotiate(&mut self) -> Result<(u32, u32), UpstreamError> {
        self.version = None;
        let (_, v) = self
            .call("get_versions", Method::GET, "/", &[], None, &[])
            .await?;
        let first = &v["versions"][0];
        let (min, max) = match (
            first["min_version"].as_str().and_then(parse_version),
            first["max_version"].as_str().and_then(parse_version),
        ) {
            (Some(a), Some(b)) => (a, b),
            _ => {
                return Err(UpstreamError::Decode {
                    method: "GET".into(),
                    path: "/".into(),
                    reason: "no versions[0].min_version / max_version".into(),
                })
            }
        };
        let chosen = choose_microversion(min, max).ok_or_else(|| UpstreamError::Microversion {
            endpoint: self.endpoint().unwrap_or_else(|_| "(catalog)".into()),
            min: format!("{}.{}", min.0, min.1),
            max: format!("{}.{}", max.0, max.1),
            needed: format!("{}.{}", MIN_MICROVERSION.0, MIN_MICROVERSION.1),
        })?;
        self.version = Some(chosen);
        Ok(chosen)
    }

    async fn providers_in_tree(&mut self, root: Uuid) -> Result<Vec<ProviderInfo>, UpstreamError> {
        let r = root.to_string();
        let (_, v) = self
            .call(
                "get_tree",
                Method::GET,
                "/resource_providers",
                &[("in_tree", &r)],
                None,
                &[],
            )
            .await?;
        Ok(decode::<ProviderList>("GET", "/resource_providers", v)?.resource_providers)
    }

    async fn get_provider(&mut self, uuid: Uuid) -> Result<Option<ProviderInfo>, UpstreamError> {
        let path = format!("/resource_providers/{uuid}");
        let (s, v) = self
            .call("get_provider", Method::GET, &path, &[], None, &[404])
            .await?;
        if s == StatusCode::NOT_FOUND {
            return Ok(None);
        }
        decode("GET", &path, v).map(Some)
    }

    async fn provider_by_name(
        &mut self,
        name: &str,
    ) -> Result<Option<ProviderInfo>, UpstreamError> {
        let (_, v) = self
            .call(
                "get_provider",
                Method::GET,
                "/resource_providers",
                &[("name", name)],
                None,
                &[],
            )
            .await?;
        Ok(decode::<ProviderList>("GET", "/resource_providers", v)?
            .resource_providers
            .into_iter()
            .next())
    }

    async fn create_provider(
        &mut self,
        uuid: Uuid,
        name: &str,
        parent: Option<Uuid>,
    ) -> Result<ProviderInfo, UpstreamError> {
        let mut body = json!({"uuid": uuid, "name": name});
        if let Some(p) = parent {
            body["parent_provider_uuid"] = json!(p);
        }
        let (_, v) = self
            .call(
                "create_provider",
                Method::POST,
                "/resource_providers",
                &[],
                Some(&body),
                &[],
            )
            .await?;
        decode("POST", "/resource_providers", v)
    }

    async fn rename_provider(
        &mut self,
        uuid: Uuid,
        name: &str,
        parent: Option<Uuid>,
    ) -> Result<(), UpstreamError> {
        let path = format!("/resource_providers/{uuid}");
        let mut body = json!({"name": name});
        if let Some(p) = parent {
            body["parent_provider_uuid"] = json!(p);
        }
        self.call("rename_provider", Method::PUT, &path, &[], Some(&body), &[])
            .await?;
        Ok(())
    }

    async fn delete_provider(&mut self, uuid: Uuid) -> Result<(), UpstreamError> {
        let path = format!("/resource_providers/{uuid}");
        self.call("delete_provider", Method::DELETE, &path, &[], None, &[404])
            .await?;
        Ok(())
    }

    async fn get_inventories(
        &mut self,
        uuid: Uuid,
    ) -> Result<(u64, BTreeMap<String, InventoryRecord>), UpstreamError> {
        let path = format!("/resource_providers/{uuid}/inventories");
        let (_, v) = self
            .call("get_inventories", Method::GET, &path, &[], None, &[])
            .await?;
        let i: Inventories = decode("GET", &path, v)?;
        Ok((i.resource_provider_generation, i.inventories))
    }

    async fn put_inventories(
        &mut self,
        uuid: Uuid,
        generation: u64,
        inventories: &BTreeMap<String, InventoryRecord>,
    ) -> Result<u64, UpstreamError> {
        let path = format!("/resource_providers/{uuid}/inventories");
        let body = json!({"resource_provider_generation": generation, "inventories": inventories});
        let (_, v) = self
            .call("put_inventories", Method::PUT, &path, &[], Some(&body), &[])
            .await?;
        Ok(decode::<Inventories>("PUT", &path, v)?.resource_provider_generation)
    }

    async fn get_traits(&mut self, uuid: Uuid) -> Result<(u64, BTreeSet<String>), UpstreamError> {
        let path = format!("/resource_providers/{uuid}/traits");
        let (_, v) = self
            .call("get_traits", Method::GET, &path, &[], None, &[])
            .await?;
        let t: Traits = decode("GET", &path, v)?;
        Ok((t.resource_provider_generation, t.traits))
    }

    async fn put_traits(
        &mut self,
        uuid: Uuid,
        generation: u64,
        traits: &BTreeSet<String>,
    ) -> Result<u64, UpstreamError> {
        let path = format!("/resource_providers/{uuid}/traits");
        let body = json!({"resource_provider_generation": generation, "traits": traits});
        let (_, v) = self
            .call("put_traits", Method::PUT, &path, &[], Some(&body), &[])
            .await?;
        Ok(decode::<Traits>("PUT", &path, v)?.resource_provider_generation)
    }

    async fn get_aggregates(&mut self, uuid: Uuid) -> Result<(u64, BTreeSet<Uuid>), UpstreamError> {
        let path = format!("/resource_providers/{uuid}/aggregates");
        let (_, v) = self
            .call("get_aggregates", Method::GET, &path, &[], None, &[])
            .await?;
        let a: Aggregates = decode("GET", &path, v)?;
        Ok((a.resource_provider_generation, a.aggregates))
    }

    async fn put_aggregates(
        &mut self,
        uuid: Uuid,
        generation: u64,
        aggregates: &BTreeSet<Uuid>,
    ) -> Result<u64, UpstreamError> {
        let path = format!("/resource_providers/{uuid}/aggregates");
        let body = json!({"resource_provider_generation": generation, "aggregates": aggregates});
        let (_, v) = self
            .call("put_aggregates", Method::PUT, &path, &[], Some(&body), &[])
            .await?;
        Ok(decode::<Aggregates>("PUT", &path, v)?.resource_provider_generation)
    }

    async fn get_usages(&mut self, uuid: Uuid) -> Result<BTreeMap<String, u64>, UpstreamError> {
        let path = format!("/resource_providers/{uuid}/usages");
        let (_, v) = self
            .call("get_usages", Method::GET, &path, &[], None, &[])
            .await?;
        Ok(decode::<Usages>("GET", &path, v)?.usages)
    }

    async fn provider_allocations(
        &mut self,
        uuid: Uuid,
    ) -> Result<BTreeMap<Uuid, BTreeMap<String, u64>>, UpstreamError> {
        let path = format!("/resource_providers/{uuid}/allocations");
        let (_, v) = self
            .call(
                "get_provider_allocations",
                Method::GET,
                &path,
                &[],
                None,
                &[],
            )
            .await?;
        Ok(decode::<ProviderAllocations>("GET", &path, v)?
            .allocations
            .into_iter()
            .map(|(c, e)| (c, e.resources))
            .collect())
    }

    async fn get_consumer(&mut self, consumer: Uuid) -> Result<ConsumerAllocations, UpstreamError> {
        let path = format!("/allocations/{consumer}");
        let (_, v) = self
            .call("get_allocation", Method::GET, &path, &[], None, &[])
            .await?;
        let b: ConsumerBody = decode("GET", &path, v)?;
        let owner = match (b.project_id, b.user_id) {
            (Some(p), Some(u)) => Some((p, u, b.consumer_type.unwrap_or_default())),
            _ => None,
        };
        Ok(ConsumerAllocations {
            generation: b.consumer_generation,
            resources: b
                .allocations
                .into_iter()
                .map(|(rp, e)| (rp, e.resources))
                .collect(),
            owner,
        })
    }

    async fn put_allocation(
        &mut self,
        consumer: Uuid,
        resources: &Amounts,
        generation: Option<u64>,
        owner: &Owner,
    ) -> Result<(), UpstreamError> {
        let path = format!("/allocations/{consumer}");
        let (project, user, ctype) = owner;
        let allocations: BTreeMap<Uuid, Value> = resources
            .iter()
            .filter(|(_, r)| !r.is_empty())
            .map(|(rp, r)| (*rp, json!({"resources": r})))
            .collect();
        let mut body = json!({
            "allocations": allocations,
            "project_id": project,
            "user_id": user,
            "consumer_generation": generation,
        });
        // An existing consumer Placement names "unknown" (written before types) keeps that:
        // the type is not rtrack's to set.
        if generation.is_some() && !ctype.is_empty() && !sendable_type(ctype) {
            self.call_before_types("put_allocation", Method::PUT, &path, &body)
                .await?;
            return Ok(());
        }
        if self.version_at_least(CONSUMER_TYPES) {
            body["consumer_type"] = json!(if ctype.is_empty() {
                "INSTANCE"
            } else {
                ctype.as_str()
            });
        }
        self.call("put_allocation", Method::PUT, &path, &[], Some(&body), &[])
            .await?;
        Ok(())
    }

    async fn reshape(
        &mut self,
        inventories: &BTreeMap<Uuid, (u64, BTreeMap<String, InventoryRecord>)>,
        allocations: &BTreeMap<Uuid, ConsumerAllocations>,
    ) -> Result<(), UpstreamError> {
        // Every consumer moved exists: without types in the request, Placement keeps each one's
        // (needed when one is "unknown", which cannot be sent).
        let keep_types = allocations
            .values()
            .any(|a| a.owner.as_ref().is_some_and(|o| !sendable_type(&o.2)));
        let with_types = self.version_at_least(CONSUMER_TYPES) && !keep_types;
        let body = reshaper_body(inventories, allocations, with_types);
        if keep_types {
            self.call_before_types("reshape", Method::POST, "/reshaper", &body)
                .await?;
        } else {
            self.call("reshape", Method::POST, "/reshaper", &[], Some(&body), &[])
                .await?;
        }
        Ok(())
    }

    async fn ensure_resource_class(&mut self, name: &str) -> Result<(), UpstreamError> {
        let path = format!("/resource_classes/{name}");
        self.call("put_resource_class", Method::PUT, &path, &[], None, &[])
            .await?;
        Ok(())
    }

    async fn ensure_trait(&mut self, name: &str) -> Result<(), UpstreamError> {
        let path = format!("/traits/{name}");
        self.call("put_trait", Method::PUT, &path, &[], None, &[])
            .await?;
        Ok(())
    }

    fn counts(&self) -> RequestCounts {
        self.counts.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn microversion_choice() {
        assert_eq!(choose_microversion((1, 0), (1, 39)), Some((1, 39)));
        assert_eq!(choose_microversion((1, 0), (1, 42)), Some((1, 39)));
        assert_eq!(choose_microversion((1, 0), (1, 30)), Some((1, 30)));
        assert_eq!(choose_microversion((1, 0), (1, 25)), None);
        assert_eq!(choose_microversion((1, 40), (1, 45)), None);
        assert_eq!(parse_version("1.39"), Some((1, 39)));
        assert_eq!(parse_version("x"), None);
    }

    #[test]
    fn errors_keep_status_and_code_only_for_matching() {
        let body = r#"{"errors": [{"status": 409, "title": "Conflict", "detail": "There was a conflict when trying to complete your request.\n\n resource provider generation conflict  ", "code": "placement.concurrent_update", "request_id": "req-1"}]}"#;
        let e = error_from_body("PUT", "/resource_providers/x/inventories", 409, body);
        assert!(e.is_concurrent_update());
        assert!(!e.is_inventory_in_use());
        assert!(!e.is_outage());
        assert_eq!(
            e.to_string(),
            "PUT /resource_providers/x/inventories: placement answered 409 placement.concurrent_update: There was a conflict when trying to complete your request. resource provider generation conflict"
        );
        // The same detail with another code is not a generation conflict.
        let other = body.replace("placement.concurrent_update", "placement.inventory.inuse");
        let e = error_from_body("PUT", "/p", 409, &other);
        assert!(e.is_inventory_in_use() && !e.is_concurrent_update());
        // Placement's words as it wrote them, for those who show them (nova-compute).
        assert_eq!(
            e.detail(),
            Some("There was a conflict when trying to complete your request.\n\n resource provider generation conflict  ")
        );
        // 401 from keystonemiddleware/noauth has a different body; 5xx is an outage.
        let e = error_from_body(
            "GET",
            "/p",
            401,
            r#"{"message": "This server could not verify", "code": "401 Unauthorized"}"#,
        );
        assert_eq!(e.code(), None);
        assert_eq!(e.status(), Some(401));
        let e = error_from_body("GET", "/p", 503, "<html>busy</html>");
        assert!(e.is_outage());
        assert!(e.to_string().contains("busy"));
    }

    /// A server answering `GET /` after the given delays, one per connection, in turn.
    async fn slow_server(delays: Vec<std::time::Duration>) -> String {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move {
            for delay in delays {
                let (mut conn, _) = listener.accept().await.unwrap();
                tokio::spawn(async move {
                    let mut seen = Vec::new();
                    let mut buf = [0u8; 1024];
                    while !seen.windows(4).any(|w| w == b"\r\n\r\n") {
                        match conn.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => seen.extend_from_slice(&buf[..n]),
                        }
                    }
                    tokio::time::sleep(delay).await;
                    let body = r#"{"versions": [{"min_version": "1.0", "max_version": "1.39"}]}"#;
                    let answer = format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = conn.write_all(answer.as_bytes()).await;
                });
            }
        });
        url
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_timeout_doubles_the_wait_for_the_next_answer_until_one_comes_promptly() {
        use std::time::Duration;
        let slow = Duration::from_millis(1500);
        let url = slow_server(vec![slow, slow, Duration::ZERO, slow]).await;
        let text = format!("[placement]\nendpoint = \"{url}\"\ntimeout_s = 1\n");
        let f = std::path::Path::new("t.toml");
        let cfg = crate::config::Config::parse(&text, f)
            .unwrap()
            .validate_in(f, &crate::config::placement_sources::Environment::empty())
            .unwrap();
        let mut api = HttpPlacement::new(cfg.placement_settings.as_ref().unwrap()).unwrap();
        // 1.5 s is beyond timeout_s: no answer, and the next request waits 2 s.
        let e = api.negotiate().await.unwrap_err();
        assert!(e.to_string().contains("timed out"), "{e}");
        assert_eq!(api.patience.current(), Duration::from_secs(2));
        // The same delay is answered now; the wait stays long (the answer was slow).
        assert_eq!(api.negotiate().await.unwrap(), (1, 39));
        assert_eq!(api.patience.current(), Duration::from_secs(2));
        // A prompt answer brings timeout_s back: 1.5 s is too long again.
        api.negotiate().await.unwrap();
        assert_eq!(api.patience.current(), Duration::from_secs(1));
        assert!(api.negotiate().await.is_err());
    }

    #[test]
    fn counts_subtract_per_kind() {
        let a = RequestCounts(BTreeMap::from([("get_tree", 2), ("put_traits", 1)]));
        let b = RequestCounts(BTreeMap::from([
            ("get_tree", 3),
            ("put_traits", 1),
            ("put_inventories", 2),
        ]));
        let d = b.since(&a);
        assert_eq!(d.total(), 3);
        assert_eq!(d.get("put_traits"), 0);
        assert_eq!(d.to_string(), "3 (get_tree=1, put_inventories=2)");
    }
}
