//! `rtrackctl reconcile` and `rtrackctl adopt`: the local claims against Placement, and the take
//! over of a host nova-compute managed.
//!
//! In: the flags (and, for adopt, the operator's device map file). Out: the request to rtrackd
//! and a table: the drift (what is fixed, what is not touched and why), or the adoption plan.
//! Exit 3 when drift remains, or when `--apply` was refused for the problems listed.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde_json::{json, Value};

use super::{client, failure, pretty, usage, Ctx, Failure, EXIT_REFUSED};

/// `rtrackctl reconcile`.
#[derive(Debug, clap::Args)]
pub struct ReconcileArgs {
    /// Write what rtrack owns (its inventories; with [placement] report_allocations, the
    /// allocations), then read Placement again.
    #[arg(long)]
    pub fix: bool,
    /// Remove this host's part of the allocation of a consumer that holds no claim here (its
    /// other parts stay); refused while it was seen unclaimed for less than [placement]
    /// unclaimed_grace_s (its build may be on its way). Repeatable.
    #[arg(long, value_name = "UUID")]
    pub remove_unclaimed: Vec<uuid::Uuid>,
}

/// `rtrackctl adopt`.
#[derive(Debug, clap::Args)]
pub struct AdoptArgs {
    /// Commit the plan in one transaction (default: print it only).
    #[arg(long)]
    pub apply: bool,
    /// Which devices each instance has: JSON `{"<instance uuid>": ["0000:3b:02.1", ...]}`, or
    /// one line per instance: `<instance uuid> <address> [<address>...]` ("-": stdin).
    #[arg(long, value_name = "FILE")]
    pub devices: Option<PathBuf>,
    /// Adopt consumers Placement gives no type as instances (Placement before 1.38, or
    /// allocations of an older Nova): check first that no move is in progress.
    #[arg(long)]
    pub assume_instances: bool,
}

fn amounts(v: &Value) -> String {
    let mut parts = Vec::new();
    for (rp, classes) in v.as_object().into_iter().flatten() {
        let short = rp.get(..8).unwrap_or(rp);
        for (class, n) in classes.as_object().into_iter().flatten() {
            parts.push(format!("{class}={n}@{short}"));
        }
    }
    if parts.is_empty() {
        "-".into()
    } else {
        parts.join(" ")
    }
}

fn drift_lines(d: &Value, out: &mut String) {
    for c in d["consumers"].as_array().into_iter().flatten() {
        out.push_str(&format!(
            "  {:<10} {}  local: {}  placement: {}\n",
            c["kind"].as_str().unwrap_or("?"),
            c["consumer"].as_str().unwrap_or("?"),
            amounts(&c["local"]),
            amounts(&c["placement"])
        ));
    }
    for i in d["inventories"].as_array().into_iter().flatten() {
        out.push_str(&format!(
            "  inventory  {} {}: Placement {}, host {}, used {}\n",
            i["provider_name"].as_str().unwrap_or("?"),
            i["class"].as_str().unwrap_or("?"),
            i["placement_total"],
            i["host_total"],
            i["used"]
        ));
    }
}

fn is_empty(d: &Value) -> bool {
    d["consumers"].as_array().is_none_or(|a| a.is_empty())
        && d["inventories"].as_array().is_none_or(|a| a.is_empty())
}

/// Runs `rtrackctl reconcile`.
pub(super) fn reconcile(ctx: &Ctx<'_>, a: &ReconcileArgs) -> Result<String, Failure> {
    let body = json!({"fix": a.fix, "remove_unclaimed": a.remove_unclaimed});
    let v = ctx.call("POST", "/v1/reconcile", Some(&body))?;
    let drift = &v["drift"];
    let refused = v["refused"].as_array().is_some_and(|r| !r.is_empty());
    let text = if ctx.cli.json {
        pretty(&v) + "\n"
    } else {
        let mut out = String::new();
        for c in v["removed"].as_array().into_iter().flatten() {
            out.push_str(&format!(
                "removed this host's part of {}\n",
                c.as_str().unwrap_or("?")
            ));
        }
        for r in v["refused"].as_array().into_iter().flatten() {
            out.push_str(&format!(
                "not removed: {}: {}\n",
                r["consumer"].as_str().unwrap_or("?"),
                r["why"].as_str().unwrap_or("?")
            ));
        }
        if a.fix {
            let found = &v["found"];
            if is_empty(found) {
                out.push_str("found no drift\n");
            } else {
                out.push_str("found:\n");
                drift_lines(found, &mut out);
            }
        }
        if is_empty(drift) {
            out.push_str(if a.fix {
                "nothing left: the local claims, Placement and the host agree\n"
            } else {
                "no drift: the local claims, Placement and the host agree\n"
            });
        } else {
            out.push_str(if a.fix { "left:\n" } else { "drift:\n" });
            drift_lines(drift, &mut out);
            for n in v["not_touched"].as_array().into_iter().flatten() {
                out.push_str(&format!(
                    "  not touched: {}: {}\n",
                    n["consumer"]
                        .as_str()
                        .or_else(|| n["class"].as_str())
                        .unwrap_or("?"),
                    n["why"].as_str().unwrap_or("?")
                ));
            }
        }
        out
    };
    if is_empty(drift) && !refused {
        Ok(text)
    } else {
        print!("{text}");
        Err(Failure {
            code: EXIT_REFUSED,
            message: String::new(),
        })
    }
}

