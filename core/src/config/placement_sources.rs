//! Where `[placement]`'s Keystone values come from, keystoneauth's way: the TOML keys, then a
//! clouds.yaml entry, then `OS_*` environment variables, key by key (the first source that
//! has a key gives it). So an operator may keep the credentials in the clouds.yaml nova and
//! the `openstack` client already use, or in an `EnvironmentFile` of the unit, and the TOML
//! names only what differs.
//!
//! In: `[placement]` as written and an [`Environment`] (the `OS_*` variables and where
//! clouds.yaml files are searched). Out: [`Merged`] values, each with its [`Origin`] so that an
//! error names the TOML key, the clouds.yaml file and path, or the variable it came from; or a
//! [`KeyError`] for a clouds.yaml that cannot be used.
//!
//! clouds.yaml is searched as openstacksdk does: `[placement] clouds_yaml`, else
//! `$OS_CLIENT_CONFIG_FILE`, else `clouds.yaml` (or `.yml`, `.json`) in the current directory,
//! `$XDG_CONFIG_HOME/openstack` (else `~/.config/openstack`), `/etc/xdg/openstack` and
//! `/etc/openstack`, the first found. `secure.yaml` (`$OS_CLIENT_SECURE_FILE`, else beside an
//! explicit file, else the first in the same places) is laid over it, its values winning. The
//! entry is `[placement] cloud`, else `$OS_CLOUD`. Unlike openstacksdk, which uses either a cloud
//! or the variables, rtrack merges key by key: a variable fills what the entry leaves out.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use yaml_rust2::Yaml;

use super::upstream::KeyError;
use super::PlacementConfig;

/// Largest clouds.yaml read (real ones are a few KiB).
const MAX_FILE_BYTES: u64 = 1 << 20;

/// The process's side of the configuration: `OS_*` variables and where clouds.yaml is looked
/// for. [`Environment::process`] reads the real one; tests build their own.
#[derive(Debug, Clone, Default)]
pub struct Environment {
    /// `OS_*` variables (others are not kept).
    pub vars: BTreeMap<String, String>,
    /// Directories searched for clouds.yaml and secure.yaml, in order.
    pub search_dirs: Vec<PathBuf>,
}

impl Environment {
    /// The running process's environment.
    pub fn process() -> Environment {
        let vars: BTreeMap<String, String> = std::env::vars()
            .filter(|(k, _)| k.starts_with("OS_"))
            .collect();
        let mut search_dirs = Vec::new();
        if let Ok(cwd) = std::env::current_dir() {
            search_dirs.push(cwd);
        }
        let home = std::env::var_os("HOME").map(PathBuf::from);
        match std::env::var_os("XDG_CONFIG_HOME").filter(|v| !v.is_empty()) {
            Some(x) => search_dirs.push(PathBuf::from(x).join("openstack")),
            None => {
                if let Some(h) = &home {
                    search_dirs.push(h.join(".config/openstack"));
                }
            }
        }
        search_dirs.push(PathBuf::from("/etc/xdg/openstack"));
        search_dirs.push(PathBuf::from("/etc/openstack"));
        Environment { vars, search_dirs }
    }

    /// No variables, no clouds.yaml anywhere (the TOML alone decides).
    pub fn empty() -> Environment {
        Environment::default()
    }
}

/// Where a value came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// `[placement] <key>` in rtrack's file.
    Toml(&'static str),
    /// A clouds.yaml file and the value's path in it (`clouds.<name>.auth.password`).
    Clouds {
        /// The file (clouds.yaml or the secure.yaml laid over it).
        file: PathBuf,
        /// Dotted path of the value in the file.
        path: String,
    },
    /// An environment variable.
    Env(&'static str),
}

impl Origin {
    /// A [`KeyError`] about the value from here; the value is already shown or hidden by the
    /// caller.
    pub fn error(&self, value: impl Into<String>, expected: &str) -> KeyError {
        let (file, key) = match self {
            Origin::Toml(k) => (None, format!("placement.{k}")),
            Origin::Clouds { file, path } => (Some(file.clone()), path.clone()),
            Origin::Env(v) => (Some(PathBuf::from("(environment)")), v.to_string()),
        };
        KeyError {
            key,
            value: value.into(),
            expected: expected.to_string(),
            file,
        }
    }

    /// The key as a person would look for it: `placement.password`, `OS_PASSWORD`, or
    /// `clouds.yaml /etc/openstack/clouds.yaml: clouds.x.auth.password`.
    pub fn describe(&self) -> String {
        match self {
            Origin::Toml(k) => format!("placement.{k}"),
            Origin::Clouds { file, path } => format!("{}: {path}", file.display()),
            Origin::Env(v) => format!("${v}"),
        }
    }
}

/// One value and where it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Given {
    /// The text as given.
    pub value: String,
    /// Its source.
    pub origin: Origin,
}

