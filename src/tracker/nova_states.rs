//! Nova's instance states (`nova/objects/fields.py`: `InstanceState`, `InstanceTaskState`) and
//! which of them the usage rules count. An instance's states come from outside (the API), so
//! they are checked against these lists before anything is recorded: a string Nova does not
//! know would otherwise make a grant that no usage rule counts.
//!
//! In: an instance's `vm_state` and `task_state` strings, with the field each came in. Out: `Ok`,
//! or a [`ClaimError`] naming the field and listing Nova's values; and whether the states count (in
//! a resize, live-migrating, releasing resources, a move counted).

use super::error::ClaimError;
use crate::echo::quoted;

/// Nova's `vm_state` values.
pub const VM_STATES: &[&str] = &[
    "active",
    "building",
    "paused",
    "suspended",
    "stopped",
    "rescued",
    "resized",
    "soft-delete",
    "deleted",
    "error",
    "shelved",
    "shelved_offloaded",
];

/// Nova's `task_state` values.
pub const TASK_STATES: &[&str] = &[
    "scheduling",
    "block_device_mapping",
    "networking",
    "spawning",
    "image_snapshot",
    "image_snapshot_pending",
    "image_pending_upload",
    "image_uploading",
    "image_backup",
    "updating_password",
    "resize_prep",
    "resize_migrating",
    "resize_migrated",
    "resize_finish",
    "resize_reverting",
    "resize_confirming",
    "rebooting",
    "reboot_pending",
    "reboot_started",
    "rebooting_hard",
    "reboot_pending_hard",
    "reboot_started_hard",
    "pausing",
    "unpausing",
    "suspending",
    "resuming",
    "powering-off",
    "powering-on",
    "rescuing",
    "unrescuing",
    "rebuilding",
    "rebuild_block_device_mapping",
    "rebuild_spawning",
    "migrating",
    "deleting",
    "soft-deleting",
    "restoring",
    "shelving",
    "shelving_image_pending_upload",
    "shelving_image_uploading",
    "shelving_offloading",
    "unshelving",
];

/// Task states of a resize or rebuild (Nova's `_instance_in_resize_state`).
const RESIZING: &[&str] = &[
    "resize_prep",
    "resize_migrating",
    "resize_migrated",
    "resize_finish",
    "rebuilding",
    "rebuild_block_device_mapping",
    "rebuild_spawning",
];

/// Checks `vm_state` (field `vm_field`) against Nova's list.
pub fn check_vm_state(value: &str, vm_field: &str) -> Result<(), ClaimError> {
    check(value, vm_field, VM_STATES, "a Nova vm_state")
}

/// Checks `task_state` (field `task_field`) against Nova's list; `""` (none) is accepted where
/// `allow_empty` says so (a state update clears the task with it).
pub fn check_task_state(
    value: &str,
    task_field: &str,
    allow_empty: bool,
) -> Result<(), ClaimError> {
    if allow_empty && value.is_empty() {
        return Ok(());
    }
    check(value, task_field, TASK_STATES, "a Nova task_state")
}

fn check(value: &str, field: &str, accepted: &[&str], what: &str) -> Result<(), ClaimError> {
    if accepted.contains(&value) {
        return Ok(());
    }
    Err(ClaimError::Invalid {
        field: field.to_string(),
        message: format!(
            "{} is not {what}; expected one of: {}",
            quoted(value),
            accepted.join(", ")
        ),
    })
}

/// Nova's `_instance_in_resize_state`: resized, or active/stopped with a resize or rebuild task.
pub fn in_resize_state(vm_state: &str, task_state: Option<&str>) -> bool {
    vm_state == "resized"
        || (matches!(vm_state, "active" | "stopped")
            && task_state.is_some_and(|t| RESIZING.contains(&t)))
}

/// Nova's `_instance_is_live_migrating`: task `migrating`, active or paused.
pub fn live_migrating(vm_state: &str, task_state: Option<&str>) -> bool {
    task_state == Some("migrating") && matches!(vm_state, "active" | "paused")
}

/// Nova's `allow_resource_removal`: deleted instances, and shelved-offloaded ones that are not
/// being unshelved, use nothing.
pub fn releases_resources(vm_state: &str, task_state: Option<&str>) -> bool {
    vm_state == "deleted" || (vm_state == "shelved_offloaded" && task_state != Some("spawning"))
}

/// Whether Nova's usage rules count a migration of an instance in these states (only resizing
/// and live-migrating instances' migrations count).
pub fn move_is_counted(vm_state: &str, task_state: Option<&str>) -> bool {
    in_resize_state(vm_state, task_state) || live_migrating(vm_state, task_state)
}

/// The OpenAPI schema of a `vm_state` field: one of [`VM_STATES`].
pub fn vm_state_schema() -> utoipa::openapi::Object {
    state_schema(VM_STATES.iter().copied(), "Nova's vm_state")
}

/// The OpenAPI schema of a `task_state` field: one of [`TASK_STATES`].
pub fn task_state_schema() -> utoipa::openapi::Object {
    state_schema(TASK_STATES.iter().copied(), "Nova's task_state")
}

/// The OpenAPI schema of a `task_state` change: one of [`TASK_STATES`], or `""` to clear it.
pub fn task_state_or_none_schema() -> utoipa::openapi::Object {
    state_schema(
        std::iter::once("").chain(TASK_STATES.iter().copied()),
        "Nova's task_state; \"\" clears it",
    )
}

fn state_schema<'a>(
    values: impl Iterator<Item = &'a str>,
    description: &str,
) -> utoipa::openapi::Object {
    use utoipa::openapi::schema::{SchemaType, Type};
    // The fields are optional: null is taken as not given (so the type and the values list it).
    utoipa::openapi::ObjectBuilder::new()
        .schema_type(SchemaType::from_iter([Type::String, Type::Null]))
        .enum_values(Some(
            values
                .map(serde_json::Value::from)
                .chain(std::iter::once(serde_json::Value::Null)),
        ))
        .description(Some(description))
        .build()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_states_are_refused_naming_the_field_and_the_accepted_values() {
        let e = check_vm_state("../../etc/passwd", "instance.vm_state").unwrap_err();
        let ClaimError::Invalid { field, message } = e else {
            panic!("not invalid")
        };
        assert_eq!(field, "instance.vm_state");
        assert!(
            message.contains("\"../../etc/passwd\" is not a Nova vm_state"),
            "{message}"
        );
        assert!(message.contains("active, building"), "{message}");
        assert!(check_vm_state("soft-delete", "v").is_ok());
        assert!(check_task_state("", "t", true).is_ok());
        assert!(check_task_state("", "t", false).is_err());
        assert!(check_task_state("resize_prep", "t", false).is_ok());
        let long = "x".repeat(10_000);
        let ClaimError::Invalid { message, .. } = check_task_state(&long, "t", false).unwrap_err()
        else {
            panic!("not invalid")
        };
        assert!(message.len() < 2_000, "echo is bounded: {}", message.len());
    }

    #[test]
    fn only_resizing_and_live_migrating_instances_count_their_moves() {
        assert!(move_is_counted("active", Some("resize_prep")));
        assert!(move_is_counted("stopped", Some("rebuilding")));
        assert!(move_is_counted("resized", None));
        assert!(move_is_counted("paused", Some("migrating")));
        assert!(!move_is_counted("building", Some("resize_prep")));
        assert!(!move_is_counted("deleted", Some("resize_prep")));
        assert!(!move_is_counted("active", None));
        assert!(!move_is_counted("error", Some("rebuilding")));
    }
}
