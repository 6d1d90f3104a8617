//! Capped, tolerant readers for sysfs and procfs files, and the warnings they produce.
//!
//! In: paths below the probed roots, with a size cap. Out: their contents (bytes, text, trimmed
//! values, link targets, directory listings, integers and hex ids parsed), or a [`ReadFailure`] or
//! `None`, and [`Warning`]s pushed into a [`Warnings`] collector.
//!
//! sysfs reports every attribute as 4096 bytes long whatever it holds, and some attributes block
//! or misbehave, so files are read to EOF through a size cap without trusting `stat`. A missing
//! or unreadable file is "unknown": the reader returns `None` and, where the file was expected,
//! records a [`Warning`] naming the path. Nothing here panics on file contents.

use std::fs::File;
use std::io::{self, Read};
use std::path::{Path, PathBuf};

use serde::Serialize;

/// Largest sysfs attribute we accept (real ones are under a page).
pub const SYSFS_CAP: usize = 64 * 1024;
/// Largest procfs file we accept (`/proc/cpuinfo` on a 512-CPU host is a few MB).
pub const PROCFS_CAP: usize = 32 * 1024 * 1024;

/// Characters of a file's value quoted in a warning; longer values are cut and say their size.
pub const ECHO_LIMIT: usize = 120;

/// `value` cut to `limit` characters, then `…(N bytes)` when it was longer.
pub fn bounded(value: &str, limit: usize) -> String {
    match value.char_indices().nth(limit) {
        None => value.to_string(),
        Some((cut, _)) => format!("{}…({} bytes)", &value[..cut], value.len()),
    }
}

/// A file's value quoted for a warning (as `{:?}` prints it), cut at [`ECHO_LIMIT`] characters.
pub fn quoted(value: &str) -> String {
    match value.char_indices().nth(ECHO_LIMIT) {
        None => format!("{value:?}"),
        Some((cut, _)) => format!("{:?}…({} bytes)", &value[..cut], value.len()),
    }
}

/// Something a probe could not read or understand; the report carries these.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize, PartialOrd, Ord)]
pub struct Warning {
    /// The file or directory concerned.
    pub path: String,
    /// What was wrong and what was expected.
    pub message: String,
}

/// Collects warnings while probing.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Warnings(Vec<Warning>);

impl Warnings {
    /// An empty collector.
    pub fn new() -> Warnings {
        Warnings::default()
    }

    /// Records a warning about `path`. The message is bounded whatever it quotes.
    pub fn push(&mut self, path: &Path, message: impl Into<String>) {
        let message = message.into();
        self.0.push(Warning {
            path: bounded(&path.display().to_string(), 4 * ECHO_LIMIT),
            message: bounded(&message, 4 * ECHO_LIMIT),
        });
    }

    /// The warnings recorded so far, in order.
    pub fn as_slice(&self) -> &[Warning] {
        &self.0
    }

    /// Takes the warnings out.
    pub fn into_vec(self) -> Vec<Warning> {
        self.0
    }

    /// Appends another collector's warnings.
    pub fn extend(&mut self, other: Warnings) {
        self.0.extend(other.0);
    }

    /// Number of warnings.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// True when nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// Why a file could not be read.
#[derive(Debug)]
pub enum ReadFailure {
    /// The file does not exist (or a path component is missing).
    Missing,
    /// The file exists but could not be read.
    Io(io::Error),
    /// The file is longer than the cap.
    TooLarge(usize),
    /// The file is not UTF-8 text.
    NotText,
    /// Not a regular file (a FIFO, socket or device): never read, since it could block or
    /// never end.
    NotRegular(&'static str),
}

impl std::fmt::Display for ReadFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReadFailure::Missing => write!(f, "missing"),
            ReadFailure::Io(e) => write!(f, "unreadable: {e}"),
            ReadFailure::TooLarge(cap) => write!(f, "longer than the {cap}-byte cap"),
            ReadFailure::NotText => write!(f, "not UTF-8 text"),
            ReadFailure::NotRegular(kind) => {
                write!(
                    f,
                    "unreadable: {kind}, not a regular file (expected a sysfs or procfs attribute)"
                )
            }
        }
    }
}

