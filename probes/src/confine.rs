//! Keeps every read inside the probed roots. A captured tree (or a container's bind mount) may
//! hold symbolic links that point out of it, absolute (`meminfo -> /etc/passwd`) or through
//! `..`; followed, they would put the host's own files into the report. While a probe runs, the
//! roots are registered for its thread, and every open below a root resolves with `openat2`'s
//! `RESOLVE_IN_ROOT`: links are followed as if the root were `/`, so they can never leave it.
//! The cost is nil: one `openat2` instead of one `open`.
//!
//! In: the probe's roots and a path below one of them. Out: an open file that is inside the
//! root, or an error naming the path.
//!
//! Kernels before 5.6 have no `openat2`; there, the file is opened normally and its real path
//! (`/proc/self/fd/N`) must lie inside the root, or the open is refused.

use std::cell::{Cell, RefCell};
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use nix::errno::Errno;
use nix::fcntl::{OFlag, OpenHow, ResolveFlag};
use nix::sys::stat::Mode;

use crate::HostRoot;

/// A registered root: its path, an fd of it, and its real path (for the fallback check).
struct Root {
    path: PathBuf,
    fd: OwnedFd,
    real: PathBuf,
}

thread_local! {
    static ROOTS: RefCell<Vec<Root>> = const { RefCell::new(Vec::new()) };
}

thread_local! {
    static OPENS: Cell<u64> = const { Cell::new(0) };
}

/// The opens (`openat2`, `openat` or `open` calls, failed ones included) made through this
/// module on this thread so far: every file a probe reads is opened here, so a test can hold a
/// probe to a budget of files per device (see `probes/tests/footprint.rs`).
pub fn opens_attempted() -> u64 {
    OPENS.with(Cell::get)
}

fn count_open() {
    OPENS.with(|n| n.set(n.get() + 1));
}

/// Set once `openat2` answered ENOSYS: the fallback is used from then on.
static NO_OPENAT2: AtomicBool = AtomicBool::new(false);

/// The roots of one probe, registered for this thread until dropped.
pub struct Confined {
    registered: usize,
}

impl Confined {
    /// Registers `root`'s sysfs and procfs (those that can be opened) for this thread.
    pub fn enter(root: &HostRoot) -> Confined {
        let mut registered = 0;
        ROOTS.with(|roots| {
            let mut roots = roots.borrow_mut();
            for path in [&root.sys, &root.proc] {
                let flags = OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC;
                if let Ok(fd) = nix::fcntl::open(path.as_path(), flags, Mode::empty()) {
                    let real = std::fs::canonicalize(path).unwrap_or_else(|_| path.clone());
                    roots.push(Root {
                        path: path.clone(),
                        fd,
                        real,
                    });
                    registered += 1;
                }
            }
        });
        Confined { registered }
    }
}

impl Drop for Confined {
    fn drop(&mut self) {
        ROOTS.with(|roots| {
            let mut roots = roots.borrow_mut();
            let keep = roots.len().saturating_sub(self.registered);
            roots.truncate(keep);
        });
    }
}

/// Opens `path` with `flags`, confined to the registered root it lies under (if any).
pub fn open(path: &Path, flags: OFlag) -> nix::Result<OwnedFd> {
    ROOTS.with(|roots| {
        let roots = roots.borrow();
        // The innermost (longest) root that holds the path.
        let root = roots
            .iter()
            .filter(|r| path.starts_with(&r.path))
            .max_by_key(|r| r.path.as_os_str().len());
        count_open();
        let Some(root) = root else {
            return nix::fcntl::open(path, flags, Mode::empty());
        };
        let rel = path.strip_prefix(&root.path).unwrap_or(Path::new(""));
        let rel = if rel.as_os_str().is_empty() {
            Path::new(".")
        } else {
            rel
        };
        if !NO_OPENAT2.load(Ordering::Relaxed) {
            let how = OpenHow::new()
                .flags(flags)
                .resolve(ResolveFlag::RESOLVE_IN_ROOT | ResolveFlag::RESOLVE_NO_MAGICLINKS);
            match nix::fcntl::openat2(root.fd.as_fd(), rel, how) {
                Err(Errno::ENOSYS) => NO_OPENAT2.store(true, Ordering::Relaxed),
                // Interrupted by a concurrent rename: try once more, as the kernel suggests.
                Err(Errno::EAGAIN) => {
                    count_open();
                    return nix::fcntl::openat2(
                        root.fd.as_fd(),
                        rel,
                        OpenHow::new().flags(flags).resolve(
                            ResolveFlag::RESOLVE_IN_ROOT | ResolveFlag::RESOLVE_NO_MAGICLINKS,
                        ),
                    );
                }
                other => return other,
            }
        }
        let fd = nix::fcntl::openat(root.fd.as_fd(), rel, flags, Mode::empty())?;
        let real = std::fs::read_link(format!(
            "/proc/self/fd/{}",
            std::os::fd::AsRawFd::as_raw_fd(&fd)
        ))
        .map_err(|_| Errno::EXDEV)?;
        if real.starts_with(&root.real) {
            Ok(fd)
        } else {
            Err(Errno::EXDEV)
        }
    })
}