/// The Keystone-related `[placement]` values after the three sources are merged.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Merged {
    /// By field name (the TOML key's name).
    pub values: BTreeMap<&'static str, Given>,
    /// The clouds.yaml entry read, if any: file and cloud name.
    pub cloud: Option<(PathBuf, String)>,
    /// The first source with credentials (0 the TOML, 1 clouds.yaml, 2 the environment): an
    /// auth method not named anywhere is inferred from its values only.
    pub auth_source: Option<usize>,
}

impl Origin {
    /// 0 the TOML, 1 clouds.yaml, 2 the environment.
    pub fn source(&self) -> usize {
        match self {
            Origin::Toml(_) => 0,
            Origin::Clouds { .. } => 1,
            Origin::Env(_) => 2,
        }
    }
}

impl Merged {
    /// The value of `field`, if any source gave it.
    pub fn get(&self, field: &str) -> Option<&Given> {
        self.values.get(field)
    }
}

/// A field: its TOML name, its path under `clouds.<name>` in clouds.yaml (`auth.` for auth
/// values; a second one is an older spelling), and its variables.
struct Field {
    name: &'static str,
    clouds: &'static [&'static str],
    env: &'static [&'static str],
}

const FIELDS: &[Field] = &[
    Field {
        name: "auth",
        clouds: &["auth_type"],
        env: &["OS_AUTH_TYPE"],
    },
    Field {
        name: "endpoint",
        clouds: &["placement_endpoint_override"],
        env: &["OS_PLACEMENT_ENDPOINT_OVERRIDE"],
    },
    Field {
        name: "token",
        clouds: &["auth.token"],
        env: &["OS_TOKEN"],
    },
    Field {
        name: "auth_url",
        clouds: &["auth.auth_url"],
        env: &["OS_AUTH_URL"],
    },
    Field {
        name: "username",
        clouds: &["auth.username", "auth.user_name"],
        env: &["OS_USERNAME"],
    },
    Field {
        name: "user_id",
        clouds: &["auth.user_id"],
        env: &["OS_USER_ID"],
    },
    Field {
        name: "password",
        clouds: &["auth.password"],
        env: &["OS_PASSWORD"],
    },
    Field {
        name: "project_name",
        clouds: &["auth.project_name", "auth.tenant_name"],
        env: &["OS_PROJECT_NAME", "OS_TENANT_NAME"],
    },
    Field {
        name: "project_id",
        clouds: &["auth.project_id", "auth.tenant_id"],
        env: &["OS_PROJECT_ID", "OS_TENANT_ID"],
    },
    Field {
        name: "user_domain_name",
        clouds: &["auth.user_domain_name"],
        env: &["OS_USER_DOMAIN_NAME"],
    },
    Field {
        name: "user_domain_id",
        clouds: &["auth.user_domain_id"],
        env: &["OS_USER_DOMAIN_ID"],
    },
    Field {
        name: "project_domain_name",
        clouds: &["auth.project_domain_name"],
        env: &["OS_PROJECT_DOMAIN_NAME"],
    },
    Field {
        name: "project_domain_id",
        clouds: &["auth.project_domain_id"],
        env: &["OS_PROJECT_DOMAIN_ID"],
    },
    Field {
        name: "application_credential_id",
        clouds: &["auth.application_credential_id"],
        env: &["OS_APPLICATION_CREDENTIAL_ID"],
    },
    Field {
        name: "application_credential_name",
        clouds: &["auth.application_credential_name"],
        env: &["OS_APPLICATION_CREDENTIAL_NAME"],
    },
    Field {
        name: "application_credential_secret",
        clouds: &["auth.application_credential_secret"],
        env: &["OS_APPLICATION_CREDENTIAL_SECRET"],
    },
    Field {
        name: "region_name",
        clouds: &["region_name"],
        env: &["OS_REGION_NAME"],
    },
    Field {
        name: "interface",
        clouds: &["placement_interface", "interface"],
        env: &["OS_PLACEMENT_INTERFACE", "OS_INTERFACE"],
    },
];

