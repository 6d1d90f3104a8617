//! Finding the compute node provider nova-compute left in Placement, so that rtrack takes the
//! host over under the same uuid instead of registering a second compute node (which
//! Placement would refuse for its name anyway, and which would leave the first one's
//! allocations stranded).
//!
//! In: the names the compute node may have been registered under (rtrack's
//! `hypervisor_hostname` first, then the service host name). Out: the uuid of the one root
//! provider with one of those names, `None` when there is none, or an error when the answer is
//! ambiguous (two providers, or a provider that is not a root).

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

/// Looks the names up (`GET /resource_providers?name=...`, each once).
pub async fn find_root<P: PlacementApi>(
    api: &mut P,
    names: &[&str],
) -> Result<Option<FoundRoot>, UpstreamError> {
    api.negotiate().await?;
    let mut found: Vec<(String, super::api::ProviderInfo)> = Vec::new();
    for name in names {
        if name.is_empty() || found.iter().any(|(n, _)| n == name) {
            continue;
        }
        if let Some(p) = api.provider_by_name(name).await? {
            found.push((name.to_string(), p));
        }
    }
    if let Some((name, p)) = found.iter().find(|(_, p)| p.parent_provider_uuid.is_some()) {
        return Err(UpstreamError::Input(format!(
            "the provider named {name:?} in Placement ({}) is not a compute node: its parent is {}; set [host] hypervisor_hostname to the compute node's name, or [host] compute_node_uuid",
            p.uuid,
            p.parent_provider_uuid.unwrap_or_default()
        )));
    }
    match found.as_slice() {
        [] => Ok(None),
        [(name, p)] => Ok(Some(FoundRoot {
            uuid: p.uuid,
            name: name.clone(),
        })),
        [(a, pa), (b, pb), ..] => Err(UpstreamError::Input(format!(
            "two compute node providers could be this host's: {a:?} ({}) and {b:?} ({}); set [host] compute_node_uuid to the one to take over",
            pa.uuid, pb.uuid
        ))),
    }
}
