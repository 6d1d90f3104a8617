//! One daemon per state directory: an exclusive `flock` on `<state_dir>/lock`, held for the
//! daemon's lifetime (the kernel drops it when the process dies, however it dies). The holder
//! writes its pid into the file, so a second daemon can say who holds it.
//!
//! In: the state directory (which must exist). Out: a [`StateDirLock`] held until it is dropped, or
//! a [`LockError`] saying who holds the lock (its pid) or why the lock file cannot be opened.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use nix::fcntl::{Flock, FlockArg};

/// Why the state directory could not be locked.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    /// Another process holds it.
    #[error("{dir}: the state directory is in use by another rtrackd ({holder}; lock file {lock}); one daemon per state directory: stop that one, or give this one another [host] state_dir")]
    Held {
        /// The state directory.
        dir: PathBuf,
        /// The lock file.
        lock: PathBuf,
        /// "pid N", or why the pid is unknown.
        holder: String,
    },
    /// The lock file could not be opened or locked.
    #[error("{path}: cannot lock the state directory: {source}")]
    Io {
        /// The lock file.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
}

/// The held lock; released when dropped (or when the process ends).
#[derive(Debug)]
pub struct StateDirLock {
    _file: Flock<File>,
    path: PathBuf,
}

impl StateDirLock {
    /// Takes the lock on `state_dir` (which must exist) without waiting.
    pub fn acquire(state_dir: &Path) -> Result<StateDirLock, LockError> {
        let path = state_dir.join("lock");
        let io = |source| LockError::Io {
            path: path.clone(),
            source,
        };
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(io)?;
        let mut file = match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            Ok(f) => f,
            Err((mut file, nix::errno::Errno::EWOULDBLOCK)) => {
                let mut text = String::new();
                let holder = match file.read_to_string(&mut text) {
                    Ok(_) => match text.trim().parse::<u32>() {
                        Ok(pid) => format!("pid {pid}"),
                        Err(_) => "pid not recorded yet".to_string(),
                    },
                    Err(e) => format!("pid unreadable: {e}"),
                };
                return Err(LockError::Held {
                    dir: state_dir.to_path_buf(),
                    lock: path.clone(),
                    holder,
                });
            }
            Err((_, errno)) => return Err(io(std::io::Error::from(errno))),
        };
        // The pid is for the message a second daemon prints; the lock holds without it (a
        // start on a full disk must not fail here).
        let written = file
            .set_len(0)
            .and_then(|()| file.seek(SeekFrom::Start(0)))
            .and_then(|_| writeln!(file, "{}", std::process::id()));
        if let Err(e) = written {
            tracing::warn!(path = %path.display(), error = %e, "cannot record rtrackd's pid in the lock file");
        }
        Ok(StateDirLock { _file: file, path })
    }

    /// The lock file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_holder_is_refused_naming_the_directory_and_the_pid() {
        let dir = tempfile::tempdir().unwrap();
        let held = StateDirLock::acquire(dir.path()).unwrap();
        let e = StateDirLock::acquire(dir.path()).unwrap_err().to_string();
        assert!(e.contains(&dir.path().display().to_string()), "{e}");
        assert!(e.contains(&format!("pid {}", std::process::id())), "{e}");
        drop(held);
        StateDirLock::acquire(dir.path()).unwrap();
    }
}
