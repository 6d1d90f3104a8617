//! Compiles the PCI ID database (`data/pci.ids`) into tables of plain integers beside one string
//! holding every name. Nothing in them is a pointer, so the loader relocates nothing: a table of
//! `&'static str` is rewritten at every start, and each page of it becomes memory the daemon
//! keeps (1.3 MB for pci.ids).
//!
//! Only the entries rtrack names are kept: vendors, devices, classes and subclasses (not
//! subsystems or programming interfaces).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// One table: (key, offset of the name in `names`, its length), sorted by key.
type Table = Vec<(u32, u32, u32)>;

#[derive(Default)]
struct Db {
    names: String,
    vendors: Table,
    devices: Table,
    classes: Table,
    subclasses: Table,
}

/// Where the parser is: under which vendor or class (its id) the indented lines belong.
enum Section {
    None,
    Vendor(u32),
    Class(u32),
}

fn main() -> Result<(), String> {
    let source = Path::new("data/pci.ids");
    println!("cargo:rerun-if-changed={}", source.display());
    println!("cargo:rerun-if-changed=build.rs");
    let text = std::fs::read_to_string(source).map_err(|e| format!("{}: {e}", source.display()))?;
    let db = parse(&text).map_err(|e| format!("{}: {e}", source.display()))?;
    let out_dir = std::env::var_os("OUT_DIR").ok_or("OUT_DIR is not set")?;
    let out = PathBuf::from(out_dir).join("pci_names.rs");
    std::fs::write(&out, render(db)).map_err(|e| format!("{}: {e}", out.display()))
}

fn parse(text: &str) -> Result<Db, String> {
    let mut db = Db::default();
    let mut section = Section::None;
    for (n, line) in text.lines().enumerate() {
        if line.trim().is_empty() || line.starts_with('#') {
            continue;
        }
        let depth = line.bytes().take_while(|b| *b == b'\t').count();
        let entry = line.get(depth..).unwrap_or_default();
        let bad = |expected: &str| format!("line {}: {line:?}: expected {expected}", n + 1);
        let class_line = entry.strip_prefix("C ").filter(|_| depth == 0);
        match (depth, class_line, &section) {
            (0, Some(class_line), _) => {
                let (class, name) = entry_of(class_line, 2).ok_or_else(|| bad("C cc  name"))?;
                add(&mut db.names, &mut db.classes, class, name);
                section = Section::Class(class);
            }
            (0, None, _) => {
                let (vendor, name) = entry_of(entry, 4).ok_or_else(|| bad("vvvv  name"))?;
                add(&mut db.names, &mut db.vendors, vendor, name);
                section = Section::Vendor(vendor);
            }
            (1, _, Section::Vendor(vendor)) => {
                let (device, name) = entry_of(entry, 4).ok_or_else(|| bad("\\tdddd  name"))?;
                add(&mut db.names, &mut db.devices, vendor << 16 | device, name);
            }
            (1, _, Section::Class(class)) => {
                let (sub, name) = entry_of(entry, 2).ok_or_else(|| bad("\\tss  name"))?;
                add(&mut db.names, &mut db.subclasses, class << 8 | sub, name);
            }
            // Subsystems and programming interfaces: not named by rtrack.
            (2, _, Section::Vendor(_) | Section::Class(_)) => {}
            _ => return Err(bad("an entry under a vendor or a class")),
        }
    }
    for table in [
        &mut db.vendors,
        &mut db.devices,
        &mut db.classes,
        &mut db.subclasses,
    ] {
        // Stable: of two entries with one key, the first in the file stays.
        table.sort_by_key(|e| e.0);
        table.dedup_by_key(|e| e.0);
    }
    Ok(db)
}

/// `digits` hex digits, two spaces, a name.
fn entry_of(entry: &str, digits: usize) -> Option<(u32, &str)> {
    let id = entry.get(..digits)?;
    let name = entry.get(digits..)?.strip_prefix("  ")?.trim_end();
    if !id.bytes().all(|b| b.is_ascii_hexdigit()) || name.is_empty() {
        return None;
    }
    Some((u32::from_str_radix(id, 16).ok()?, name))
}

fn add(names: &mut String, table: &mut Table, key: u32, name: &str) {
    table.push((key, names.len() as u32, name.len() as u32));
    names.push_str(name);
}

fn render(db: Db) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "/// Every name, one after another.");
    let _ = writeln!(out, "static NAMES: &str = {:?};", db.names);
    for (what, table) in [
        ("VENDORS", db.vendors),
        ("DEVICES", db.devices),
        ("CLASSES", db.classes),
        ("SUBCLASSES", db.subclasses),
    ] {
        let _ = writeln!(out, "/// (key, offset in NAMES, length), sorted by key.");
        let _ = write!(out, "static {what}: [(u32, u32, u32); {}] = [", table.len());
        for (key, offset, len) in table {
            let _ = write!(out, "({key},{offset},{len}),");
        }
        let _ = writeln!(out, "];");
    }
    out
}