/// Values that are secrets: never shown.
pub const SECRET_FIELDS: &[&str] = &["token", "password", "application_credential_secret"];

fn toml_value<'a>(c: &'a PlacementConfig, name: &str) -> Option<&'a String> {
    match name {
        "auth" => c.auth.as_ref(),
        "endpoint" => c.endpoint.as_ref(),
        "token" => c.token.as_ref(),
        "auth_url" => c.auth_url.as_ref(),
        "username" => c.username.as_ref(),
        "user_id" => c.user_id.as_ref(),
        "password" => c.password.as_ref(),
        "project_name" => c.project_name.as_ref(),
        "project_id" => c.project_id.as_ref(),
        "user_domain_name" => c.user_domain_name.as_ref(),
        "user_domain_id" => c.user_domain_id.as_ref(),
        "project_domain_name" => c.project_domain_name.as_ref(),
        "project_domain_id" => c.project_domain_id.as_ref(),
        "application_credential_id" => c.application_credential_id.as_ref(),
        "application_credential_name" => c.application_credential_name.as_ref(),
        "application_credential_secret" => c.application_credential_secret.as_ref(),
        "region_name" => c.region_name.as_ref(),
        "interface" => c.interface.as_ref(),
        _ => None,
    }
}

/// Merges the three sources. A clouds.yaml is read only when a cloud is named (`cloud`, else
/// `$OS_CLOUD`); naming one that no file has is an error.
pub fn merge(c: &PlacementConfig, env: &Environment) -> Result<Merged, KeyError> {
    let cloud_name = match &c.cloud {
        Some(n) => Some((n.clone(), Origin::Toml("cloud"))),
        None => env
            .vars
            .get("OS_CLOUD")
            .filter(|v| !v.is_empty())
            .map(|n| (n.clone(), Origin::Env("OS_CLOUD"))),
    };
    let cloud = match cloud_name {
        None => None,
        Some((name, origin)) => Some(read_cloud(c, env, &name, &origin)?),
    };
    let mut merged = Merged {
        values: BTreeMap::new(),
        cloud: cloud.as_ref().map(|c| (c.file.clone(), c.name.clone())),
        auth_source: None,
    };
    // Each field as each source gives it: [TOML, clouds.yaml, environment].
    let by_source = |f: &Field| -> [Option<Given>; 3] {
        let from_toml = toml_value(c, f.name).map(|v| Given {
            value: v.clone(),
            origin: Origin::Toml(f.name),
        });
        let from_cloud = cloud
            .as_ref()
            .and_then(|cl| f.clouds.iter().find_map(|path| cl.get(path)));
        let from_env = f.env.iter().find_map(|var| {
            env.vars.get(*var).filter(|v| !v.is_empty()).map(|v| Given {
                value: v.clone(),
                origin: Origin::Env(var),
            })
        });
        [from_toml, from_cloud, from_env]
    };
    let all: BTreeMap<&'static str, [Option<Given>; 3]> =
        FIELDS.iter().map(|f| (f.name, by_source(f))).collect();
    for (name, sources) in &all {
        if let Some(g) = sources.iter().flatten().next() {
            merged.values.insert(name, g.clone());
        }
    }
    // An id and a name say the same thing: the pair comes whole from the first source that
    // gives either (a TOML project_name must not lose to an OS_PROJECT_ID).
    for pair in PAIRS {
        let first = (0..3).find(|i| pair.iter().any(|f| all[f][*i].is_some()));
        if let Some(i) = first {
            for f in pair {
                match &all[f][i] {
                    Some(g) => merged.values.insert(f, g.clone()),
                    None => merged.values.remove(f),
                };
            }
        }
    }
    // The auth method is implied by the first source that has credentials at all.
    merged.auth_source = (0..3).find(|i| CREDENTIALS.iter().any(|f| all[f][*i].is_some()));
    Ok(merged)
}