/// Opens a file to read it, inside the probed root. `O_NONBLOCK` keeps the open and the reads
/// from waiting (a FIFO without a writer gives EOF at once, a device "try again"), so nothing
/// in a probed tree can block; [`settle`] then names what was not a regular file.
pub fn open_nonblocking(path: &Path) -> Result<File, ReadFailure> {
    use nix::fcntl::OFlag;
    let flags = OFlag::O_RDONLY | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC;
    let fd = crate::confine::open(path, flags).map_err(errno_failure)?;
    Ok(File::from(fd))
}

/// A read's outcome, checked: every sysfs and procfs attribute is a regular file, so a read
/// that failed or found nothing asks `fstat` what the file is, and anything else (a FIFO, a
/// device, a directory) is refused as such. A read that found something needs no extra
/// syscall: nothing that is not a regular file can make a read of ours block or run past its
/// cap, and the cap's error is checked the same way.
fn settle(file: &File, read: Result<Vec<u8>, ReadFailure>) -> Result<Vec<u8>, ReadFailure> {
    match &read {
        Ok(bytes) if !bytes.is_empty() => read,
        _ => {
            regular(file)?;
            read
        }
    }
}

fn errno_failure(e: nix::errno::Errno) -> ReadFailure {
    match e {
        // EXDEV: a link that leads out of the probed root (see `confine`).
        nix::errno::Errno::EXDEV => ReadFailure::Io(io::Error::other(
            "a symbolic link on the way leads out of the probed root; not followed",
        )),
        e => io_failure(io::Error::from(e)),
    }
}

