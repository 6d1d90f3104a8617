//! `[placement]` validated: where Placement is and how rtrack authenticates to it. The values
//! come merged from the TOML keys, a clouds.yaml entry and `OS_*` variables
//! ([`super::placement_sources`]); every error names the key, the clouds.yaml path or the
//! variable, and secrets are never echoed.
//!
//! In: `[placement]` as written and the [`Environment`]. Out: [`PlacementSettings`] (`None`
//! when reporting is off), or a [`KeyError`].
//!
//! Reporting is on when rtrack's own file says so: `[placement]` sets `endpoint`, `cloud` or
//! `auth`. Variables and clouds.yaml only supply values; an operator's shell with `OS_*`
//! variables does not make `rtrackd` report anywhere by itself.

use std::time::Duration;

use url::Url;

use super::placement_sources::{merge, Environment, Given, Merged, Origin, SECRET_FIELDS};
use super::upstream::{parse_base_url, seconds, KeyError, Secret};
use super::PlacementConfig;

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
    /// A Keystone v3 token, cached and renewed before it expires (and after a 401); Placement's
    /// endpoint from its catalog unless one is configured.
    Keystone(Box<KeystoneAuth>),
}

/// A Keystone domain, by id or by name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Domain {
    /// `*_domain_id`.
    Id(String),
    /// `*_domain_name` (default "Default").
    Name(String),
}

/// A Keystone user or project, by id or by name in a domain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Named {
    /// By id.
    Id(String),
    /// By name in a domain.
    Name {
        /// The name.
        name: String,
        /// Its domain.
        domain: Domain,
    },
}

/// The Keystone v3 auth method.
#[derive(Debug, Clone, PartialEq)]
pub enum KeystoneMethod {
    /// `password`, scoped to a project.
    Password {
        /// The user.
        user: Named,
        /// The user's password.
        password: Secret,
        /// The project the token is scoped to.
        project: Named,
    },
    /// `application_credential`: its token is scoped to the credential's project already.
    ApplicationCredential {
        /// By id, or by name with the user that owns it.
        credential: AppCredential,
        /// The secret.
        secret: Secret,
    },
}

/// An application credential, by id or by name and owner.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AppCredential {
    /// `application_credential_id`.
    Id(String),
    /// `application_credential_name` with the user (`user_id`, or `username` and its domain).
    Name {
        /// The credential's name.
        name: String,
        /// Its owner.
        user: Named,
    },
}

/// Keystone settings.
#[derive(Debug, Clone, PartialEq)]
pub struct KeystoneAuth {
    /// Keystone v3 base URL, e.g. `http://keystone:5000/v3`.
    pub auth_url: Url,
    /// Password or application credential.
    pub method: KeystoneMethod,
    /// The catalog's interfaces to take Placement's endpoint from, in order of preference.
    pub interfaces: Vec<String>,
    /// The catalog's region, if one must match.
    pub region: Option<String>,
}

impl KeystoneAuth {
    /// The user, for messages (never a secret).
    pub fn who(&self) -> String {
        let named = |n: &Named| match n {
            Named::Id(id) => format!("user id {id:?}"),
            Named::Name { name, .. } => format!("user {name:?}"),
        };
        match &self.method {
            KeystoneMethod::Password { user, .. } => named(user),
            KeystoneMethod::ApplicationCredential { credential, .. } => match credential {
                AppCredential::Id(id) => format!("application credential {id:?}"),
                AppCredential::Name { name, user } => {
                    format!("application credential {name:?} of {}", named(user))
                }
            },
        }
    }
}

/// `[placement] unclaimed_grace_s` when unset: longer than a build waits in a busy
/// nova-compute's queue between the scheduler's allocation and its claim.
pub const DEFAULT_UNCLAIMED_GRACE_S: u64 = 600;

