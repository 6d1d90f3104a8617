//! The `rtrackctl` commands whose answers take more than a line of code to print: the
//! inventory, claims and moves, instance states and health.

use serde_json::Value;

use super::body::instance_segment;
use super::tables::*;
use super::{
    claim_body, failure, json_out, usage, ClaimArgs, Ctx, Failure, MigrateArgs, StateArgs,
};

/// `inventory`: the host as rtrackd sees it, as a table.
pub(super) fn inventory(ctx: &Ctx) -> Result<String, Failure> {
    let v = ctx.call("GET", "/v1/inventory", None)?;
    if ctx.cli.json {
        return json_out(&v);
    }
    // HostInventory is read from the whole document (extra keys are ignored): serde's
    // `flatten` cannot read the numeric map keys (NUMA distances) back.
    let inventory: crate::probes::HostInventory =
        serde_json::from_value(v.clone()).map_err(|e| {
            failure(format!(
                "rtrackd's inventory is not in the expected form: {e}"
            ))
        })?;
    let report = crate::inventory::InventoryReport {
        rtrack_version: v["rtrack_version"].as_str().unwrap_or("?").to_string(),
        probed_at: v["probed_at"].as_str().unwrap_or("?").to_string(),
        inventory,
        offered: v
            .get("offered")
            .and_then(|o| serde_json::from_value(o.clone()).ok()),
        dedicated_cpus: serde_json::from_value(v["dedicated_cpus"].clone()).unwrap_or(None),
        compute_node: v.get("compute_node").cloned(),
    };
    Ok(crate::inventory::table::render(&report))
}

/// `claim`: an instance claim (or a dry run).
pub(super) fn claim(ctx: &Ctx, a: &ClaimArgs) -> Result<String, Failure> {
    let body = claim_body(&a.request)?;
    let target = if a.dry_run {
        "/v1/claims?dry_run=true"
    } else {
        "/v1/claims"
    };
    let v = ctx.call("POST", target, Some(&body))?;
    if ctx.cli.json {
        return json_out(&v);
    }
    if a.dry_run {
        return Ok(format!("fits: {}\n", claim_line(&v["claim"])));
    }
    let verb = if v["existing"].as_bool() == Some(true) {
        "already claimed"
    } else {
        "claimed"
    };
    Ok(format!("{verb}: {}\n", claim_line(&v)))
}

/// `migrate`: a move claim (or a dry run).
pub(super) fn migrate(ctx: &Ctx, a: &MigrateArgs) -> Result<String, Failure> {
    let mut body = claim_body(&a.request)?;
    if let Some(obj) = body.as_object_mut() {
        let mut set = |k: &str, v: Option<Value>| {
            if let Some(v) = v {
                obj.insert(k.to_string(), v);
            }
        };
        set("move_type", a.move_type.clone().map(Value::from));
        set("migration_id", a.migration_id.map(Value::from));
        set("source_compute", a.source_host.clone().map(Value::from));
        set("source_node", a.source_node.clone().map(Value::from));
        set("dest_compute", a.dest_host.clone().map(Value::from));
        set("dest_node", a.dest_node.clone().map(Value::from));
    }
    let target = if a.dry_run {
        "/v1/migrations?dry_run=true"
    } else {
        "/v1/migrations"
    };
    let v = ctx.call("POST", target, Some(&body))?;
    if ctx.cli.json {
        return json_out(&v);
    }
    let m = &v["migration"];
    let prefix = if a.dry_run { "fits" } else { "migration" };
    Ok(format!(
        "{prefix} {} ({}, {}): {}\n",
        m["id"],
        m["migration_type"].as_str().unwrap_or("?"),
        m["status"].as_str().unwrap_or("?"),
        claim_line(&v["claim"])
    ))
}

/// `state`: Nova's state changes of an instance.
pub(super) fn state(ctx: &Ctx, a: &StateArgs) -> Result<String, Failure> {
    let mut body = serde_json::Map::new();
    for (k, v) in [
        ("vm_state", &a.vm_state),
        ("task_state", &a.task_state),
        ("host", &a.host),
        ("node", &a.node),
    ] {
        if let Some(v) = v {
            body.insert(k.into(), v.clone().into());
        }
    }
    if a.apply_new_flavor {
        body.insert("apply_new_flavor".into(), true.into());
    }
    if body.is_empty() {
        return Err(usage("state: nothing to change; give --vm-state, --task-state, --host, --node or --apply-new-flavor"));
    }
    let v = ctx.call(
        "POST",
        &format!("/v1/instances/{}/state", instance_segment(&a.instance)?),
        Some(&Value::Object(body)),
    )?;
    if ctx.cli.json {
        return json_out(&v);
    }
    let i = &v["instance"];
    Ok(format!(
        "{}: vm_state {}, task_state {}, host {}\n",
        a.instance,
        i["vm_state"].as_str().unwrap_or("?"),
        i["task_state"].as_str().unwrap_or("-"),
        i["host"].as_str().unwrap_or("-")
    ))
}

/// `health`: rtrackd's `/healthz` in one line.
pub(super) fn health(ctx: &Ctx) -> Result<String, Failure> {
    let v = ctx.call("GET", "/healthz", None)?;
    if ctx.cli.json {
        return json_out(&v);
    }
    let drift = v["placement_drift"]
        .as_object()
        .map(|d| {
            let kinds: Vec<String> = d
                .iter()
                .filter(|(k, n)| *k != "at" && n.as_u64().is_some_and(|n| n > 0))
                .map(|(k, n)| format!("{n} {k}"))
                .collect();
            if kinds.is_empty() {
                "; Placement in step".to_string()
            } else {
                format!("; drift with Placement: {}", kinds.join(", "))
            }
        })
        .unwrap_or_default();
    Ok(format!(
        "{} (rtrackd {}; {} audits, last at {}{}{drift})\n",
        v["status"].as_str().unwrap_or("?"),
        v["version"].as_str().unwrap_or("?"),
        v["audits_succeeded"],
        v["last_audit_at"].as_str().unwrap_or("never"),
        v["last_audit_error"]
            .as_str()
            .map(|e| format!("; last error: {e}"))
            .unwrap_or_default()
    ))
}
