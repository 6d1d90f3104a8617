//! `[placement]` and `[upstream.http]` as written ([`PlacementConfig`], [`UpstreamHttpConfig`])
//! in, typed settings out ([`PlacementSettings`], [`HttpPushSettings`]). [`super::Config::validate`]
//! calls these, so that startup, SIGHUP and `--check-config` accept and refuse the same files.
//! Every error names the key; secrets (`password`, `token`) are never echoed, not even when they
//! are the bad value.
//!
//! In: the sections as written. Out: settings, or a [`KeyError`] naming the key.

use std::fmt;
use std::time::Duration;

use reqwest::Url;

use super::{PlacementConfig, UpstreamHttpConfig};

/// A bad `[placement]` or `[upstream.http]` value: the dotted key, the value as written (or
/// `(hidden)`, `(set)`, `(unset)` where the value is a secret or missing), and what is accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{key} = {value}: {expected}")]
pub struct KeyError {
    /// Dotted key, e.g. `placement.endpoint`.
    pub key: String,
    /// The value as written, or a placeholder for secrets.
    pub value: String,
    /// What is accepted.
    pub expected: String,
}

/// A password or token. `Debug` and `Display` print `(hidden)`, so a secret cannot reach a log
/// line or an error message by accident; [`Secret::expose`] is the only way to the text.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps a secret.
    pub fn new(s: impl Into<String>) -> Secret {
        Secret(s.into())
    }

    /// The secret text, for the one place that sends it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("(hidden)")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("(hidden)")
    }
}

/// How rtrack authenticates to Placement.
#[derive(Debug, Clone, PartialEq)]
pub enum AuthSettings {
    /// Placement's `noauth2`: `X-Auth-Token: <user>` and optional `X-Roles`.
    NoAuth {
        /// Sent as `X-Auth-Token` (noauth2 reads it as `user[:project]`). Default "admin".
        user: Secret,
        /// Sent as `X-Roles`, e.g. "service".
        roles: Option<String>,
    },
    /// A static token sent as `X-Auth-Token`.
    Token(Secret),
    /// Keystone v3 password authentication; the token is cached and renewed before it expires.
    Password(KeystonePassword),
}

/// Keystone v3 password credentials.
#[derive(Debug, Clone, PartialEq)]
pub struct KeystonePassword {
    /// Keystone v3 base URL, e.g. `http://keystone:5000/v3`.
    pub auth_url: Url,
    /// User name.
    pub username: String,
    /// The user's password (printed as `(hidden)`).
    pub password: Secret,
    /// Project to scope the token to.
    pub project_name: String,
    /// The user's domain. Default "Default".
    pub user_domain_name: String,
    /// The project's domain. Default "Default".
    pub project_domain_name: String,
}

/// `[placement]`, validated.
#[derive(Debug, Clone, PartialEq)]
pub struct PlacementSettings {
    /// Base URL, without a trailing slash. Every request goes below it.
    pub endpoint: Url,
    /// How requests to Placement authenticate: noauth2, a static token or Keystone.
    pub auth: AuthSettings,
    /// Time between reports (`report_interval_s`, default 60).
    pub report_interval: Duration,
    /// Age after which the cached tree is re-read (`refresh_interval_s`, default 300); `None`
    /// (`0`) re-reads only after errors.
    pub refresh_interval: Option<Duration>,
    /// Mirror local claims as allocations (`report_allocations`, default false).
    pub report_allocations: bool,
    /// Timeout of one HTTP request (`timeout_s`, default 10).
    pub timeout: Duration,
}

/// `[upstream.http]`, validated.
#[derive(Debug, Clone, PartialEq)]
pub struct HttpPushSettings {
    /// Where the ComputeNode primitive is POSTed.
    pub url: Url,
    /// Timeout of one POST.
    pub timeout: Duration,
    /// ComputeNode version to send (backported); `None`: the newest.
    pub object_version: Option<crate::objects::ObjVersion>,
}

fn bad(key: &str, value: impl Into<String>, expected: &str) -> KeyError {
    KeyError {
        key: key.to_string(),
        value: value.into(),
        expected: expected.to_string(),
    }
}