/// `[placement]`, validated.
#[derive(Debug, Clone, PartialEq)]
pub struct PlacementSettings {
    /// Base URL, without a trailing slash; `None`: Placement's endpoint in Keystone's catalog.
    pub endpoint: Option<Url>,
    /// How requests to Placement authenticate: noauth2, a static token or Keystone.
    pub auth: AuthSettings,
    /// Time between reports (`report_interval_s`, default 60).
    pub report_interval: Duration,
    /// Age after which the cached tree is re-read (`refresh_interval_s`, default 300); `None`
    /// (`0`) re-reads only after errors.
    pub refresh_interval: Option<Duration>,
    /// Mirror local claims as allocations (`report_allocations`, default false).
    pub report_allocations: bool,
    /// How long a consumer with no local claim must have been seen before an operator may
    /// have it removed (`unclaimed_grace_s`, default 600): a build may be in flight before.
    pub unclaimed_grace: Duration,
    /// rtrack sets the hypervisor traits (`hypervisor_traits = "rtrack"`, the default); else
    /// nova-compute's virt driver does and rtrack leaves them as they are.
    pub hypervisor_traits_by_rtrack: bool,
    /// Timeout of one HTTP request (`timeout_s`, default 10).
    pub timeout: Duration,
    /// Where each value came from, for `--check-config` (`field -> origin`); no values.
    pub origins: Vec<(&'static str, String)>,
}

/// Interfaces as keystoneauth spells them: `public`, `internal`, `admin`, or `publicURL`...
fn interfaces(g: Option<&Given>) -> Result<Vec<String>, KeyError> {
    let Some(g) = g else {
        // Nova's [placement] valid_interfaces default.
        return Ok(vec!["internal".into(), "public".into()]);
    };
    let mut out = Vec::new();
    for part in g
        .value
        .split(|c: char| c == ',' || c.is_whitespace())
        .filter(|p| !p.is_empty())
    {
        let p = part.strip_suffix("URL").unwrap_or(part);
        match p {
            "public" | "internal" | "admin" => out.push(p.to_string()),
            _ => {
                return Err(g.origin.error(
                    crate::echo::quoted(&g.value),
                    "must be public, internal or admin, or a comma-separated list of them in order of preference",
                ))
            }
        }
    }
    if out.is_empty() {
        return Err(g.origin.error("\"\"", "must name an interface"));
    }
    Ok(out)
}

/// Validates `[placement]` with the values the environment and clouds.yaml supply. `Ok(None)`
/// when reporting is off.
pub fn validate_placement(
    c: &PlacementConfig,
    env: &Environment,
) -> Result<Option<PlacementSettings>, KeyError> {
    let enabled = c.endpoint.is_some() || c.cloud.is_some() || c.auth.is_some();
    if !enabled {
        // Auth keys without the switch are most likely a typo in the endpoint key's section.
        if c.token.is_some()
            || c.password.is_some()
            || c.application_credential_secret.is_some()
            || c.auth_url.is_some()
        {
            return Err(bad_toml(
                "endpoint",
                "(unset)",
                "must be set when other [placement] auth keys are (or set placement.cloud or placement.auth: Keystone's catalog then gives the endpoint)",
            ));
        }
        return Ok(None);
    }
    let m = merge(c, env)?;
    let auth = auth_settings(c, &m)?;
    let endpoint = match m.get("endpoint") {
        Some(g) => Some(url(g)?),
        None if matches!(auth, AuthSettings::Keystone(_)) => None,
        None => {
            return Err(bad_toml(
                "endpoint",
                "(unset)",
                "must be set: only Keystone auth (password or application_credential) can take it from the service catalog",
            ))
        }
    };
    let refresh = seconds(
        "placement.refresh_interval_s",
        c.refresh_interval_s,
        300,
        true,
    )?;
    let origins = m
        .values
        .iter()
        .map(|(k, g)| (*k, g.origin.describe()))
        .collect();
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
        hypervisor_traits_by_rtrack: match c.hypervisor_traits.as_deref() {
            None | Some("rtrack") => true,
            Some("nova-compute") => false,
            Some(other) => {
                return Err(bad_toml(
                    "hypervisor_traits",
                    &crate::echo::quoted(other),
                    "must be \"rtrack\" (rtrack sets them from the kernel) or \"nova-compute\" (its virt driver sets them; rtrack leaves them alone)",
                ))
            }
        },
        unclaimed_grace: Duration::from_secs(seconds(
            "placement.unclaimed_grace_s",
            c.unclaimed_grace_s,
            DEFAULT_UNCLAIMED_GRACE_S,
            true,
        )?),
        timeout: Duration::from_secs(seconds("placement.timeout_s", c.timeout_s, 10, false)?),
        origins,
    }))
}

