//! `[placement]` and `[upstream.http]` as written ([`PlacementConfig`], [`UpstreamHttpConfig`])
//! in, typed settings out ([`PlacementSettings`], [`HttpPushSettings`]). [`super::Config::validate`]
//! calls these, so that startup, SIGHUP and `--check-config` accept and refuse the same files.
//! Every error names the key; secrets (`password`, `token`) are never echoed, not even when they
//! are the bad value.
//!
//! In: the sections as written. Out: settings, or a [`KeyError`] naming the key.

use std::fmt;
use std::time::Duration;

use url::Url;

pub use super::placement::{
    validate_placement, AppCredential, AuthSettings, Domain, KeystoneAuth, KeystoneMethod, Named,
    PlacementSettings,
};
use super::UpstreamHttpConfig;

/// A bad `[placement]` or `[upstream.http]` value: the dotted key, the value as written (or
/// `(hidden)`, `(set)`, `(unset)` where the value is a secret or missing), and what is accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}{key} = {value}: {expected}", file.as_ref().map(|f| format!("{}: ", f.display())).unwrap_or_default())]
pub struct KeyError {
    /// Dotted key, e.g. `placement.endpoint`, a clouds.yaml path or an `OS_*` variable.
    pub key: String,
    /// The value as written, or a placeholder for secrets.
    pub value: String,
    /// What is accepted.
    pub expected: String,
    /// Where the key is when it is not in rtrack's file: a clouds.yaml, or `(environment)`.
    pub file: Option<std::path::PathBuf>,
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
        file: None,
    }
}

/// Parses an http(s) URL with no credentials, query or fragment (they would end up in logs or
/// be silently dropped), and strips trailing slashes so paths can be appended.
pub(super) fn parse_base_url(key: &str, s: &str) -> Result<Url, KeyError> {
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

pub(super) fn seconds(
    key: &str,
    v: Option<u64>,
    default: u64,
    allow_zero: bool,
) -> Result<u64, KeyError> {
    match v {
        None => Ok(default),
        Some(0) if !allow_zero => Err(bad(key, "0", "must be at least 1 (seconds)")),
        Some(v) if v > 86_400 => Err(bad(key, v.to_string(), "must be at most 86400 (a day)")),
        Some(v) => Ok(v),
    }
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
