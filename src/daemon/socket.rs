//! Binding the API socket with its mode and group in place before anyone can connect: bound
//! under a temporary name, chmod/chown, then renamed over the final path.
//!
//! In: the socket path, mode and group id from the configuration (and a new group on SIGHUP). Out:
//! a `tokio::net::UnixListener` on the final path, or a [`SocketError`] (another rtrackd answers
//! there, or a filesystem call failed).

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use nix::unistd::{chown, Gid};

/// Why the socket could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum SocketError {
    /// Another process answers on the path.
    #[error("{0}: another rtrackd is already listening on this socket")]
    InUse(PathBuf),
    /// A filesystem or socket call failed.
    #[error("{path}: cannot {what}: {source}")]
    Io {
        /// The path.
        path: PathBuf,
        /// What was being done.
        what: &'static str,
        /// The I/O error of that step.
        source: std::io::Error,
    },
}

fn io<'a>(path: &'a Path, what: &'static str) -> impl FnOnce(std::io::Error) -> SocketError + 'a {
    move |source| SocketError::Io {
        path: path.to_path_buf(),
        what,
        source,
    }
}

/// Binds `path` with `mode` and, if given, group `gid`.
pub fn bind(
    path: &Path,
    mode: u32,
    gid: Option<u32>,
) -> Result<tokio::net::UnixListener, SocketError> {
    if let Some(dir) = path.parent() {
        if !dir.as_os_str().is_empty() && !dir.exists() {
            std::fs::create_dir_all(dir).map_err(io(dir, "create the socket directory"))?;
            // Others may need to traverse to the socket; the socket's own mode guards it.
            let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755));
        }
    }
    if path.exists() {
        // A live daemon answers; a stale file from a crash does not.
        if std::os::unix::net::UnixStream::connect(path).is_ok() {
            return Err(SocketError::InUse(path.to_path_buf()));
        }
    }
    // Bound beside the socket and renamed into place. The name is short (at most 8 bytes,
    // shorter than "rtrack.sock"): a socket path near the kernel's 107-byte limit must not fail
    // only because the temporary name is longer.
    let tmp = path.with_file_name(format!(".{:x}", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    let std_listener =
        std::os::unix::net::UnixListener::bind(&tmp).map_err(io(&tmp, "bind the API socket"))?;
    let setup = (|| {
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(mode))
            .map_err(io(&tmp, "set the socket's mode"))?;
        if let Some(g) = gid {
            chown(&tmp, None, Some(Gid::from_raw(g))).map_err(|e| SocketError::Io {
                path: tmp.clone(),
                what: "give the socket to its group",
                source: e.into(),
            })?;
        }
        std::fs::rename(&tmp, path).map_err(io(path, "move the socket into place"))?;
        std_listener
            .set_nonblocking(true)
            .map_err(io(path, "make the socket non-blocking"))?;
        tokio::net::UnixListener::from_std(std_listener).map_err(io(path, "listen on the socket"))
    })();
    if setup.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    setup
}

/// Changes the socket's group (a reloaded `socket_group`).
pub fn set_group(path: &Path, gid: u32) -> Result<(), SocketError> {
    chown(path, None, Some(Gid::from_raw(gid))).map_err(|e| SocketError::Io {
        path: path.to_path_buf(),
        what: "give the socket to its group",
        source: e.into(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    #[tokio::test]
    async fn a_socket_path_near_the_kernels_limit_binds() {
        let dir = tempfile::tempdir().unwrap();
        // 104 bytes in all: the kernel takes up to 107.
        let base = dir.path().display().to_string();
        let pad = 104 - base.len() - "/rtrack.sock".len() - 1;
        let path = dir.path().join("d".repeat(pad)).join("rtrack.sock");
        assert_eq!(path.as_os_str().len(), 104);
        let _l = bind(&path, 0o600, None).unwrap();
        assert!(path.exists());
    }

    #[tokio::test]
    async fn the_socket_gets_its_mode_and_a_live_one_is_not_stolen() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("run/rtrack.sock");
        let l = bind(&p, 0o660, None).unwrap();
        let meta = std::fs::metadata(&p).unwrap();
        assert_eq!(meta.mode() & 0o777, 0o660);
        let e = bind(&p, 0o660, None).unwrap_err();
        assert!(matches!(e, SocketError::InUse(_)), "{e}");
        drop(l);
        // A stale socket file (nobody listening) is replaced.
        let _l2 = bind(&p, 0o600, None).unwrap();
        assert_eq!(std::fs::metadata(&p).unwrap().mode() & 0o777, 0o600);
        // No temporary file is left behind.
        let names: Vec<_> = std::fs::read_dir(p.parent().unwrap()).unwrap().collect();
        assert_eq!(names.len(), 1);
    }
}
