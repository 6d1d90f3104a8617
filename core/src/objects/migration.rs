//! Migration 1.8 (nova/objects/migration.py): a move of an instance between or within hosts.
//!
//! In: a Migration primitive (1.0 to 1.8). Out: a [`Migration`] and its status
//! ([`Migration::status_str`]); backported to an older 1.x, the fields it does not know are
//! dropped.

use serde_json::{Map, Value};

use super::base::{Manifest, NovaObject, ObjVersion, ObjectError, Reader, Writer};
use super::enums::MigrationType;
use super::fields::{drop_fields, older, Bool, DateTime, Enum, Int, Str, Uuid};

crate::nova_object_fields! {
    /// Nova's Migration object: one move of an instance, with its hosts, flavors and progress.
    pub struct Migration {
        /// Database id.
        id: req Int,
        /// Uuid (1.5); the Placement consumer of the source side during a move.
        uuid: req Uuid,
        /// Source service host.
        source_compute: opt Str,
        /// Destination service host.
        dest_compute: opt Str,
        /// Source node.
        source_node: opt Str,
        /// Destination node.
        dest_node: opt Str,
        /// Destination ComputeNode id (1.8).
        dest_compute_id: opt Int,
        /// Destination host IP.
        dest_host: opt Str,
        /// Old flavor id.
        old_instance_type_id: opt Int,
        /// New flavor id.
        new_instance_type_id: opt Int,
        /// Instance uuid.
        instance_uuid: opt Str,
        /// Status: pre-migrating, migrating, post-migrating, finished, confirmed, reverted,
        /// error, failed, completed, cancelled, done, accepted, ...
        status: opt Str,
        /// migration, resize, live-migration or evacuation (1.2).
        migration_type: req Enum<MigrationType>,
        /// Hidden from the API (1.2).
        hidden: req Bool,
        /// Live-migration progress (1.4).
        memory_total: opt Int,
        /// Live-migration progress.
        memory_processed: opt Int,
        /// Live-migration progress.
        memory_remaining: opt Int,
        /// Live-migration progress.
        disk_total: opt Int,
        /// Live-migration progress.
        disk_processed: opt Int,
        /// Live-migration progress.
        disk_remaining: opt Int,
        /// Cross-cell move (1.6).
        cross_cell_move: req Bool,
        /// Requesting user (1.7).
        user_id: opt Str,
        /// Requesting project (1.7).
        project_id: opt Str,
        /// Persistent-object timestamps.
        created_at: opt DateTime,
        /// Last update.
        updated_at: opt DateTime,
        /// Deletion time.
        deleted_at: opt DateTime,
        /// Nova's `deleted`: true once the record is soft-deleted (kept, but marked gone).
        deleted: req Bool,
    }
}

impl NovaObject for Migration {
    const NAME: &'static str = "Migration";
    const VERSION: ObjVersion = ObjVersion::new(1, 8);
    fn decode(r: &mut Reader<'_>) -> Result<Self, ObjectError> {
        Self::decode_fields(r)
    }
    fn encode(&self, w: &mut Writer) -> Result<(), ObjectError> {
        self.encode_fields(w)
    }
    fn make_compatible(
        data: &mut Map<String, Value>,
        target: ObjVersion,
        _: Option<&Manifest>,
    ) -> Result<(), ObjectError> {
        if older(target, 1, 2) && data.contains_key("migration_type") {
            drop_fields(data, &["migration_type", "hidden"]);
        }
        if older(target, 1, 4) && data.contains_key("memory_total") {
            drop_fields(
                data,
                &[
                    "memory_total",
                    "memory_processed",
                    "memory_remaining",
                    "disk_total",
                    "disk_processed",
                    "disk_remaining",
                ],
            );
        }
        if older(target, 1, 5) {
            data.remove("uuid");
        }
        if older(target, 1, 6) {
            data.remove("cross_cell_move");
        }
        if older(target, 1, 7) {
            drop_fields(data, &["user_id", "project_id"]);
        }
        if older(target, 1, 8) {
            data.remove("dest_compute_id");
        }
        Ok(())
    }
}

impl Migration {
    /// The status, or "" when unset.
    pub fn status_str(&self) -> &str {
        self.status.get().map(String::as_str).unwrap_or("")
    }
}
