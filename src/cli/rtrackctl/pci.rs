//! `rtrackctl pci`: the tracked devices, the release of one-time-use devices, and a port's
//! devices attached to or detached from a running instance.
//!
//! In: the subcommand's arguments. Out: the request to rtrackd's API (the attach body is an
//! InstancePCIRequests primitive, as Nova would send for the port) and a table or a line.

use clap::Subcommand;
use serde_json::{json, Value};

use super::body::{address_segment, instance_segment, path_segment};
use super::{pretty, usage, Ctx, Failure};

/// `rtrackctl pci` subcommands.
#[derive(Debug, Subcommand)]
pub enum PciCommand {
    /// Every tracked device: state, holder, one-time use, Placement provider.
    List {
        /// Only one-time-use devices (those reserved after use wait for `pci release`).
        #[arg(long)]
        one_time_use: bool,
    },
    /// Make a one-time-use device reserved after use available again (and unreserve its
    /// Placement provider), once it has been cleaned.
    Release {
        /// PCI address, e.g. 0000:3b:00.0.
        address: String,
    },
    /// Give a running instance a device for a port (Nova's interface attach).
    Attach {
        /// Instance uuid.
        instance: String,
        /// The Neutron port id (the request's requester_id).
        #[arg(long, value_name = "PORT_ID")]
        port: String,
        /// The port's physical network (a VF tagged with it in [pci] device_spec).
        #[arg(long, value_name = "NAME")]
        physical_network: String,
        /// The request id; default: derived from the instance and the port (so a retry is the
        /// same request).
        #[arg(long, value_name = "UUID")]
        request_id: Option<String>,
        /// The request's NUMA affinity policy.
        #[arg(long, value_name = "POLICY", value_parser = ["required", "legacy", "preferred", "socket"])]
        numa_policy: Option<String>,
        /// Extra spec keys, e.g. trusted=true or remote_managed=true (repeatable).
        #[arg(long = "spec", value_name = "KEY=VALUE")]
        spec: Vec<String>,
    },
    /// Free a port's devices (Nova's interface detach).
    Detach {
        /// Instance uuid.
        instance: String,
        /// The port's request id.
        request_id: String,
    },
}

/// Runs one `rtrackctl pci` command.
pub(super) fn run(ctx: &Ctx<'_>, command: &PciCommand) -> Result<String, Failure> {
    let cli = ctx.cli;
    let json_out = |v: &Value| Ok(pretty(v) + "\n");
    match command {
        PciCommand::List { one_time_use } => {
            let v = ctx.call("GET", "/v1/pci-devices", None)?;
            if cli.json {
                return json_out(&v);
            }
            Ok(devices_table(&v, *one_time_use))
        }
        PciCommand::Release { address } => {
            let v = ctx.call(
                "POST",
                &format!("/v1/pci-devices/{}/release", address_segment(address)?),
                None,
            )?;
            if cli.json {
                return json_out(&v);
            }
            Ok(format!("{address}: released, available again\n"))
        }
        PciCommand::Attach {
            instance,
            port,
            physical_network,
            request_id,
            numa_policy,
            spec,
        } => {
            let body = attach_body(
                instance,
                port,
                physical_network,
                request_id.as_deref(),
                numa_policy.as_deref(),
                spec,
            )?;
            let v = ctx.call(
                "POST",
                &format!("/v1/instances/{}/pci-requests", instance_segment(instance)?),
                Some(&body),
            )?;
            if cli.json {
                return json_out(&v);
            }
            let devices: Vec<String> = v["pci_devices"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .map(|d| {
                            format!(
                                "{} (request {})",
                                d["address"].as_str().unwrap_or("?"),
                                d["request_id"].as_str().unwrap_or("?")
                            )
                        })
                        .collect()
                })
                .unwrap_or_default();
            let verb = if v["existing"].as_bool() == Some(true) {
                "already attached"
            } else {
                "attached"
            };
            Ok(format!("{instance}: {verb} {}\n", devices.join(", ")))
        }
        PciCommand::Detach {
            instance,
            request_id,
        } => {
            let v = ctx.call(
                "DELETE",
                &format!(
                    "/v1/instances/{}/pci-requests/{}",
                    instance_segment(instance)?,
                    path_segment(request_id)?
                ),
                None,
            )?;
            if cli.json {
                return json_out(&v);
            }
            Ok(format!("{instance}: detached request {request_id}\n"))
        }
    }
}

/// The request id `pci attach` gives when none is named.
pub fn default_request_id(instance: &str, port: &str) -> String {
    uuid::Uuid::new_v5(
        &uuid::Uuid::NAMESPACE_OID,
        format!("rtrack.port.{instance}.{port}").as_bytes(),
    )
    .hyphenated()
    .to_string()
}

