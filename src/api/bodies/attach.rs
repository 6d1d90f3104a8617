//! The body of `POST /v1/instances/{uuid}/pci-requests`: a port's PCI requests.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::api::extract::JsonBody;

/// `POST /v1/instances/{uuid}/pci-requests`: the port's requests.
#[derive(Debug, Clone, Default, Deserialize, Serialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = AttachRequest)]
pub struct AttachBody {
    /// An InstancePCIRequests primitive (nova_object.name = InstancePCIRequests) holding the
    /// port's requests: `requester_id` set, no `alias_name`, Nova's `request_id`.
    #[schema(value_type = Object)]
    pub pci_requests: Value,
}

impl JsonBody for AttachBody {
    const WHAT: &'static str = "an attach request";
}
