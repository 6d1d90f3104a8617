//! Finding the compute node provider nova-compute left in Placement, so that rtrack takes the
//! host over under the same uuid instead of registering a second compute node (which
//! Placement would refuse for its name anyway, and which would leave the first one's
//! allocations stranded).
//!
//! In: the name nova-compute registers a compute node provider under: its
//! `hypervisor_hostname`, exactly (never the service host name: a short name may be another
//! machine's provider). Out: the uuid of the root provider of that name, `None` when there is
//! none, or an error when the provider of that name is not a root.

use uuid::Uuid;

use super::api::PlacementApi;
use super::UpstreamError;

/// A root provider found by name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FoundRoot {
    /// Its uuid: the compute node uuid nova-compute used.
    pub uuid: Uuid,
    /// The name it was found by.
    pub name: String,
}

/// Looks the name up (`GET /resource_providers?name=...`, once).
pub async fn find_root<P: PlacementApi>(
    api: &mut P,
    name: &str,
) -> Result<Option<FoundRoot>, UpstreamError> {
    api.negotiate().await?;
    if name.is_empty() {
        return Ok(None);
    }
    let Some(p) = api.provider_by_name(name).await? else {
        return Ok(None);
    };
    if let Some(parent) = p.parent_provider_uuid {
        return Err(UpstreamError::Input(format!(
            "the provider named {name:?} in Placement ({}) is not a compute node: its parent is {parent}; set [host] hypervisor_hostname to the compute node's name, or [host] compute_node_uuid",
            p.uuid
        )));
    }
    Ok(Some(FoundRoot {
        uuid: p.uuid,
        name: name.to_string(),
    }))
}