/// The attach body: an InstancePCIRequests primitive with the port's one request.
pub fn attach_body(
    instance: &str,
    port: &str,
    physical_network: &str,
    request_id: Option<&str>,
    numa_policy: Option<&str>,
    extra: &[String],
) -> Result<Value, Failure> {
    let mut spec = serde_json::Map::new();
    spec.insert("physical_network".into(), physical_network.into());
    for kv in extra {
        let (k, v) = kv
            .split_once('=')
            .ok_or_else(|| usage(format!("--spec {kv:?}: expected KEY=VALUE")))?;
        spec.insert(k.trim().into(), v.trim().into());
    }
    let request_id = request_id
        .map(str::to_string)
        .unwrap_or_else(|| default_request_id(instance, port));
    let mut data = json!({
        "count": 1, "spec": [spec], "alias_name": null, "is_new": false,
        "request_id": request_id, "requester_id": port,
    });
    if let Some(p) = numa_policy {
        data["numa_policy"] = p.into();
    }
    Ok(json!({
        "pci_requests": {
            "nova_object.name": "InstancePCIRequests", "nova_object.namespace": "nova",
            "nova_object.version": "1.1",
            "nova_object.data": {"instance_uuid": instance, "requests": [{
                "nova_object.name": "InstancePCIRequest", "nova_object.namespace": "nova",
                "nova_object.version": "1.4", "nova_object.data": data}]},
        }
    }))
}

/// The device table.
pub fn devices_table(v: &Value, one_time_use_only: bool) -> String {
    let rows: Vec<&Value> = v["pci_devices"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or(&[])
        .iter()
        .filter(|d| !one_time_use_only || d["one_time_use"].as_bool() == Some(true))
        .collect();
    if rows.is_empty() {
        return if one_time_use_only {
            "no one-time-use devices\n".into()
        } else {
            "no tracked PCI devices\n".into()
        };
    }
    let s = |d: &Value, k: &str| d[k].as_str().unwrap_or("-").to_string();
    let mut out = format!(
        "{:<13} {:<8} {:<10} {:>4}  {:<11} {:<36}  {}\n",
        "ADDRESS", "TYPE", "VENDOR:DEV", "NUMA", "STATUS", "INSTANCE", "FLAGS"
    );
    for d in rows {
        let mut flags = Vec::new();
        if d["one_time_use"].as_bool() == Some(true) {
            flags.push("one-time-use".to_string());
        }
        if let Some(p) = d["resource_provider_uuid"].as_str() {
            flags.push(format!("provider {p}"));
        }
        out.push_str(&format!(
            "{:<13} {:<8} {:<10} {:>4}  {:<11} {:<36}  {}\n",
            s(d, "address"),
            s(d, "dev_type").trim_start_matches("type-"),
            format!("{}:{}", s(d, "vendor_id"), s(d, "product_id")),
            d["numa_node"]
                .as_u64()
                .map_or("-".to_string(), |n| n.to_string()),
            s(d, "status"),
            s(d, "instance_uuid"),
            flags.join(", ")
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::objects::pci_request::InstancePCIRequests;
    use crate::objects::Versioned;

    #[test]
    fn the_attach_body_is_a_valid_primitive_with_a_stable_request_id() {
        let u = "00000000-0000-4000-8000-000000000001";
        let b = attach_body(
            u,
            "port-1",
            "physnet1",
            None,
            Some("required"),
            &["trusted=true".into()],
        )
        .unwrap();
        let r = Versioned::<InstancePCIRequests>::from_primitive(&b["pci_requests"]).unwrap();
        let req = &r.obj.requests.get().unwrap()[0].obj;
        assert_eq!(req.requester_id.get().map(String::as_str), Some("port-1"));
        assert_eq!(
            req.request_id.get().map(String::as_str),
            Some(default_request_id(u, "port-1").as_str())
        );
        let spec = &req.spec.get().unwrap()[0];
        assert_eq!(spec["trusted"].as_deref(), Some("true"));
        assert!(attach_body(u, "p", "n", None, None, &["bad".into()]).is_err());
    }

    #[test]
    fn the_table_filters_one_time_use_devices() {
        let v = json!({"pci_devices": [
            {"address": "0000:01:00.0", "dev_type": "type-PCI", "vendor_id": "144d", "product_id": "a808", "numa_node": 0, "status": "reserved", "one_time_use": true, "instance_uuid": null},
            {"address": "0000:3b:00.0", "dev_type": "type-PF", "vendor_id": "8086", "product_id": "1592", "numa_node": 0, "status": "available", "one_time_use": false},
        ]});
        let all = devices_table(&v, false);
        assert!(all.contains("0000:3b:00.0") && all.contains("reserved"));
        let otu = devices_table(&v, true);
        assert!(
            otu.contains("0000:01:00.0") && !otu.contains("0000:3b:00.0"),
            "{otu}"
        );
    }
}