fn bad_toml(key: &'static str, value: &str, expected: &str) -> KeyError {
    Origin::Toml(key).error(value, expected)
}

fn shown(field: &str, g: &Given) -> String {
    if SECRET_FIELDS.contains(&field) {
        "(hidden)".into()
    } else {
        crate::echo::quoted(&g.value)
    }
}

fn url(g: &Given) -> Result<Url, KeyError> {
    parse_base_url("", &g.value).map_err(|e| g.origin.error(e.value, &e.expected))
}

/// The auth method the sources name, or the one their values imply.
fn auth_kind(m: &Merged) -> Result<&'static str, KeyError> {
    let Some(g) = m.get("auth") else {
        // Only the first source with credentials decides: an application credential in the
        // environment does not turn the TOML's password setup into something else.
        let has = |f: &str| {
            m.get(f)
                .is_some_and(|g| Some(g.origin.source()) == m.auth_source)
        };
        return Ok(
            if has("application_credential_id") || has("application_credential_name") {
                "application_credential"
            } else if has("auth_url") && has("password") && (has("username") || has("user_id")) {
                "password"
            } else {
                "noauth"
            },
        );
    };
    Ok(match g.value.trim() {
        "noauth" | "none" | "noauth2" => "noauth",
        "token" | "v3token" | "admin_token" | "token_endpoint" => "token",
        "password" | "v3password" => "password",
        "application_credential" | "v3applicationcredential" | "applicationcredential" => {
            "application_credential"
        }
        _ => {
            return Err(g.origin.error(
                crate::echo::quoted(&g.value),
                "must be \"noauth\", \"token\", \"password\" or \"application_credential\" (keystoneauth's v3password, v3applicationcredential and v3token are taken too)",
            ))
        }
    })
}

/// What each method uses; a TOML key outside it is an error (a `password` under
/// `auth = "noauth"` is a mistake worth hearing about). Values from clouds.yaml and the
/// environment that a method does not use are ignored: those sources serve other tools too.
fn used_by(kind: &str) -> &'static [&'static str] {
    match kind {
        "noauth" => &["auth", "endpoint", "token"],
        "token" => &["auth", "endpoint", "token"],
        "password" => &[
            "auth",
            "endpoint",
            "auth_url",
            "username",
            "user_id",
            "password",
            "project_name",
            "project_id",
            "user_domain_name",
            "user_domain_id",
            "project_domain_name",
            "project_domain_id",
            "region_name",
            "interface",
        ],
        _ => &[
            "auth",
            "endpoint",
            "auth_url",
            "username",
            "user_id",
            "user_domain_name",
            "user_domain_id",
            "application_credential_id",
            "application_credential_name",
            "application_credential_secret",
            "region_name",
            "interface",
        ],
    }
}

fn auth_settings(c: &PlacementConfig, m: &Merged) -> Result<AuthSettings, KeyError> {
    let kind = auth_kind(m)?;
    reject_unused_keys(c, m, kind)?;
    let f = AuthFields { m, kind };
    match kind {
        "noauth" => noauth_settings(c, &f),
        "token" => Ok(AuthSettings::Token(Secret::new(
            f.required("token")?.value.clone(),
        ))),
        _ => keystone_settings(&f),
    }
}

/// A TOML key the auth method does not use, or `roles` outside noauth, is an error.
fn reject_unused_keys(c: &PlacementConfig, m: &Merged, kind: &str) -> Result<(), KeyError> {
    for (field, g) in &m.values {
        if matches!(g.origin, Origin::Toml(_)) && !used_by(kind).contains(field) {
            return Err(g.origin.error(
                "(set)",
                &format!("is not used with auth = \"{kind}\"; remove it or change placement.auth"),
            ));
        }
    }
    if c.roles.is_some() && kind != "noauth" {
        return Err(bad_toml(
            "roles",
            "(set)",
            &format!("is not used with auth = \"{kind}\"; remove it or change placement.auth"),
        ));
    }
    Ok(())
}

