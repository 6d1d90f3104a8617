//! `as_placed`: a claim for a guest that already runs here, counted where it is (docs/api.md).

use super::*;

/// Where a guest that already runs here is.
#[derive(Debug, Clone, Default, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PlacedBody {
    /// Its PCI devices, with the request each serves (each request given exactly as many as
    /// it asks for).
    #[serde(default)]
    #[schema(max_items = 1024)]
    pub devices: Vec<PlacedDeviceBody>,
}

/// A PCI device a placed guest has.
#[derive(Debug, Clone, Default, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PlacedDeviceBody {
    /// The InstancePCIRequest it serves.
    pub request_id: String,
    /// Its PCI address (`dddd:bb:ss.f`).
    #[schema(schema_with = pci_address_schema)]
    pub address: String,
}

/// A PCI address as the parser takes it ([`crate::probes::pci::PciAddress::PATTERN`]).
fn pci_address_schema() -> utoipa::openapi::schema::Object {
    use utoipa::openapi::schema::{ObjectBuilder, Type};
    ObjectBuilder::new()
        .schema_type(Type::String)
        .pattern(Some(crate::probes::pci::PciAddress::PATTERN))
        .build()
}

/// Most devices one placed guest may name.
const MAX_PLACED_DEVICES: usize = 1024;

impl ClaimBody {
    /// `as_placed` into `info`.
    pub(super) fn parse_placed(
        &self,
        info: &mut InstanceInfo,
        numa_guest: bool,
    ) -> Result<(), ApiError> {
        let Some(placed) = &self.as_placed else {
            return Ok(());
        };
        info.placed_numa = instance_topology(self.instance.as_ref())?;
        if numa_guest && info.placed_numa.is_none() {
            // Schema-valid, but nothing says where the guest runs: not claimable as placed.
            return Err(ApiError::new(
                ErrorCode::Conflict,
                "as_placed: the guest has a NUMA topology and instance.numa_topology does not say where it runs",
            )
            .with_details(serde_json::json!({"field": "instance.numa_topology"})));
        }
        if placed.devices.len() > MAX_PLACED_DEVICES {
            return Err(ApiError::invalid(
                "as_placed.devices",
                format!(
                    "{} entries, at most {MAX_PLACED_DEVICES}",
                    placed.devices.len()
                ),
            ));
        }
        for (i, d) in placed.devices.iter().enumerate() {
            let address = crate::probes::pci::PciAddress::parse(&d.address).ok_or_else(|| {
                ApiError::invalid(
                    &format!("as_placed.devices[{i}].address"),
                    format!("{} is not a PCI address", quoted(&d.address)),
                )
            })?;
            info.placed_devices
                .entry(bounded(&d.request_id).to_string())
                .or_default()
                .push(address);
        }
        Ok(())
    }
}

/// The instance's `numa_topology` (an InstanceNUMATopology primitive), as a placement.
pub(super) fn instance_topology(
    instance: Option<&InstanceBody>,
) -> Result<Option<crate::tracker::numa::FittedTopology>, ApiError> {
    match instance.and_then(|i| i.numa_topology.as_ref()) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => {
            check_spec_strings(v, "instance.numa_topology")?;
            let t = Versioned::<InstanceNUMATopology>::from_primitive(v).map_err(|e| {
                ApiError::invalid(
                    "instance.numa_topology",
                    format!("{}: {}", bounded(&e.path), bounded_message(&e.message)),
                )
            })?;
            Ok(Some(
                fitted_from_object(&t.obj, "instance.numa_topology").map_err(ApiError::from)?,
            ))
        }
    }
}