/// Parses an http(s) URL with no credentials, query or fragment (they would end up in logs or
/// be silently dropped), and strips trailing slashes so paths can be appended.
fn parse_base_url(key: &str, s: &str) -> Result<Url, KeyError> {
    let shown = format!("{s:?}");
    let url = Url::parse(s.trim()).map_err(|e| {
        bad(
            key,
            shown.clone(),
            &format!("must be an http:// or https:// URL ({e})"),
        )
    })?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
        return Err(bad(key, shown, "must be an http:// or https:// URL"));
    }
    if !url.username().is_empty() || url.password().is_some() {
        // Do not echo: the URL carries a credential.
        return Err(bad(
            key,
            "(hidden: it contains credentials)",
            "must not contain a user or password; use the auth keys",
        ));
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err(bad(key, shown, "must not have a query or fragment"));
    }
    let mut url = url;
    let path = url.path().trim_end_matches('/').to_string();
    url.set_path(&path);
    Ok(url)
}

fn seconds(key: &str, v: Option<u64>, default: u64, allow_zero: bool) -> Result<u64, KeyError> {
    match v {
        None => Ok(default),
        Some(0) if !allow_zero => Err(bad(key, "0", "must be at least 1 (seconds)")),
        Some(v) if v > 86_400 => Err(bad(key, v.to_string(), "must be at most 86400 (a day)")),
        Some(v) => Ok(v),
    }
}

/// Validates `[placement]`. `Ok(None)` when `endpoint` is unset (reporting off).
pub fn validate_placement(c: &PlacementConfig) -> Result<Option<PlacementSettings>, KeyError> {
    let Some(endpoint) = &c.endpoint else {
        // Auth keys without an endpoint are most likely a typo in the endpoint key's section.
        if c.auth.is_some() || c.token.is_some() || c.password.is_some() {
            return Err(bad(
                "placement.endpoint",
                "(unset)",
                "must be set when other [placement] auth keys are",
            ));
        }
        return Ok(None);
    };
    let endpoint = parse_base_url("placement.endpoint", endpoint)?;
    let non_empty = |key: &str, v: &Option<String>, secret: bool| -> Result<String, KeyError> {
        match v {
            Some(s) if !s.trim().is_empty() => Ok(s.clone()),
            Some(_) => Err(bad(
                key,
                if secret { "(hidden)" } else { "\"\"" },
                "must not be empty",
            )),
            None => Err(bad(key, "(unset)", "is required for this auth method")),
        }
    };
    let only_for = |method: &str, keys: &[(&str, bool)]| -> Result<(), KeyError> {
        for (key, set) in keys {
            if *set {
                return Err(bad(
                    &format!("placement.{key}"),
                    "(set)",
                    &format!(
                        "is not used with auth = \"{method}\"; remove it or change placement.auth"
                    ),
                ));
            }
        }
        Ok(())
    };
    let keystone_keys = [
        ("auth_url", c.auth_url.is_some()),
        ("username", c.username.is_some()),
        ("password", c.password.is_some()),
        ("project_name", c.project_name.is_some()),
        ("user_domain_name", c.user_domain_name.is_some()),
        ("project_domain_name", c.project_domain_name.is_some()),
    ];
    let auth = match c.auth.as_deref().unwrap_or("noauth") {
        "noauth" => {
            only_for("noauth", &keystone_keys)?;
            let user = match &c.token {
                None => "admin".to_string(),
                Some(_) => non_empty("placement.token", &c.token, true)?,
            };
            if let Some(r) = &c.roles {
                if r.trim().is_empty() || r.contains(['\r', '\n']) {
                    return Err(bad(
                        "placement.roles",
                        format!("{r:?}"),
                        "must be a comma-separated role list like \"service\"",
                    ));
                }
            }
            AuthSettings::NoAuth {
                user: Secret::new(user),
                roles: c.roles.clone(),
            }
        }
        "token" => {
            only_for("token", &keystone_keys)?;
            only_for("token", &[("roles", c.roles.is_some())])?;
            let t = non_empty("placement.token", &c.token, true)?;
            if t.contains(['\r', '\n']) {
                return Err(bad("placement.token", "(hidden)", "must be one line"));
            }
            AuthSettings::Token(Secret::new(t))
        }
        "password" => {
            only_for(
                "password",
                &[("token", c.token.is_some()), ("roles", c.roles.is_some())],
            )?;
            let auth_url = non_empty("placement.auth_url", &c.auth_url, false)?;
            AuthSettings::Password(KeystonePassword {
                auth_url: parse_base_url("placement.auth_url", &auth_url)?,
                username: non_empty("placement.username", &c.username, false)?,
                password: Secret::new(non_empty("placement.password", &c.password, true)?),
                project_name: non_empty("placement.project_name", &c.project_name, false)?,
                user_domain_name: c
                    .user_domain_name
                    .clone()
                    .unwrap_or_else(|| "Default".into()),
                project_domain_name: c
                    .project_domain_name
                    .clone()
                    .unwrap_or_else(|| "Default".into()),
            })
        }
        other => {
            return Err(bad(
                "placement.auth",
                format!("{other:?}"),
                "must be \"noauth\", \"token\" or \"password\"",
            ))
        }
    };
    let refresh = seconds(
        "placement.refresh_interval_s",
        c.refresh_interval_s,
        300,
        true,
    )?;
    Ok(Some(PlacementSettings {
        endpoint,
        auth,
        report_interval: Duration::from_secs(seconds(
            "placement.report_interval_s",
            c.report_interval_s,
            60,
            false,
        )?),
        refresh_interval: (refresh > 0).then(|| Duration::from_secs(refresh)),
        report_allocations: c.report_allocations.unwrap_or(false),
        timeout: Duration::from_secs(seconds("placement.timeout_s", c.timeout_s, 10, false)?),
    }))
}