/// Fields that name one thing by id or by name.
const PAIRS: &[[&str; 2]] = &[
    ["user_id", "username"],
    ["project_id", "project_name"],
    ["user_domain_id", "user_domain_name"],
    ["project_domain_id", "project_domain_name"],
    ["application_credential_id", "application_credential_name"],
];

/// Fields that are credentials (they imply an auth method when none is named).
const CREDENTIALS: &[&str] = &[
    "auth_url",
    "username",
    "user_id",
    "password",
    "application_credential_id",
    "application_credential_name",
    "application_credential_secret",
    "token",
];

/// One clouds.yaml entry, flattened to dotted paths (`auth.password`), secure.yaml laid over.
struct CloudEntry {
    name: String,
    file: PathBuf,
    /// Dotted path -> (value, the file it came from).
    values: BTreeMap<String, (String, PathBuf)>,
}

impl CloudEntry {
    fn get(&self, path: &str) -> Option<Given> {
        self.values.get(path).map(|(v, file)| Given {
            value: v.clone(),
            origin: Origin::Clouds {
                file: file.clone(),
                path: format!("clouds.{}.{path}", self.name),
            },
        })
    }
}

/// The first of `names` found in the search directories (or the explicit file).
fn find(dirs: &[PathBuf], names: &[&str]) -> Option<PathBuf> {
    dirs.iter()
        .flat_map(|d| names.iter().map(move |n| d.join(n)))
        .find(|p| p.is_file())
}

fn read_cloud(
    c: &PlacementConfig,
    env: &Environment,
    name: &str,
    named_by: &Origin,
) -> Result<CloudEntry, KeyError> {
    let explicit = c
        .clouds_yaml
        .as_ref()
        .map(|p| (p.clone(), Origin::Toml("clouds_yaml")))
        .or_else(|| {
            env.vars
                .get("OS_CLIENT_CONFIG_FILE")
                .filter(|v| !v.is_empty())
                .map(|p| (PathBuf::from(p), Origin::Env("OS_CLIENT_CONFIG_FILE")))
        });
    let file = match &explicit {
        Some((p, origin)) => {
            if !p.is_file() {
                return Err(origin.error(
                    format!("{:?}", p.display().to_string()),
                    "must name a readable clouds.yaml file",
                ));
            }
            p.clone()
        }
        None => find(
            &env.search_dirs,
            &["clouds.yaml", "clouds.yml", "clouds.json"],
        )
        .ok_or_else(|| {
            let searched: Vec<String> = env
                .search_dirs
                .iter()
                .map(|d| d.display().to_string())
                .collect();
            named_by.error(
                crate::echo::quoted(name),
                &format!(
                    "names a cloud, but no clouds.yaml was found (searched {}); set placement.clouds_yaml",
                    if searched.is_empty() { "nowhere".to_string() } else { searched.join(", ") }
                ),
            )
        })?,
    };
    let mut values = BTreeMap::new();
    let main = load_yaml(&file)?;
    let Some(entry) = cloud_in(&main, name) else {
        return Err(named_by.error(
            crate::echo::quoted(name),
            &format!("is not a cloud in {} (clouds.<name>)", file.display()),
        ));
    };
    flatten(&file, name, "", entry, &mut values)?;
    // secure.yaml beside the explicit file, else the first in the search path.
    let secure_file = env
        .vars
        .get("OS_CLIENT_SECURE_FILE")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .filter(|p| p.is_file());
    let secure = match &explicit {
        _ if secure_file.is_some() => secure_file,
        Some((p, _)) => p
            .parent()
            .map(|d| vec![d.to_path_buf()])
            .and_then(|d| find(&d, &["secure.yaml", "secure.yml"])),
        None => find(
            &env.search_dirs,
            &["secure.yaml", "secure.yml", "secure.json"],
        ),
    };
    if let Some(sfile) = secure {
        let doc = load_yaml(&sfile)?;
        if let Some(entry) = cloud_in(&doc, name) {
            flatten(&sfile, name, "", entry, &mut values)?;
        }
    }
    Ok(CloudEntry {
        name: name.to_string(),
        file,
        values,
    })
}

