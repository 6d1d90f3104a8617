use std::path::Path;
use std::time::Duration;

use super::*;

fn cfg(text: &str) -> PlacementConfig {
    let c = crate::config::Config::parse(text, Path::new("t.toml")).unwrap();
    c.placement
}

fn validate(text: &str) -> Result<Option<PlacementSettings>, KeyError> {
    validate_placement(&cfg(text), &Environment::empty())
}

fn env(vars: &[(&str, &str)]) -> Environment {
    Environment {
        vars: vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        search_dirs: Vec::new(),
    }
}

#[test]
fn no_endpoint_means_off() {
    assert_eq!(validate("").unwrap(), None);
    // Variables alone never switch reporting on.
    let e = env(&[
        ("OS_AUTH_URL", "http://k/v3"),
        ("OS_PASSWORD", "p"),
        ("OS_USERNAME", "u"),
    ]);
    assert_eq!(validate_placement(&cfg(""), &e).unwrap(), None);
}

#[test]
fn defaults_are_noauth_admin_60_300_10() {
    let s = validate("[placement]\nendpoint = \"http://127.0.0.1:8778/\"\n")
        .unwrap()
        .unwrap();
    assert_eq!(s.endpoint.unwrap().as_str(), "http://127.0.0.1:8778/");
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
    let s = validate("[placement]\nendpoint = \"https://c/placement/\"\nrefresh_interval_s = 0\n")
        .unwrap()
        .unwrap();
    assert_eq!(s.endpoint.unwrap().path(), "/placement");
    assert_eq!(s.refresh_interval, None);
}

#[test]
fn errors_name_the_key() {
    let e = |t: &str| validate(t).unwrap_err().to_string();
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
    assert!(e("[placement]\nauth = \"token\"\ntoken = \"t\"\n")
        .starts_with("placement.endpoint = (unset): must be set: only Keystone"));
    assert!(e("[placement]\nauth = \"application_credential\"\nauth_url = \"http://k/v3\"\napplication_credential_id = \"i\"\n")
        .starts_with("placement.application_credential_secret = (unset): is required"));
    assert!(e("[placement]\nauth = \"application_credential\"\nauth_url = \"http://k/v3\"\napplication_credential_name = \"n\"\napplication_credential_secret = \"s\"\n")
        .starts_with("placement.username = (unset)"));
    assert!(e("[placement]\nauth = \"password\"\nauth_url = \"http://k/v3\"\nusername = \"u\"\npassword = \"p\"\nproject_name = \"s\"\ninterface = \"private\"\n")
        .starts_with("placement.interface = \"private\": must be public, internal or admin"));
}

#[test]
fn keystone_methods_and_the_catalog() {
    let s = validate("[placement]\nauth = \"application_credential\"\nauth_url = \"http://k:5000/v3/\"\napplication_credential_id = \"abc\"\napplication_credential_secret = \"s\"\nregion_name = \"RegionOne\"\ninterface = \"publicURL, internal\"\n")
        .unwrap()
        .unwrap();
    assert_eq!(s.endpoint, None, "from the catalog");
    let AuthSettings::Keystone(k) = s.auth else {
        panic!("{:?}", s.auth)
    };
    assert_eq!(k.auth_url.as_str(), "http://k:5000/v3");
    assert_eq!(k.interfaces, vec!["public", "internal"]);
    assert_eq!(k.region.as_deref(), Some("RegionOne"));
    assert!(matches!(
        k.method,
        KeystoneMethod::ApplicationCredential { credential: AppCredential::Id(ref id), .. } if id == "abc"
    ));

    // By name: the owner by name and domain (Default), interfaces as Nova's default.
    let s = validate("[placement]\nauth = \"application_credential\"\nauth_url = \"http://k/v3\"\napplication_credential_name = \"rt\"\nusername = \"rtrack\"\napplication_credential_secret = \"s\"\n")
        .unwrap()
        .unwrap();
    let AuthSettings::Keystone(k) = s.auth else {
        panic!()
    };
    assert_eq!(k.interfaces, vec!["internal", "public"]);
    assert_eq!(
        k.method,
        KeystoneMethod::ApplicationCredential {
            credential: AppCredential::Name {
                name: "rt".into(),
                user: Named::Name {
                    name: "rtrack".into(),
                    domain: Domain::Name("Default".into())
                }
            },
            secret: Secret::new("s"),
        }
    );

    // Password with ids.
    let s = validate("[placement]\nauth = \"password\"\nauth_url = \"http://k/v3\"\nuser_id = \"u1\"\npassword = \"p\"\nproject_id = \"p1\"\nendpoint = \"http://placement:8778\"\n")
        .unwrap()
        .unwrap();
    assert!(s.endpoint.is_some());
    let AuthSettings::Keystone(k) = s.auth else {
        panic!()
    };
    assert!(matches!(
        k.method,
        KeystoneMethod::Password {
            user: Named::Id(_),
            project: Named::Id(_),
            ..
        }
    ));
}