/// Ok if `file` is a regular file.
fn regular(file: &File) -> Result<(), ReadFailure> {
    use std::os::unix::fs::FileTypeExt;
    let t = file.metadata().map_err(io_failure)?.file_type();
    if t.is_file() {
        return Ok(());
    }
    Err(ReadFailure::NotRegular(if t.is_fifo() {
        "a FIFO"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else if t.is_dir() {
        "a directory"
    } else {
        "a special file"
    }))
}

/// Reads a whole file, at most `cap` bytes, without trusting its size.
pub fn read_capped(path: &Path, cap: usize) -> Result<Vec<u8>, ReadFailure> {
    let file = open_nonblocking(path)?;
    let mut buf = Vec::with_capacity(256);
    // One byte past the cap tells "exactly cap" from "too long".
    let read = (&file)
        .take(cap as u64 + 1)
        .read_to_end(&mut buf)
        .map_err(io_failure)
        .and_then(|_| {
            if buf.len() > cap {
                Err(ReadFailure::TooLarge(cap))
            } else {
                Ok(std::mem::take(&mut buf))
            }
        });
    settle(&file, read)
}

fn io_failure(e: io::Error) -> ReadFailure {
    match e.kind() {
        io::ErrorKind::NotFound => ReadFailure::Missing,
        // ENOTDIR: a path component is a file; treat like a missing file.
        _ if e.raw_os_error() == Some(nix::libc::ENOTDIR) => ReadFailure::Missing,
        _ => ReadFailure::Io(e),
    }
}

/// Reads the first `n` bytes of a file (fewer if it is shorter). For PCI `config`, of which only
/// the standard 64-byte header may be read without root and without side effects.
pub fn read_prefix(path: &Path, n: usize) -> Result<Vec<u8>, ReadFailure> {
    let file = open_nonblocking(path)?;
    let mut buf = Vec::with_capacity(n);
    let read = (&file)
        .take(n as u64)
        .read_to_end(&mut buf)
        .map_err(io_failure)
        .map(|_| buf);
    settle(&file, read)
}

/// Reads a sysfs attribute: one `read(2)` into a page-sized buffer, more only if it came back
/// full. A sysfs attribute returns its whole value in the first read, and a regular file (a
/// captured tree) returns less than asked only at EOF, so the usual extra `read` that returns 0
/// is skipped: on a host with a thousand VFs that is thousands of syscalls per probe.
pub fn read_sysfs(path: &Path, cap: usize) -> Result<Vec<u8>, ReadFailure> {
    let file = open_nonblocking(path)?;
    let read = read_sysfs_file(&file, cap);
    settle(&file, read)
}

fn read_sysfs_file(mut file: &File, cap: usize) -> Result<Vec<u8>, ReadFailure> {
    let mut buf = vec![0u8; 4096.min(cap + 1)];
    let mut len = 0;
    loop {
        let n = loop {
            match file.read(&mut buf[len..]) {
                Ok(n) => break n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(io_failure(e)),
            }
        };
        len += n;
        if len > cap {
            return Err(ReadFailure::TooLarge(cap));
        }
        if n == 0 || len < buf.len() {
            break;
        }
        let grown = (buf.len() * 2).min(cap + 1);
        buf.resize(grown, 0);
    }
    buf.truncate(len);
    Ok(buf)
}

/// Reads a text file, at most `cap` bytes. Trailing NULs (seen after the newline of some
/// cpulist files) are dropped; surrounding whitespace is kept for the parsers.
pub fn read_text(path: &Path, cap: usize) -> Result<String, ReadFailure> {
    let bytes = read_capped(path, cap)?;
    text_of(bytes)
}

fn text_of(mut bytes: Vec<u8>) -> Result<String, ReadFailure> {
    while bytes.last() == Some(&0) {
        bytes.pop();
    }
    String::from_utf8(bytes).map_err(|_| ReadFailure::NotText)
}

/// Reads a sysfs attribute that may legitimately be absent: `None` without a warning when
/// missing, `None` with a warning when present but unreadable. Returns the trimmed value.
pub fn read_optional(path: &Path, w: &mut Warnings) -> Option<String> {
    match read_sysfs(path, SYSFS_CAP).and_then(text_of) {
        Ok(s) => Some(trim_value(&s).to_string()),
        Err(ReadFailure::Missing) => None,
        Err(e) => {
            w.push(path, format!("file is {e}"));
            None
        }
    }
}

/// Reads a sysfs attribute that should be present: any failure is a warning.
pub fn read_expected(path: &Path, w: &mut Warnings) -> Option<String> {
    match read_sysfs(path, SYSFS_CAP).and_then(text_of) {
        Ok(s) => Some(trim_value(&s).to_string()),
        Err(e) => {
            w.push(path, format!("file is {e}"));
            None
        }
    }
}

/// Trims whitespace and NULs around a sysfs value.
pub fn trim_value(s: &str) -> &str {
    s.trim_matches(|c: char| c.is_whitespace() || c == '\0')
}

/// The basename of a symlink's target, without following it: `driver` links in captured trees
/// often dangle, and that is normal. `None` when there is no link; a warning when the entry exists
/// but is not a link.
pub fn link_basename(path: &Path, w: &mut Warnings) -> Option<String> {
    match std::fs::read_link(path) {
        Ok(target) => match target.file_name() {
            Some(name) => Some(name.to_string_lossy().into_owned()),
            None => {
                w.push(
                    path,
                    format!(
                        "link target {} has no file name",
                        quoted(&target.to_string_lossy())
                    ),
                );
                None
            }
        },
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(e) if e.raw_os_error() == Some(nix::libc::ENOTDIR) => None,
        Err(e) if e.kind() == io::ErrorKind::InvalidInput => {
            w.push(path, "expected a symbolic link, found a regular entry");
            None
        }
        Err(e) => {
            w.push(path, format!("link unreadable: {e}"));
            None
        }
    }
}

/// Lists the names in a directory, sorted. `None` when the directory is missing (no warning);
/// a warning when it exists but cannot be listed.
pub fn list_dir(path: &Path, w: &mut Warnings) -> Option<Vec<String>> {
    let mut dir = SysDir::open(path, w)?;
    let mut names = dir.entries(w);
    names.sort();
    Some(names)
}

/// An open directory whose entries are read relative to it (`openat`, `readlinkat`): the PCI
/// probe reads a dozen entries of each of thousands of device directories, and resolving the
/// full path (through the `bus/pci/devices` symlink) for each one costs more than the read.
pub struct SysDir {
    fd: DirFd,
    path: PathBuf,
}

/// A directory opened for listing (a libc `DIR`) or only as an anchor for `openat`.
enum DirFd {
    Listable(nix::dir::Dir),
    Plain(std::os::fd::OwnedFd),
}

impl std::os::fd::AsFd for DirFd {
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        match self {
            DirFd::Listable(d) => d.as_fd(),
            DirFd::Plain(fd) => fd.as_fd(),
        }
    }
}