fn load_yaml(file: &Path) -> Result<Yaml, KeyError> {
    let err = |value: String, expected: &str| KeyError {
        key: "(file)".into(),
        value,
        expected: expected.to_string(),
        file: Some(file.to_path_buf()),
    };
    let meta = std::fs::metadata(file)
        .map_err(|e| err(format!("({e})"), "a readable clouds.yaml file"))?;
    // A FIFO or device would block or never end.
    if !meta.is_file() {
        return Err(err("(not a regular file)".into(), "a regular file"));
    }
    if meta.len() > MAX_FILE_BYTES {
        return Err(err(
            format!("{} bytes", meta.len()),
            "a clouds.yaml of at most 1 MiB",
        ));
    }
    let text = std::fs::read_to_string(file)
        .map_err(|e| err(format!("({e})"), "a readable UTF-8 clouds.yaml file"))?;
    let mut docs = super::yaml::load(&text).map_err(|e| match e {
        super::yaml::YamlError::Syntax { line, column, info } => {
            err(format!("(line {line}, column {column}: {info})"), "YAML")
        }
        super::yaml::YamlError::TooLarge(why) => err(
            format!("({why})"),
            "a clouds.yaml whose aliases expand to a bounded tree",
        ),
    })?;
    if docs.is_empty() {
        return Ok(Yaml::Null);
    }
    Ok(docs.swap_remove(0))
}

fn cloud_in<'a>(doc: &'a Yaml, name: &str) -> Option<&'a Yaml> {
    let Yaml::Hash(top) = doc else { return None };
    let Some(Yaml::Hash(clouds)) = top.get(&Yaml::String("clouds".into())) else {
        return None;
    };
    clouds.get(&Yaml::String(name.to_string()))
}

