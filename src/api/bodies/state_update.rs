//! The body of an instance's state update, the tracker's [`InstanceUpdate`] as the API reads and
//! describes it.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::nova_enums;
use crate::tracker::InstanceUpdate;

/// The body of `POST /v1/instances/{uuid}/state`: the tracker's [`InstanceUpdate`], as the API
/// reads and describes it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = InstanceUpdate)]
pub struct InstanceUpdateBody {
    /// New VM state.
    #[schema(schema_with = nova_enums::vm_state_schema)]
    pub vm_state: Option<String>,
    /// New task state (`""` clears it).
    #[schema(schema_with = nova_enums::task_state_or_none_schema)]
    pub task_state: Option<String>,
    /// New host (e.g. the destination after finish_resize).
    #[schema(max_length = 255)]
    pub host: Option<String>,
    /// New node.
    #[schema(max_length = 255)]
    pub node: Option<String>,
    /// Switch the instance to its new flavor (finish_resize).
    #[serde(default)]
    pub apply_new_flavor: bool,
}

impl From<InstanceUpdateBody> for InstanceUpdate {
    fn from(b: InstanceUpdateBody) -> InstanceUpdate {
        InstanceUpdate {
            vm_state: b.vm_state,
            task_state: b.task_state,
            host: b.host,
            node: b.node,
            apply_new_flavor: b.apply_new_flavor,
        }
    }
}

impl crate::api::extract::JsonBody for InstanceUpdateBody {
    const WHAT: &'static str = "an instance state update";
}