impl SysDir {
    /// Opens a directory to list it and read its entries. `None` without a warning when it is
    /// missing; with one otherwise.
    pub fn open(path: &Path, w: &mut Warnings) -> Option<SysDir> {
        let fd = Self::open_fd(path, w)?;
        match nix::dir::Dir::from_fd(fd) {
            Ok(dir) => Some(SysDir {
                fd: DirFd::Listable(dir),
                path: path.to_path_buf(),
            }),
            Err(e) => {
                w.push(path, format!("directory cannot be opened: {}", e.desc()));
                None
            }
        }
    }

    /// Opens a directory only to read entries by name (one syscall cheaper than [`Self::open`]:
    /// no `fstat`); [`Self::entries`] on it lists nothing.
    pub fn open_unlisted(path: &Path, w: &mut Warnings) -> Option<SysDir> {
        Some(SysDir {
            fd: DirFd::Plain(Self::open_fd(path, w)?),
            path: path.to_path_buf(),
        })
    }

    fn open_fd(path: &Path, w: &mut Warnings) -> Option<std::os::fd::OwnedFd> {
        use nix::fcntl::OFlag;
        let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC;
        match crate::confine::open(path, flags) {
            Ok(fd) => Some(fd),
            Err(nix::errno::Errno::ENOENT) => None,
            Err(nix::errno::Errno::ENOTDIR) => {
                w.push(path, "expected a directory, found a file");
                None
            }
            Err(e) => {
                w.push(path, format!("directory cannot be opened: {}", e.desc()));
                None
            }
        }
    }

    /// The directory's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Path of an entry, for messages.
    pub fn join(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }

    /// The entry names (without `.` and `..`), unsorted.
    pub fn entries(&mut self, w: &mut Warnings) -> Vec<String> {
        let mut names = Vec::new();
        let DirFd::Listable(dir) = &mut self.fd else {
            return names;
        };
        for entry in dir.iter() {
            match entry {
                Ok(e) => {
                    let name = e.file_name().to_string_lossy();
                    if name != "." && name != ".." {
                        names.push(name.into_owned());
                    }
                }
                Err(e) => {
                    w.push(
                        &self.path,
                        format!("directory listing failed part-way: {}", e.desc()),
                    );
                    break;
                }
            }
        }
        names
    }

    /// Reads an attribute of this directory like [`read_optional`]: silent `None` when missing.
    pub fn read_optional(&self, name: &str, w: &mut Warnings) -> Option<String> {
        use nix::fcntl::OFlag;
        // Beneath this directory (one path component, no link may lead out), else through
        // the root for a link that stays inside it.
        let fd = match crate::confine::open_in(
            &self.fd,
            &self.path,
            name,
            OFlag::O_RDONLY | OFlag::O_CLOEXEC | OFlag::O_NONBLOCK,
        ) {
            Ok(fd) => fd,
            Err(nix::errno::Errno::ENOENT) | Err(nix::errno::Errno::ENOTDIR) => return None,
            Err(e) => {
                w.push(
                    &self.join(name),
                    format!("file is unreadable: {}", e.desc()),
                );
                return None;
            }
        };
        let file = File::from(fd);
        let read = read_sysfs_file(&file, SYSFS_CAP);
        match settle(&file, read).and_then(text_of) {
            Ok(s) => Some(trim_value(&s).to_string()),
            Err(e) => {
                w.push(&self.join(name), format!("file is {e}"));
                None
            }
        }
    }

