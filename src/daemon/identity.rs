//! The compute node's identity at the first start of a state directory: the configured uuid,
//! else the uuid of the compute node provider nova-compute left in Placement under this host's
//! `hypervisor_hostname` (a host taken over keeps its provider, its allocations and its PCI and vGPU children),
//! else a new one. Once chosen it is kept in `<state_dir>/compute_id` and never changed.
//!
//! In: the state directory, the configuration (`[host] compute_node_uuid`, `[placement]`) and
//! the host's names. Out: the [`NodeId`] and how it was chosen; an error when the stored and
//! configured uuids differ, when Placement's answer is ambiguous, or when Placement cannot be
//! asked (without Placement's answer a second compute node could be registered for this host).

use std::path::Path;
use std::time::{Duration, Instant};

use super::error::DaemonError;
use crate::config::ValidConfig;
use crate::store::node_id::{self, NodeId};
use crate::tracker::model::HostNames;
use crate::upstream::identity::find_root;
use crate::upstream::HttpPlacement;

/// How the uuid was chosen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Chosen {
    /// It was in the state directory.
    Stored,
    /// `[host] compute_node_uuid`.
    Configured,
    /// The compute node provider of this name in Placement.
    Adopted {
        /// The name it was found by.
        name: String,
    },
    /// A new one: Placement has no provider of this host's names, or is not configured.
    New,
}

/// The identity, chosen and stored at the first start. Placement may take three request
/// timeouts (`[placement] timeout_s`) to answer the look-up (tries 1 s, 2 s, 4 s... apart).
pub async fn resolve(
    state_dir: &Path,
    cfg: &ValidConfig,
    names: &HostNames,
) -> Result<(NodeId, Chosen), DaemonError> {
    if let Some(id) = node_id::load(state_dir)? {
        if let Some(c) = &cfg.host.compute_node_uuid {
            if *c != id.uuid {
                return Err(DaemonError::Refused(format!(
                    "{}: the state directory belongs to compute node {}, but [host] compute_node_uuid is {c}; a compute node's uuid never changes: remove the key, or use another state directory",
                    state_dir.join("compute_id").display(),
                    id.uuid
                )));
            }
        }
        return Ok((id, Chosen::Stored));
    }
    if let Some(c) = &cfg.host.compute_node_uuid {
        return Ok((node_id::create(state_dir, c)?, Chosen::Configured));
    }
    let Some(settings) = &cfg.placement_settings else {
        let id = node_id::load_or_create(state_dir)?;
        return Ok((id, Chosen::New));
    };
    let patience = settings.timeout * 3;
    let mut api = HttpPlacement::new(settings)?;
    // nova-compute names its provider after hypervisor_hostname only; the service host name
    // may be a short name another machine's provider has.
    let name = names.node.as_str();
    let start = Instant::now();
    let mut wait = Duration::from_secs(1);
    let found = loop {
        match find_root(&mut api, name).await {
            Ok(f) => break f,
            Err(e) if e.is_outage() && start.elapsed() + wait < patience => {
                tracing::warn!(target: "rtrack::upstream", error = %e, retry_in_s = wait.as_secs(), "cannot ask Placement whether this host is registered already; trying again");
                tokio::time::sleep(wait).await;
                wait *= 2;
            }
            Err(e) if e.is_outage() => return Err(DaemonError::Refused(format!(
                "the first start of {} must ask Placement whether nova-compute registered this host already (so as not to register it twice), and Placement did not answer within {} s: {e}; start again once it answers, or set [host] compute_node_uuid",
                state_dir.display(),
                patience.as_secs()
            ))),
            Err(e) => {
                return Err(DaemonError::Refused(format!("compute node identity: {e}")))
            }
        }
    };
    match found {
        Some(root) => {
            let id = node_id::create(state_dir, &root.uuid.hyphenated().to_string())?;
            Ok((id, Chosen::Adopted { name: root.name }))
        }
        None => Ok((node_id::load_or_create(state_dir)?, Chosen::New)),
    }
}