/// The merged values as auth method `kind` reads them: each one it uses is checked (set when
/// required, not empty, one line) whichever source gave it.
struct AuthFields<'a> {
    m: &'a Merged,
    kind: &'a str,
}

impl<'a> AuthFields<'a> {
    fn required(&self, field: &'static str) -> Result<&'a Given, KeyError> {
        let kind = self.kind;
        let g = self.m.get(field).ok_or_else(|| {
            bad_toml(
                field,
                "(unset)",
                &format!(
                    "is required for auth = \"{kind}\" (here, in the clouds.yaml entry, or as $OS_{})",
                    field.to_ascii_uppercase()
                ),
            )
        })?;
        if g.value.trim().is_empty() {
            return Err(g.origin.error(
                if SECRET_FIELDS.contains(&field) {
                    "(hidden)".to_string()
                } else {
                    "\"\"".to_string()
                },
                "must not be empty",
            ));
        }
        if g.value.contains(['\r', '\n']) {
            return Err(g.origin.error(shown(field, g), "must be one line"));
        }
        Ok(g)
    }

    fn optional(&self, field: &'static str) -> Result<Option<String>, KeyError> {
        match self.m.get(field) {
            None => Ok(None),
            Some(_) => self.required(field).map(|g| Some(g.value.clone())),
        }
    }

    fn domain(&self, id: &'static str, name: &'static str) -> Result<Domain, KeyError> {
        Ok(match self.optional(id)? {
            Some(i) => Domain::Id(i),
            None => Domain::Name(self.optional(name)?.unwrap_or_else(|| "Default".into())),
        })
    }

    fn user(&self) -> Result<Named, KeyError> {
        Ok(match self.optional("user_id")? {
            Some(id) => Named::Id(id),
            None => Named::Name {
                name: self.required("username")?.value.clone(),
                domain: self.domain("user_domain_id", "user_domain_name")?,
            },
        })
    }
}

/// No Keystone: the user rtrack's file names as `token` (else `admin`), and the roles sent.
fn noauth_settings(c: &PlacementConfig, f: &AuthFields) -> Result<AuthSettings, KeyError> {
    // Only rtrack's own file names the noauth user: an OS_TOKEN is a Keystone token,
    // not to be sent as a user name.
    let user = match f.m.get("token") {
        Some(g) if matches!(g.origin, Origin::Toml(_)) => f.required("token")?.value.clone(),
        _ => "admin".into(),
    };
    if let Some(r) = &c.roles {
        if r.trim().is_empty() || r.contains(['\r', '\n']) {
            return Err(bad_toml(
                "roles",
                &crate::echo::quoted(r),
                "must be a comma-separated role list like \"service\"",
            ));
        }
    }
    Ok(AuthSettings::NoAuth {
        user: Secret::new(user),
        roles: c.roles.clone(),
    })
}

/// Password or application credential (`f.kind`) authentication through Keystone.
fn keystone_settings(f: &AuthFields) -> Result<AuthSettings, KeyError> {
    let auth_url = url(f.required("auth_url")?)?;
    let method = if f.kind == "password" {
        let project = match f.optional("project_id")? {
            Some(id) => Named::Id(id),
            None => Named::Name {
                name: f.required("project_name")?.value.clone(),
                domain: f.domain("project_domain_id", "project_domain_name")?,
            },
        };
        KeystoneMethod::Password {
            user: f.user()?,
            password: Secret::new(f.required("password")?.value.clone()),
            project,
        }
    } else {
        let credential = match f.optional("application_credential_id")? {
            Some(id) => AppCredential::Id(id),
            None => AppCredential::Name {
                name: f.required("application_credential_name")?.value.clone(),
                user: f.user()?,
            },
        };
        KeystoneMethod::ApplicationCredential {
            credential,
            secret: Secret::new(f.required("application_credential_secret")?.value.clone()),
        }
    };
    Ok(AuthSettings::Keystone(Box::new(KeystoneAuth {
        auth_url,
        method,
        interfaces: interfaces(f.m.get("interface"))?,
        region: f.optional("region_name")?,
    })))
}

#[cfg(test)]
mod tests;
