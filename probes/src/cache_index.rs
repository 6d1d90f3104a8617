//! One `index<M>` directory of a CPU's `cache` directory, for the cache probe
//! ([`crate::cache`]): its level, and for a cache of level 2 or above its type, the CPUs
//! sharing it, its id and its size.

use std::path::{Path, PathBuf};

use crate::cpulist::CpuSet;
use crate::read::{parse_int, quoted, SysDir, Warnings};

/// A cache of level 2 or above as one `index<M>` says, before instances are merged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CacheRead {
    pub(crate) level: u32,
    pub(crate) kind: String,
    pub(crate) cpus: CpuSet,
    pub(crate) id: Option<u64>,
}

/// One `index<M>` of a CPU's listed `cache` directory, whose files are read relative to it.
pub(crate) struct Index<'a> {
    pub(crate) cache: &'a SysDir,
    pub(crate) name: &'a str,
}

impl Index<'_> {
    /// Reads `index<M>/<file>` like [`SysDir::read_optional`].
    fn read_optional(&self, file: &str, w: &mut Warnings) -> Option<String> {
        self.cache
            .read_optional(&format!("{}/{file}", self.name), w)
    }

    /// Path of `index<M>/<file>`, for messages.
    fn join(&self, file: &str) -> PathBuf {
        self.cache.join(self.name).join(file)
    }

    /// Path of `index<M>`, for messages.
    fn path(&self) -> PathBuf {
        self.cache.join(self.name)
    }
}

/// The type, CPUs and id of a cache of level 2 or above; `None`, with a warning, when its CPUs
/// cannot be read.
pub(crate) fn read_cache(
    d: &Index<'_>,
    cpu: u32,
    level: u32,
    kind: Option<String>,
    online: &CpuSet,
    w: &mut Warnings,
) -> Option<CacheRead> {
    // The type, unless the caller has read it already.
    let kind = kind.unwrap_or_else(|| read_kind(d, w));
    let mut cpus = read_shared(d, w)?.intersection(online);
    if !cpus.contains(cpu) {
        if !cpus.is_empty() {
            w.push(
                &d.join("shared_cpu_list"),
                format!("CPUs {cpus} sharing the cache do not include CPU {cpu} itself"),
            );
        }
        cpus.insert(cpu);
    }
    let id = d
        .read_optional("id", w)
        .and_then(|raw| parse_int(&raw, &d.join("id"), "a cache id", w));
    Some(CacheRead {
        level,
        kind,
        cpus,
        id,
    })
}

/// `index<M>/type`: `Unified`, `Data` or `Instruction`; missing or another value is taken as
/// Unified (as hwloc does), the latter with a warning.
pub(crate) fn read_kind(d: &Index<'_>, w: &mut Warnings) -> String {
    match d.read_optional("type", w) {
        Some(t) if ["Unified", "Data", "Instruction"].contains(&t.as_str()) => t,
        Some(t) => {
            w.push(
                &d.join("type"),
                format!(
                    "value {} is not Unified, Data or Instruction: taken as Unified (as hwloc does)",
                    quoted(&t)
                ),
            );
            "Unified".to_string()
        }
        None => "Unified".to_string(),
    }
}

/// `index<M>/level`, read without opening `index<M>`; `None`, with a warning, when it is
/// missing or not a level. When it cannot be read, `index<M>` is opened as a directory after
/// all, so that an odd one (a file, a dangling link, unreadable) is skipped and warned about
/// as such rather than as a missing `level`.
pub(crate) fn read_level(d: &Index<'_>, w: &mut Warnings) -> Option<u32> {
    let mut level_w = Warnings::new();
    let raw = d.read_optional("level", &mut level_w);
    if raw.is_none() {
        SysDir::open_unlisted(&d.path(), w)?;
    }
    w.extend(level_w);
    let Some(raw) = raw else {
        w.push(
            &d.join("level"),
            "file is missing: cache level unknown, cache skipped",
        );
        return None;
    };
    parse_int(&raw, &d.join("level"), "a cache level: cache skipped", w)
}

/// `shared_cpu_list`, else `shared_cpu_map`; a warning and `None` when neither is readable.
fn read_shared(d: &Index<'_>, w: &mut Warnings) -> Option<CpuSet> {
    type Parser = fn(&str) -> Result<CpuSet, String>;
    let sources: [(&str, Parser); 2] = [
        ("shared_cpu_list", CpuSet::parse_list),
        ("shared_cpu_map", CpuSet::parse_map),
    ];
    for (name, parse) in sources {
        let Some(raw) = d.read_optional(name, w) else {
            continue;
        };
        match parse(&raw) {
            Ok(s) => return Some(s),
            Err(e) => w.push(&d.join(name), format!("not a CPU set: {e}")),
        }
    }
    w.push(
        &d.path(),
        "neither shared_cpu_list nor shared_cpu_map is readable: cache skipped",
    );
    None
}

/// `size` in KiB (`32768K`; `M` and a bare number are taken too), with a warning when it is
/// missing or not a size.
pub(crate) fn read_size(dir: &Path, w: &mut Warnings) -> Option<u64> {
    let path = dir.join("size");
    let Some(raw) = crate::read::read_optional(&path, w) else {
        w.push(&path, "file is missing: cache size unknown");
        return None;
    };
    match parse_size_kb(&raw) {
        Some(kb) => Some(kb),
        None => {
            w.push(
                &path,
                format!("value {} is not a size like 32768K", quoted(&raw)),
            );
            None
        }
    }
}

/// `32768K` -> 32768; `32M` -> 32768; `1024` -> 1024 (KiB, as the kernel means it).
pub fn parse_size_kb(raw: &str) -> Option<u64> {
    let raw = raw.trim();
    let (digits, scale) = match raw.as_bytes().last()? {
        b'K' | b'k' => (&raw[..raw.len() - 1], 1),
        b'M' | b'm' => (&raw[..raw.len() - 1], 1024),
        _ => (raw, 1),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse::<u64>().ok()?.checked_mul(scale)
}
