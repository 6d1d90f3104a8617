//! Real Nova 34.0.0 for the interop and differential tests: the venv `scripts/nova-functional`
//! uses, `target/nova-functional-venv`, built from PyPI by `tests/interop/setup-nova-venv.sh` or
//! by `scripts/nova-functional`, whichever comes first (about two minutes the first time).

use std::path::PathBuf;
use std::process::Command;

/// The repository's root.
pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The Nova venv: `RTRACK_NOVA_VENV` (an existing venv holding nova 34.0.0), else
/// `target/nova-functional-venv`, set up when needed; None when `RTRACK_SKIP_NOVA` is set
/// (`test` names what is skipped). A venv that cannot be set up fails the test, naming how to skip it.
pub fn venv(test: &str) -> Option<PathBuf> {
    if std::env::var_os("RTRACK_SKIP_NOVA").is_some() {
        eprintln!("RTRACK_SKIP_NOVA is set: {test} skipped");
        return None;
    }
    if let Some(dir) = std::env::var_os("RTRACK_NOVA_VENV") {
        return Some(PathBuf::from(dir));
    }
    let venv = repo().join("target/nova-functional-venv");
    let script = repo().join("tests/interop/setup-nova-venv.sh");
    let out = Command::new(&script)
        .arg(&venv)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}; it needs bash", script.display()));
    assert!(
        out.status.success(),
        "setting up the Nova venv failed (RTRACK_SKIP_NOVA=1 skips {test}):\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Some(venv)
}
