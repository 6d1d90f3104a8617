//! The packaged Prometheus alerting rules (`packaging/monitoring/`): `promtool check rules`
//! accepts them, their unit test (`promtool test rules`, synthetic series on which each alert
//! must fire, and not on the others) passes, and every metric they read is one rtrackd exposes
//! (docs/metrics.md, which a unit test keeps equal to the registry).

use std::path::{Path, PathBuf};
use std::process::Command;

fn monitoring() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("packaging/monitoring")
}

/// `promtool` with `args` in the monitoring folder; `None` when promtool is missing and
/// RTRACK_SKIP_PROMTOOL is set.
fn promtool(args: &[&str]) -> Option<(bool, String)> {
    match Command::new("promtool")
        .args(args)
        .current_dir(monitoring())
        .output()
    {
        Ok(out) => Some((
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned()
                + &String::from_utf8_lossy(&out.stderr),
        )),
        Err(_) if std::env::var_os("RTRACK_SKIP_PROMTOOL").is_some() => {
            eprintln!("promtool not installed; skipped because RTRACK_SKIP_PROMTOOL is set");
            None
        }
        Err(e) => panic!(
            "promtool is needed to check the alerting rules ({e}): scripts/test installs it (Debian package prometheus)"
        ),
    }
}

#[test]
fn the_alerting_rules_are_valid_and_their_unit_test_passes() {
    let Some((ok, text)) = promtool(&["check", "rules", "rtrack-alerts.yml"]) else {
        return;
    };
    assert!(ok, "{text}");
    assert!(text.contains("9 rules found"), "{text}");
    let Some((ok, text)) = promtool(&["test", "rules", "rtrack-alerts.test.yml"]) else {
        return;
    };
    assert!(ok, "{text}");
}

/// The metric families an expression reads (`rtrack_x_bucket` is family `rtrack_x`).
fn families(text: &str) -> Vec<String> {
    let re = regex::Regex::new(r"rtrack_[a-z_]+").unwrap();
    let mut names: Vec<String> = re
        .find_iter(text)
        .map(|m| {
            let n = m.as_str();
            ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|s| n.strip_suffix(s))
                .unwrap_or(n)
                .to_string()
        })
        .collect();
    names.sort_unstable();
    names.dedup();
    names
}

#[test]
fn the_dashboard_is_grafana_json_and_reads_only_metrics_rtrackd_exposes() {
    let text = std::fs::read_to_string(monitoring().join("rtrack-dashboard.json")).unwrap();
    let dash: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(dash["uid"], "rtrack-host");
    let panels = dash["panels"].as_array().unwrap();
    assert!(panels.len() >= 10);
    let docs =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/metrics.md"))
            .unwrap();
    let mut ids = std::collections::BTreeSet::new();
    for p in panels {
        assert!(ids.insert(p["id"].as_i64().unwrap()), "panel ids repeat");
        assert!(!p["title"].as_str().unwrap().is_empty());
        let targets = p["targets"].as_array().unwrap();
        assert!(!targets.is_empty(), "{} has no query", p["title"]);
        for t in targets {
            let expr = t["expr"].as_str().unwrap();
            assert!(
                expr.contains("$instance"),
                "{expr}: not limited to the chosen hosts"
            );
            for n in families(expr) {
                let documented = ["`", "_total`"].iter().any(|end| {
                    let name = n.strip_suffix("_total").unwrap_or(&n);
                    docs.contains(&format!("| `{name}{end} |"))
                });
                assert!(
                    documented,
                    "{expr} reads {n}, which rtrackd does not expose"
                );
            }
        }
    }
}

#[test]
fn every_metric_the_rules_read_is_one_rtrackd_exposes() {
    let rules = std::fs::read_to_string(monitoring().join("rtrack-alerts.yml")).unwrap();
    let docs =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/metrics.md"))
            .unwrap();
    let re = regex::Regex::new(r"rtrack_[a-z_]+").unwrap();
    let mut names: Vec<&str> = re.find_iter(&rules).map(|m| m.as_str()).collect();
    names.sort_unstable();
    names.dedup();
    assert!(names.len() >= 8, "{names:?}");
    for n in names {
        assert!(
            docs.contains(&format!("| `{n}` |")),
            "the rules read {n}, which rtrackd does not expose (docs/metrics.md)"
        );
    }
}