/// Scalars of `v` by dotted path; nested mappings are walked (two levels are all keystoneauth
/// uses: `auth.password`). Lists and other values are left out: they configure other tools.
fn flatten(
    file: &Path,
    cloud: &str,
    prefix: &str,
    v: &Yaml,
    out: &mut BTreeMap<String, (String, PathBuf)>,
) -> Result<(), KeyError> {
    let Yaml::Hash(h) = v else {
        if prefix.is_empty() {
            return Err(KeyError {
                key: format!("clouds.{cloud}"),
                value: "(not a mapping)".into(),
                expected: "a mapping of settings (auth, region_name, ...)".into(),
                file: Some(file.to_path_buf()),
            });
        }
        return Ok(());
    };
    for (k, val) in h {
        let Yaml::String(k) = k else { continue };
        let path = if prefix.is_empty() {
            k.clone()
        } else {
            format!("{prefix}.{k}")
        };
        let text = match val {
            Yaml::String(s) | Yaml::Real(s) => Some(s.clone()),
            Yaml::Integer(i) => Some(i.to_string()),
            Yaml::Boolean(b) => Some(b.to_string()),
            Yaml::Hash(_) if prefix.is_empty() => {
                flatten(file, cloud, &path, val, out)?;
                None
            }
            _ => None,
        };
        if let Some(t) = text {
            out.insert(path, (t, file.to_path_buf()));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn toml(text: &str) -> PlacementConfig {
        crate::config::Config::parse(text, Path::new("t.toml"))
            .unwrap()
            .placement
    }

    fn env_with(vars: &[(&str, &str)], dirs: &[&Path]) -> Environment {
        Environment {
            vars: vars
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            search_dirs: dirs.iter().map(|d| d.to_path_buf()).collect(),
        }
    }

    const CLOUDS: &str = "clouds:\n  prod:\n    auth_type: v3applicationcredential\n    region_name: RegionTwo\n    auth:\n      auth_url: http://keystone.example:5000/v3\n      application_credential_id: abc123\n      application_credential_secret: from-clouds\n  other:\n    auth:\n      username: someone\n";

    #[test]
    fn toml_wins_over_clouds_which_wins_over_env() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("clouds.yaml"), CLOUDS).unwrap();
        let env = env_with(
            &[
                ("OS_CLOUD", "prod"),
                ("OS_REGION_NAME", "RegionEnv"),
                ("OS_INTERFACE", "admin"),
                ("OS_AUTH_URL", "http://env:5000/v3"),
            ],
            &[dir.path()],
        );
        let m = merge(&toml("[placement]\nregion_name = \"RegionToml\"\n"), &env).unwrap();
        assert_eq!(m.get("region_name").unwrap().value, "RegionToml");
        assert_eq!(
            m.get("region_name").unwrap().origin,
            Origin::Toml("region_name")
        );
        let url = m.get("auth_url").unwrap();
        assert_eq!(url.value, "http://keystone.example:5000/v3");
        assert_eq!(
            url.origin.describe(),
            format!(
                "{}: clouds.prod.auth.auth_url",
                dir.path().join("clouds.yaml").display()
            )
        );
        assert_eq!(
            m.get("interface").unwrap().origin,
            Origin::Env("OS_INTERFACE")
        );
        assert_eq!(m.get("auth").unwrap().value, "v3applicationcredential");
        assert_eq!(m.cloud.as_ref().unwrap().1, "prod");
    }

    #[test]
    fn secure_yaml_is_laid_over_and_the_toml_cloud_wins_over_os_cloud() {
        let dir = tempfile::tempdir().unwrap();
        let etc = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("clouds.yaml"), CLOUDS).unwrap();
        std::fs::write(
            etc.path().join("secure.yaml"),
            "clouds:\n  other:\n    auth:\n      password: from-secure\n",
        )
        .unwrap();
        let env = env_with(&[("OS_CLOUD", "prod")], &[dir.path(), etc.path()]);
        let m = merge(&toml("[placement]\ncloud = \"other\"\n"), &env).unwrap();
        assert_eq!(m.get("username").unwrap().value, "someone");
        let pw = m.get("password").unwrap();
        assert_eq!(pw.value, "from-secure");
        assert!(
            pw.origin.describe().contains("secure.yaml"),
            "{:?}",
            pw.origin
        );
        assert!(m.get("application_credential_id").is_none());
    }

    #[test]
    fn explicit_file_and_missing_cloud_name_the_source() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("mine.yaml");
        std::fs::write(&f, CLOUDS).unwrap();
        let c = toml(&format!(
            "[placement]\ncloud = \"nope\"\nclouds_yaml = \"{}\"\n",
            f.display()
        ));
        let e = merge(&c, &Environment::empty()).unwrap_err();
        assert_eq!(e.key, "placement.cloud");
        assert!(e.expected.contains("mine.yaml"), "{e}");

        let e = merge(
            &toml("[placement]\nclouds_yaml = \"/nonexistent/c.yaml\"\ncloud = \"x\"\n"),
            &Environment::empty(),
        )
        .unwrap_err();
        assert_eq!(e.key, "placement.clouds_yaml");

        let e = merge(&toml(""), &env_with(&[("OS_CLOUD", "prod")], &[dir.path()])).unwrap_err();
        assert_eq!(e.key, "OS_CLOUD");
        assert!(e.expected.contains("no clouds.yaml was found"), "{e}");
    }

    #[test]
    fn broken_clouds_yaml_is_an_error_naming_the_file_never_a_panic() {
        let dir = tempfile::tempdir().unwrap();
        for (i, text) in [
            "clouds: [1, 2",
            "clouds:\n  prod: 3\n",
            "\u{0}\u{1}",
            "clouds:\n  prod:\n    auth: [a, b]\n",
        ]
        .iter()
        .enumerate()
        {
            let f = dir.path().join(format!("c{i}.yaml"));
            std::fs::write(&f, text).unwrap();
            let c = toml(&format!(
                "[placement]\ncloud = \"prod\"\nclouds_yaml = \"{}\"\n",
                f.display()
            ));
            match merge(&c, &Environment::empty()) {
                Ok(m) => assert!(m.get("username").is_none()),
                Err(e) => assert!(
                    e.file.as_deref() == Some(f.as_path())
                        || e.to_string().contains(&f.display().to_string()),
                    "{e}"
                ),
            }
        }
    }

    #[test]
    fn env_alone_and_legacy_names() {
        let env = env_with(
            &[
                ("OS_TENANT_NAME", "svc"),
                ("OS_APPLICATION_CREDENTIAL_SECRET", "s"),
                ("OS_PASSWORD", ""),
            ],
            &[],
        );
        let m = merge(&toml(""), &env).unwrap();
        assert_eq!(
            m.get("project_name").unwrap().origin,
            Origin::Env("OS_TENANT_NAME")
        );
        assert!(m.get("password").is_none(), "an empty variable is unset");
        assert!(m.cloud.is_none());
    }
}