    /// The target of the link `name` in this directory, as written; none when `name` is not a
    /// link or cannot be read.
    pub fn link_target(&self, name: &str) -> Option<PathBuf> {
        nix::fcntl::readlinkat(&self.fd, name)
            .ok()
            .map(PathBuf::from)
    }

    /// Basename of a link's target, like [`link_basename`].
    pub fn link_basename(&self, name: &str, w: &mut Warnings) -> Option<String> {
        match nix::fcntl::readlinkat(&self.fd, name) {
            Ok(target) => match Path::new(&target).file_name() {
                Some(base) => Some(base.to_string_lossy().into_owned()),
                None => {
                    w.push(
                        &self.join(name),
                        format!(
                            "link target {} has no file name",
                            quoted(&target.to_string_lossy())
                        ),
                    );
                    None
                }
            },
            Err(nix::errno::Errno::ENOENT) | Err(nix::errno::Errno::ENOTDIR) => None,
            Err(nix::errno::Errno::EINVAL) => {
                w.push(
                    &self.join(name),
                    "expected a symbolic link, found a regular entry",
                );
                None
            }
            Err(e) => {
                w.push(&self.join(name), format!("link unreadable: {}", e.desc()));
                None
            }
        }
    }
}

/// Parses an integer attribute such as `numa_node` ("-1") or `sriov_numvfs` ("8"), warning with
/// the path and the raw value when it is not one.
pub fn parse_int<T: std::str::FromStr>(
    raw: &str,
    path: &Path,
    expected: &str,
    w: &mut Warnings,
) -> Option<T> {
    match raw.parse::<T>() {
        Ok(v) => Some(v),
        Err(_) => {
            w.push(path, format!("value {} is not {expected}", quoted(raw)));
            None
        }
    }
}

/// Parses a hex attribute such as `vendor` ("0x8086"), accepting an optional `0x`.
pub fn parse_hex(raw: &str, path: &Path, expected: &str, w: &mut Warnings) -> Option<u32> {
    let digits = raw
        .strip_prefix("0x")
        .or_else(|| raw.strip_prefix("0X"))
        .unwrap_or(raw);
    // `from_str_radix` takes a leading `+`; a sysfs hex value never has one.
    if digits.is_empty() || digits.len() > 8 || !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
        w.push(path, format!("value {} is not {expected}", quoted(raw)));
        return None;
    }
    match u32::from_str_radix(digits, 16) {
        Ok(v) => Some(v),
        Err(_) => {
            w.push(path, format!("value {} is not {expected}", quoted(raw)));
            None
        }
    }
}