/// Opens `name` in the directory `dir` (whose path is `dir_path`): beneath it with one
/// `openat2` (an attribute is a plain file in its directory), and only if that meets a link
/// leading out of the directory, through the root as [`open`] does.
pub fn open_in<Fd: AsFd>(
    dir: &Fd,
    dir_path: &Path,
    name: &str,
    flags: OFlag,
) -> nix::Result<OwnedFd> {
    let confined = ROOTS.with(|roots| !roots.borrow().is_empty());
    count_open();
    if !confined {
        return nix::fcntl::openat(dir.as_fd(), name, flags, Mode::empty());
    }
    if !NO_OPENAT2.load(Ordering::Relaxed) {
        let how = OpenHow::new()
            .flags(flags)
            .resolve(ResolveFlag::RESOLVE_BENEATH | ResolveFlag::RESOLVE_NO_MAGICLINKS);
        match nix::fcntl::openat2(dir.as_fd(), name, how) {
            Err(Errno::EXDEV | Errno::ELOOP | Errno::EAGAIN | Errno::ENOSYS) => {}
            other => return other,
        }
    }
    open(&dir_path.join(name), flags)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_out_of_the_root_resolve_inside_it() {
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret"), "s3cr3t").unwrap();
        let tree = tempfile::tempdir().unwrap();
        let sys = tree.path().join("sys");
        std::fs::create_dir_all(sys.join("devices/x")).unwrap();
        std::fs::write(sys.join("devices/x/value"), "7").unwrap();
        std::os::unix::fs::symlink(outside.path().join("secret"), sys.join("abs")).unwrap();
        std::os::unix::fs::symlink(
            "../../../../../../../../../../".to_string()
                + outside.path().join("secret").to_str().unwrap(),
            sys.join("rel"),
        )
        .unwrap();
        std::os::unix::fs::symlink("devices/x", sys.join("inside")).unwrap();
        let root = HostRoot::under(tree.path());
        let _c = Confined::enter(&root);
        let flags = OFlag::O_RDONLY | OFlag::O_CLOEXEC;
        assert!(
            open(&sys.join("abs"), flags).is_err(),
            "an absolute link left the root"
        );
        assert!(
            open(&sys.join("rel"), flags).is_err(),
            "a relative link left the root"
        );
        let fd = open(&sys.join("inside/value"), flags).unwrap();
        let mut s = String::new();
        std::io::Read::read_to_string(&mut std::fs::File::from(fd), &mut s).unwrap();
        assert_eq!(s, "7");
        // Relative to a directory: a plain attribute opens beneath it, a link out of the root
        // is refused, a link inside the root is followed.
        let dir = nix::fcntl::open(
            sys.as_path(),
            OFlag::O_RDONLY | OFlag::O_DIRECTORY,
            Mode::empty(),
        )
        .unwrap();
        assert!(open_in(&dir, &sys, "abs", flags).is_err());
        assert!(open_in(&dir, &sys, "rel", flags).is_err());
        // A path of several components (`index2/level`, `cpu3/topology/core_id`) whose
        // directory is a link out of the root stays inside it too.
        std::os::unix::fs::symlink(outside.path(), sys.join("absdir")).unwrap();
        assert!(open_in(&dir, &sys, "absdir/secret", flags).is_err());
        assert!(open_in(&dir, &sys, "inside/value", flags).is_ok());
        let x = nix::fcntl::open(
            sys.join("devices/x").as_path(),
            OFlag::O_RDONLY | OFlag::O_DIRECTORY,
            Mode::empty(),
        )
        .unwrap();
        assert!(open_in(&x, &sys.join("devices/x"), "value", flags).is_ok());
        // Outside every root, paths open as they are.
        assert!(open(&outside.path().join("secret"), flags).is_ok());
    }
}