#[test]
fn values_from_the_environment_name_their_variable() {
    let e = env(&[
        ("OS_AUTH_URL", "not a url"),
        ("OS_USERNAME", "rtrack"),
        ("OS_PASSWORD", "p"),
        ("OS_PROJECT_NAME", "service"),
    ]);
    let err = validate_placement(&cfg("[placement]\nauth = \"password\"\n"), &e).unwrap_err();
    assert_eq!(err.key, "OS_AUTH_URL");
    assert!(
        err.to_string()
            .starts_with("(environment): OS_AUTH_URL = \"not a url\""),
        "{err}"
    );
    // Inferred from the values when `auth` is not given anywhere (the cloud switches it on).
    let e = env(&[
        ("OS_AUTH_URL", "http://k/v3"),
        ("OS_APPLICATION_CREDENTIAL_ID", "id"),
        ("OS_APPLICATION_CREDENTIAL_SECRET", "s"),
        ("OS_PASSWORD", "ignored"),
    ]);
    let s = validate_placement(&cfg("[placement]\nendpoint = \"http://p:8778\"\n"), &e)
        .unwrap()
        .unwrap();
    assert!(matches!(
        s.auth,
        AuthSettings::Keystone(ref k) if matches!(k.method, KeystoneMethod::ApplicationCredential { .. })
    ));
    assert!(s.origins.contains(&(
        "application_credential_id",
        "$OS_APPLICATION_CREDENTIAL_ID".to_string()
    )));
    // An explicit TOML value wins over the variable.
    let s = validate_placement(
        &cfg("[placement]\nendpoint = \"http://p:8778\"\nauth = \"noauth\"\n"),
        &e,
    )
    .unwrap()
    .unwrap();
    assert!(matches!(s.auth, AuthSettings::NoAuth { .. }));
}

#[test]
fn secrets_never_appear_in_errors_or_debug() {
    let secret = "s3cr3t-Pa55";
    let cases = [
        format!("[placement]\nendpoint = \"http://u:{secret}@x\"\n"),
        format!("[placement]\nendpoint = \"http://x\"\npassword = \"{secret}\"\n"),
        format!("[placement]\nendpoint = \"http://x\"\nauth = \"password\"\nauth_url = \"http://k/v3\"\nusername = \"u\"\npassword = \"{secret}\"\n"),
        format!("[placement]\nendpoint = \"http://x\"\nauth = \"token\"\ntoken = \"{secret}\\n{secret}\"\n"),
        format!("[placement]\nauth = \"application_credential\"\nauth_url = \"http://k/v3\"\napplication_credential_id = \"i\"\napplication_credential_secret = \"{secret}\\n\"\n"),
        format!("[placement]\nauth = \"noauth\"\nendpoint = \"http://x\"\napplication_credential_secret = \"{secret}\"\n"),
    ];
    for text in &cases {
        let e = validate(text).unwrap_err();
        assert!(!e.to_string().contains(secret), "{e}");
        assert!(!format!("{e:?}").contains(secret), "{e:?}");
    }
    for text in [
        format!("[placement]\nendpoint = \"http://x\"\nauth = \"password\"\nauth_url = \"http://k/v3\"\nusername = \"u\"\npassword = \"{secret}\"\nproject_name = \"service\"\n"),
        format!("[placement]\nendpoint = \"http://x\"\nauth = \"token\"\ntoken = \"{secret}\"\n"),
        format!("[placement]\nauth = \"application_credential\"\nauth_url = \"http://k/v3\"\napplication_credential_id = \"i\"\napplication_credential_secret = \"{secret}\"\n"),
    ] {
        let ok = validate(&text).unwrap().unwrap();
        assert!(!format!("{ok:?}").contains(secret));
        assert!(!format!("{:?}", cfg(&text)).contains(secret));
    }
    // From a variable, and from a clouds.yaml.
    let e = env(&[("OS_APPLICATION_CREDENTIAL_SECRET", secret)]);
    let err = validate_placement(&cfg("[placement]\nauth = \"application_credential\"\n"), &e)
        .unwrap_err();
    assert!(!format!("{err} {err:?}").contains(secret));
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("clouds.yaml");
    std::fs::write(
        &f,
        format!("clouds:\n  c:\n    auth:\n      auth_url: \"ftp://x\"\n      password: {secret}\n      username: u\n      project_name: p\n"),
    )
    .unwrap();
    let err = validate_placement(
        &cfg(&format!(
            "[placement]\ncloud = \"c\"\nclouds_yaml = \"{}\"\nauth = \"password\"\n",
            f.display()
        )),
        &Environment::empty(),
    )
    .unwrap_err();
    assert!(err.key.ends_with("clouds.c.auth.auth_url"), "{err}");
    assert!(!format!("{err} {err:?}").contains(secret));
    assert_eq!(err.file.as_deref(), Some(f.as_path()));
}

#[test]
fn ids_and_names_come_as_a_pair_and_the_first_source_with_credentials_decides() {
    let toml = "[placement]\nendpoint = \"http://p:8778\"\nauth_url = \"http://k/v3\"\nusername = \"rtrack\"\npassword = \"pw\"\nproject_name = \"service\"\n";
    // An admin's shell: a project id and an application credential in the environment.
    let e = env(&[
        ("OS_PROJECT_ID", "0123"),
        ("OS_APPLICATION_CREDENTIAL_ID", "abc"),
        ("OS_APPLICATION_CREDENTIAL_SECRET", "s"),
        ("OS_TOKEN", "gAAAA-a-keystone-token"),
    ]);
    let s = validate_placement(&cfg(toml), &e).unwrap().unwrap();
    let AuthSettings::Keystone(k) = s.auth else {
        panic!("{:?}", s.auth)
    };
    match k.method {
        KeystoneMethod::Password { project, .. } => assert_eq!(
            project,
            Named::Name {
                name: "service".into(),
                domain: Domain::Name("Default".into())
            },
            "the TOML's project name, not the environment's id"
        ),
        other => panic!("the TOML's password setup, not {other:?}"),
    }
    // noauth: an OS_TOKEN is never sent as the noauth user.
    let s = validate_placement(
        &cfg("[placement]\nendpoint = \"http://p:8778\"\nauth = \"noauth\"\n"),
        &e,
    )
    .unwrap()
    .unwrap();
    match s.auth {
        AuthSettings::NoAuth { user, .. } => assert_eq!(user.expose(), "admin"),
        other => panic!("{other:?}"),
    }
}