/// Joins a path below `base` from `/`-separated parts.
pub fn join(base: &Path, parts: &[&str]) -> PathBuf {
    let mut p = base.to_path_buf();
    for part in parts {
        p.push(part);
    }
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_capped_refuses_files_longer_than_the_cap() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, vec![b'a'; 11]).unwrap();
        assert!(matches!(
            read_capped(&p, 10),
            Err(ReadFailure::TooLarge(10))
        ));
        assert_eq!(read_capped(&p, 11).unwrap().len(), 11);
    }

    #[test]
    fn read_sysfs_reads_files_of_any_size_up_to_the_cap() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        for size in [0usize, 1, 4095, 4096, 4097, 10000] {
            let data: Vec<u8> = (0..size).map(|i| (i % 251) as u8).collect();
            std::fs::write(&p, &data).unwrap();
            assert_eq!(read_sysfs(&p, 10000).unwrap(), data, "size {size}");
        }
        std::fs::write(&p, vec![1u8; 10001]).unwrap();
        assert!(matches!(
            read_sysfs(&p, 10000),
            Err(ReadFailure::TooLarge(_))
        ));
    }

    #[test]
    fn read_text_drops_trailing_nuls() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("cpulist");
        std::fs::write(&p, b"0-3\n\0").unwrap();
        assert_eq!(read_text(&p, 100).unwrap(), "0-3\n");
    }

    #[test]
    fn optional_missing_file_is_silent_but_a_directory_warns() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = Warnings::new();
        assert_eq!(read_optional(&dir.path().join("nope"), &mut w), None);
        assert!(w.is_empty());
        std::fs::create_dir(dir.path().join("d")).unwrap();
        assert_eq!(read_optional(&dir.path().join("d"), &mut w), None);
        assert_eq!(w.len(), 1);
        assert!(w.as_slice()[0].path.ends_with("/d"));
    }

    #[test]
    fn expected_missing_file_warns_with_its_path() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = Warnings::new();
        assert_eq!(read_expected(&dir.path().join("vendor"), &mut w), None);
        assert_eq!(w.as_slice()[0].message, "file is missing");
        assert!(w.as_slice()[0].path.ends_with("/vendor"));
    }

    #[test]
    fn non_utf8_is_reported() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, [0xff, 0xfe]).unwrap();
        let mut w = Warnings::new();
        assert_eq!(read_optional(&p, &mut w), None);
        assert!(w.as_slice()[0].message.contains("UTF-8"));
    }

    #[test]
    fn link_basename_does_not_follow_dangling_links() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("driver");
        std::os::unix::fs::symlink("../../../bus/pci/drivers/ixgbe", &p).unwrap();
        let mut w = Warnings::new();
        assert_eq!(link_basename(&p, &mut w).as_deref(), Some("ixgbe"));
        std::fs::write(dir.path().join("plain"), "x").unwrap();
        assert_eq!(link_basename(&dir.path().join("plain"), &mut w), None);
        assert_eq!(w.len(), 1);
    }

    #[test]
    fn hex_and_int_parsers_name_the_raw_value() {
        let mut w = Warnings::new();
        let p = Path::new("/sys/x/vendor");
        assert_eq!(parse_hex("0x8086", p, "hex", &mut w), Some(0x8086));
        assert_eq!(parse_hex("8086", p, "hex", &mut w), Some(0x8086));
        assert_eq!(parse_hex("0xzz", p, "a hex id like 0x8086", &mut w), None);
        assert_eq!(parse_hex("", p, "hex", &mut w), None);
        assert_eq!(parse_int::<i32>("-1", p, "int", &mut w), Some(-1));
        assert_eq!(parse_int::<u32>("x", p, "an integer", &mut w), None);
        assert_eq!(w.len(), 3);
        assert_eq!(
            w.as_slice()[0].message,
            "value \"0xzz\" is not a hex id like 0x8086"
        );
    }

    #[test]
    fn fifos_sockets_and_devices_are_refused_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("meminfo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o644)).unwrap();
        // No writer: a blocking open would never return.
        let e = read_sysfs(&fifo, SYSFS_CAP).unwrap_err();
        assert_eq!(
            e.to_string(),
            "unreadable: a FIFO, not a regular file (expected a sysfs or procfs attribute)"
        );
        assert!(matches!(
            read_capped(&fifo, 10),
            Err(ReadFailure::NotRegular("a FIFO"))
        ));
        assert!(matches!(
            read_prefix(&fifo, 64),
            Err(ReadFailure::NotRegular("a FIFO"))
        ));
        let mut w = Warnings::new();
        assert_eq!(read_optional(&fifo, &mut w), None);
        assert!(w.as_slice()[0].message.contains("a FIFO"), "{w:?}");
        let mut w = Warnings::new();
        let d = SysDir::open(dir.path(), &mut w).unwrap();
        assert_eq!(d.read_optional("meminfo", &mut w), None);
        assert!(w.as_slice()[0].message.contains("a FIFO"), "{w:?}");
        // A device reached through a link: /dev/zero would never end.
        let zero = dir.path().join("size");
        std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();
        assert!(matches!(
            read_sysfs(&zero, SYSFS_CAP),
            Err(ReadFailure::NotRegular("a character device"))
        ));
        let sock = dir.path().join("sock");
        let _l = std::os::unix::net::UnixListener::bind(&sock).unwrap();
        assert!(read_sysfs(&sock, SYSFS_CAP).is_err());
    }
}
