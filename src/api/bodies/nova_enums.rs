//! The OpenAPI schemas of Nova's enumerated strings in the request bodies: instance states
//! (from the tracker's lists, [`VM_STATES`] and [`TASK_STATES`]) and the kinds of move. The
//! tracker holds the rules; the API describes them (the accounting core knows no OpenAPI).

use std::borrow::Cow;

use utoipa::openapi::schema::{SchemaType, Type};
use utoipa::openapi::{Object, ObjectBuilder, RefOr, Schema};
use utoipa::ToSchema;

use crate::tracker::nova_states::{TASK_STATES, VM_STATES};
use crate::tracker::MoveType;

/// The schema of a `vm_state` field: one of [`VM_STATES`].
pub fn vm_state_schema() -> Object {
    state_schema(VM_STATES.iter().copied(), "Nova's vm_state")
}

/// The schema of a `task_state` field: one of [`TASK_STATES`].
pub fn task_state_schema() -> Object {
    state_schema(TASK_STATES.iter().copied(), "Nova's task_state")
}

/// The schema of a `task_state` change: one of [`TASK_STATES`], or `""` to clear it.
pub fn task_state_or_none_schema() -> Object {
    state_schema(
        std::iter::once("").chain(TASK_STATES.iter().copied()),
        "Nova's task_state; \"\" clears it",
    )
}

fn state_schema<'a>(values: impl Iterator<Item = &'a str>, description: &str) -> Object {
    // The fields are optional: null is taken as not given (so the type and the values list it).
    ObjectBuilder::new()
        .schema_type(SchemaType::from_iter([Type::String, Type::Null]))
        .enum_values(Some(
            values
                .map(serde_json::Value::from)
                .chain(std::iter::once(serde_json::Value::Null)),
        ))
        .description(Some(description))
        .build()
}

/// The schema component `MoveType`: the kinds of move a migration request names, listed from
/// the tracker's own [`MoveType::ALL`] (no second list to keep equal).
pub struct MoveTypeSchema;

impl utoipa::PartialSchema for MoveTypeSchema {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new()
            .schema_type(SchemaType::Type(Type::String))
            .enum_values(Some(MoveType::ALL.iter().map(|m| m.as_str())))
            .description(Some("The kind of move"))
            .build()
            .into()
    }
}

impl ToSchema for MoveTypeSchema {
    fn name() -> Cow<'static, str> {
        Cow::Borrowed("MoveType")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_move_type_schema_names_every_move_type_the_tracker_reads() {
        let schema =
            serde_json::to_value(<MoveTypeSchema as utoipa::PartialSchema>::schema()).unwrap();
        let described: Vec<String> = schema["enum"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m.as_str().unwrap().to_string())
            .collect();
        let read: Vec<&str> = MoveType::ALL.iter().map(|m| m.as_str()).collect();
        assert_eq!(described, read);
        for name in &described {
            let parsed: MoveType = serde_json::from_value(serde_json::json!(name)).unwrap();
            assert_eq!(parsed.as_str(), name);
        }
    }

    #[test]
    fn state_schemas_list_the_trackers_states_and_null() {
        let vm = serde_json::to_value(vm_state_schema()).unwrap();
        assert_eq!(vm["enum"].as_array().unwrap().len(), VM_STATES.len() + 1);
        let task = serde_json::to_value(task_state_or_none_schema()).unwrap();
        assert_eq!(task["enum"][0], "");
        assert_eq!(
            task["enum"].as_array().unwrap().len(),
            TASK_STATES.len() + 2
        );
    }
}