/// The operator's device map: JSON, or `<uuid> <address>...` lines.
fn device_map(path: &PathBuf) -> Result<BTreeMap<String, Vec<String>>, Failure> {
    let text = if path.as_os_str() == "-" {
        std::io::read_to_string(std::io::stdin()).map_err(|e| usage(format!("--devices -: {e}")))?
    } else {
        std::fs::read_to_string(path)
            .map_err(|e| usage(format!("--devices {}: {e}", path.display())))?
    };
    if text.trim_start().starts_with('{') {
        return serde_json::from_str(&text).map_err(|e| {
            usage(format!(
                "--devices {}: expected {{\"<instance uuid>\": [\"<PCI address>\", ...]}}: {e}",
                path.display()
            ))
        });
    }
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let mut words = line.split_whitespace();
        let (Some(instance), addresses) = (words.next(), words) else {
            continue;
        };
        let list: Vec<String> = addresses.map(str::to_string).collect();
        if list.is_empty() {
            return Err(usage(format!(
                "--devices {} line {}: expected '<instance uuid> <PCI address> ...'",
                path.display(),
                n + 1
            )));
        }
        out.entry(instance.to_string()).or_default().extend(list);
    }
    Ok(out)
}

fn plan_text(v: &Value) -> String {
    let mut out = String::new();
    let applied = v["applied"].as_bool().unwrap_or(false);
    let claims = v["claims"].as_array().cloned().unwrap_or_default();
    out.push_str(&format!(
        "{} {} claim(s):\n",
        if applied { "made" } else { "would make" },
        claims.len()
    ));
    for c in &claims {
        let res: Vec<String> = c["resources"]
            .as_object()
            .into_iter()
            .flatten()
            .map(|(k, n)| format!("{k}={n}"))
            .collect();
        let devs: Vec<&str> = c["pci_devices"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|d| d["address"].as_str())
            .collect();
        let mdevs: Vec<&str> = c["mdevs"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|m| m["uuid"].as_str())
            .collect();
        out.push_str(&format!(
            "  {}  {}{}{}\n",
            c["instance_uuid"].as_str().unwrap_or("?"),
            res.join(" "),
            if devs.is_empty() {
                String::new()
            } else {
                format!("  devices {}", devs.join(","))
            },
            if mdevs.is_empty() {
                String::new()
            } else {
                format!("  mdevs {}", mdevs.join(","))
            }
        ));
    }
    for e in v["existing"].as_array().into_iter().flatten() {
        out.push_str(&format!(
            "  {}  held here already: unchanged\n",
            e.as_str().unwrap_or("?")
        ));
    }
    for n in v["notes"].as_array().into_iter().flatten() {
        out.push_str(&format!(
            "  note {}: {}\n",
            n["consumer"].as_str().unwrap_or("?"),
            n["note"].as_str().unwrap_or("?")
        ));
    }
    let problems = v["problems"].as_array().cloned().unwrap_or_default();
    for p in &problems {
        out.push_str(&format!(
            "  cannot adopt {}: {}\n",
            p["consumer"].as_str().unwrap_or("?"),
            p["reason"].as_str().unwrap_or("?")
        ));
    }
    if !applied && problems.is_empty() && !claims.is_empty() {
        out.push_str("dry run: nothing changed (--apply commits it)\n");
    }
    out
}

/// Runs `rtrackctl adopt`.
pub(super) fn adopt(ctx: &Ctx<'_>, a: &AdoptArgs) -> Result<String, Failure> {
    let devices = match &a.devices {
        Some(p) => device_map(p)?,
        None => BTreeMap::new(),
    };
    let devices: Vec<serde_json::Value> = devices
        .into_iter()
        .map(|(instance, addresses)| json!({"instance_uuid": instance, "addresses": addresses}))
        .collect();
    let body =
        json!({"apply": a.apply, "devices": devices, "assume_instances": a.assume_instances});
    let bytes = body.to_string().into_bytes();
    let r = client::request(&ctx.socket, "POST", "/v1/adopt", Some(&bytes), ctx.timeout)
        .map_err(|e| failure(e.to_string()))?;
    // A refused --apply carries the plan: show it, then fail.
    if r.status == 409 {
        if let Some(v) = r.json().filter(|v| v["error"]["details"].is_object()) {
            if ctx.cli.json {
                println!("{}", pretty(&v));
            } else {
                print!("{}", plan_text(&v["error"]["details"]));
            }
            return Err(Failure {
                code: EXIT_REFUSED,
                message: v["error"]["message"].as_str().unwrap_or("").to_string(),
            });
        }
    }
    let v = ctx.answer(r)?;
    if ctx.cli.json {
        return Ok(pretty(&v) + "\n");
    }
    let text = plan_text(&v);
    if !v["problems"].as_array().is_none_or(|p| p.is_empty()) {
        print!("{text}");
        return Err(Failure {
            code: EXIT_REFUSED,
            message: String::new(),
        });
    }
    Ok(text)
}
