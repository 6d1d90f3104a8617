//! The compute node's stable uuid, kept in `<state_dir>/compute_id` like Nova's file of the same
//! name: generated once, never rewritten. Losing it would make the node look new to Placement
//! and the scheduler, so a damaged file is an error naming it, never silently replaced.
//!
//! In: the state directory (or, for a run that cannot keep state, the node's name). Out: a
//! [`NodeId`] (the uuid, and when the file was written), created once with a random uuid; a
//! [`NodeIdError`] for a damaged or unreadable file; a uuid derived from the name ([`derived`]).

use std::io::Write;
use std::path::{Path, PathBuf};

/// Why the node id could not be read or created.
#[derive(Debug, thiserror::Error)]
pub enum NodeIdError {
    /// The file exists but does not hold a uuid.
    #[error("{path}: expected one UUID (the compute node's identity), found {found:?}; fix or remove the file (removing it gives the node a new identity)")]
    Garbage {
        /// The file.
        path: PathBuf,
        /// What it holds (first 60 characters).
        found: String,
    },
    /// The file or state directory could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The path.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
}

/// The node's uuid and when it was created (the file's modification time).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeId {
    /// Lower-case hyphenated uuid.
    pub uuid: String,
    /// When the file was written.
    pub created_at: time::OffsetDateTime,
}

/// Reads `<state_dir>/compute_id`, creating it (and the directory) with a new random uuid when
/// missing.
pub fn load_or_create(state_dir: &Path) -> Result<NodeId, NodeIdError> {
    match load(state_dir)? {
        Some(id) => Ok(id),
        None => create(state_dir, &uuid::Uuid::new_v4().hyphenated().to_string()),
    }
}

/// Reads `<state_dir>/compute_id`: `None` when there is none yet.
pub fn load(state_dir: &Path) -> Result<Option<NodeId>, NodeIdError> {
    let path = state_dir.join("compute_id");
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| NodeIdError::Io { path, source }
    };
    match std::fs::read_to_string(&path) {
        Ok(text) => {
            let t = text.trim();
            let uuid = uuid::Uuid::parse_str(t).map_err(|_| NodeIdError::Garbage {
                path: path.clone(),
                found: t.chars().take(60).collect(),
            })?;
            let created_at = std::fs::metadata(&path)
                .and_then(|m| m.modified())
                .map(time::OffsetDateTime::from)
                .map_err(io(&path))?;
            Ok(Some(NodeId {
                uuid: uuid.hyphenated().to_string(),
                created_at,
            }))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(NodeIdError::Io { path, source: e }),
    }
}

/// Writes `<state_dir>/compute_id` (and the directory) with `uuid`, atomically: a temporary
/// file, fsync, rename, fsync of the directory. The caller makes sure there is none yet.
pub fn create(state_dir: &Path, uuid: &str) -> Result<NodeId, NodeIdError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| NodeIdError::Io { path, source }
    };
    let path = state_dir.join("compute_id");
    std::fs::create_dir_all(state_dir).map_err(io(state_dir))?;
    let tmp = state_dir.join(".compute_id.tmp");
    {
        let mut f = std::fs::File::create(&tmp).map_err(io(&tmp))?;
        f.write_all(format!("{uuid}\n").as_bytes())
            .map_err(io(&tmp))?;
        f.sync_all().map_err(io(&tmp))?;
    }
    std::fs::rename(&tmp, &path).map_err(io(&path))?;
    std::fs::File::open(state_dir)
        .and_then(|d| d.sync_all())
        .map_err(io(state_dir))?;
    load(state_dir)?.ok_or_else(|| NodeIdError::Io {
        path,
        source: std::io::Error::other("written, then not found"),
    })
}

/// A uuid derived from the node name, for runs that cannot keep state (`--once` without a
/// writable state directory): stable for the same name, never random.
pub fn derived(hypervisor_hostname: &str) -> String {
    uuid::Uuid::new_v5(
        &uuid::Uuid::NAMESPACE_DNS,
        format!("rtrack.{hypervisor_hostname}").as_bytes(),
    )
    .hyphenated()
    .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn created_once_then_stable() {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("state");
        let a = load_or_create(&state).unwrap();
        let b = load_or_create(&state).unwrap();
        assert_eq!(a, b);
        assert!(uuid::Uuid::parse_str(&a.uuid).is_ok());
    }

    #[test]
    fn garbage_is_an_error_naming_the_file_and_is_kept() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("compute_id"), "not-a-uuid\n").unwrap();
        let e = load_or_create(dir.path()).unwrap_err().to_string();
        assert!(e.contains("compute_id") && e.contains("not-a-uuid"), "{e}");
        assert_eq!(
            std::fs::read_to_string(dir.path().join("compute_id")).unwrap(),
            "not-a-uuid\n"
        );
    }

    #[test]
    fn derived_ids_are_stable_per_name() {
        assert_eq!(derived("cmp1"), derived("cmp1"));
        assert_ne!(derived("cmp1"), derived("cmp2"));
    }
}