/// Validates `[upstream.http]`. `Ok(None)` when the section is absent.
pub fn validate_http_push(
    c: Option<&UpstreamHttpConfig>,
) -> Result<Option<HttpPushSettings>, KeyError> {
    let Some(c) = c else { return Ok(None) };
    let object_version = match &c.object_version {
        None => None,
        Some(v) => {
            let newest =
                <crate::objects::compute_node::ComputeNode as crate::objects::NovaObject>::VERSION;
            match crate::objects::ObjVersion::parse(v) {
                Some(ver) if ver.major == newest.major && ver <= newest => Some(ver),
                _ => {
                    return Err(bad(
                        "upstream.http.object_version",
                        format!("{v:?}"),
                        &format!(
                            "must be a ComputeNode version from 1.0 to {newest}, e.g. \"1.16\""
                        ),
                    ))
                }
            }
        }
    };
    Ok(Some(HttpPushSettings {
        url: parse_base_url("upstream.http.url", &c.url)?,
        timeout: Duration::from_secs(seconds("upstream.http.timeout_s", c.timeout_s, 10, false)?),
        object_version,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(text: &str) -> PlacementConfig {
        let c = crate::config::Config::parse(text, std::path::Path::new("t.toml")).unwrap();
        c.placement
    }

    #[test]
    fn no_endpoint_means_off() {
        assert_eq!(validate_placement(&cfg("")).unwrap(), None);
    }

    #[test]
    fn defaults_are_noauth_admin_60_300_10() {
        let s = validate_placement(&cfg("[placement]\nendpoint = \"http://127.0.0.1:8778/\"\n"))
            .unwrap()
            .unwrap();
        assert_eq!(s.endpoint.as_str(), "http://127.0.0.1:8778/");
        assert_eq!(s.report_interval, Duration::from_secs(60));
        assert_eq!(s.refresh_interval, Some(Duration::from_secs(300)));
        assert_eq!(s.timeout, Duration::from_secs(10));
        assert!(!s.report_allocations);
        match s.auth {
            AuthSettings::NoAuth { user, roles } => {
                assert_eq!(user.expose(), "admin");
                assert_eq!(roles, None);
            }
            other => panic!("{other:?}"),
        }
        let s = validate_placement(&cfg(
            "[placement]\nendpoint = \"https://c/placement/\"\nrefresh_interval_s = 0\n",
        ))
        .unwrap()
        .unwrap();
        assert_eq!(s.endpoint.path(), "/placement");
        assert_eq!(s.refresh_interval, None);
    }

    #[test]
    fn errors_name_the_key() {
        let e = |t: &str| validate_placement(&cfg(t)).unwrap_err().to_string();
        assert_eq!(
            e("[placement]\nendpoint = \"ftp://x\"\n"),
            "placement.endpoint = \"ftp://x\": must be an http:// or https:// URL"
        );
        assert!(
            e("[placement]\nendpoint = \"http://x\"\nauth = \"kerberos\"\n")
                .starts_with("placement.auth = \"kerberos\": must be")
        );
        assert!(
            e("[placement]\nendpoint = \"http://x\"\nreport_interval_s = 0\n")
                .starts_with("placement.report_interval_s = 0: must be at least 1")
        );
        assert!(
            e("[placement]\nendpoint = \"http://x\"\nauth = \"token\"\n")
                .starts_with("placement.token = (unset): is required")
        );
        assert!(e("[placement]\nendpoint = \"http://x\"\nauth = \"password\"\nauth_url = \"http://k/v3\"\nusername = \"u\"\npassword = \"p\"\n")
            .starts_with("placement.project_name = (unset)"));
        assert!(
            e("[placement]\nendpoint = \"http://x\"\npassword = \"p\"\n")
                .starts_with("placement.password = (set): is not used with auth = \"noauth\"")
        );
        assert!(e("[placement]\ntoken = \"t\"\n").starts_with("placement.endpoint = (unset)"));
    }

    #[test]
    fn secrets_never_appear_in_errors_or_debug() {
        let secret = "s3cr3t-Pa55";
        let cases = [
            format!("[placement]\nendpoint = \"http://u:{secret}@x\"\n"),
            format!("[placement]\nendpoint = \"http://x\"\npassword = \"{secret}\"\n"),
            format!("[placement]\nendpoint = \"http://x\"\nauth = \"password\"\nauth_url = \"http://k/v3\"\nusername = \"u\"\npassword = \"{secret}\"\n"),
            format!("[placement]\nendpoint = \"http://x\"\nauth = \"token\"\ntoken = \"{secret}\\n{secret}\"\n"),
        ];
        for text in &cases {
            let e = validate_placement(&cfg(text)).unwrap_err();
            assert!(!e.to_string().contains(secret), "{e}");
            assert!(!format!("{e:?}").contains(secret), "{e:?}");
        }
        let ok = validate_placement(&cfg(&format!(
            "[placement]\nendpoint = \"http://x\"\nauth = \"password\"\nauth_url = \"http://k/v3\"\nusername = \"u\"\npassword = \"{secret}\"\nproject_name = \"service\"\n"
        )))
        .unwrap()
        .unwrap();
        assert!(!format!("{ok:?}").contains(secret));
        let ok = validate_placement(&cfg(&format!(
            "[placement]\nendpoint = \"http://x\"\nauth = \"token\"\ntoken = \"{secret}\"\n"
        )))
        .unwrap()
        .unwrap();
        assert!(!format!("{ok:?}").contains(secret));
    }

    #[test]
    fn http_push_url_is_checked() {
        let c = UpstreamHttpConfig {
            url: "not a url".into(),
            object_version: None,
            timeout_s: None,
        };
        let e = validate_http_push(Some(&c)).unwrap_err().to_string();
        assert!(e.starts_with("upstream.http.url = \"not a url\""), "{e}");
        let c = UpstreamHttpConfig {
            url: "http://127.0.0.1:9/".into(),
            object_version: Some("2.3".into()),
            timeout_s: None,
        };
        let e = validate_http_push(Some(&c)).unwrap_err().to_string();
        assert!(
            e.starts_with("upstream.http.object_version = \"2.3\""),
            "{e}"
        );
    }
}
