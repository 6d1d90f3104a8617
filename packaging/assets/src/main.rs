//! `rtrack-gen-assets OUTDIR`: rtrack's man pages and shell completions, generated from the
//! clap definitions of the two binaries (`rtrack::cli::rtrackd::Cli`,
//! `rtrack::cli::rtrackctl::Cli`), so they never disagree with `--help`:
//!
//! - `OUTDIR/man/rtrackd.8` (section 8: a daemon) and `OUTDIR/man/rtrackctl.1`, plus one page
//!   per rtrackctl command (`rtrackctl-claim.1`, ...), which rtrackctl.1 refers to;
//! - `OUTDIR/completions/{rtrackd,rtrackctl}.{bash,zsh,fish}`.
//!
//! `scripts/build-deb.sh` runs it into `target/assets`, where `[package.metadata.deb]` in the
//! root `Cargo.toml` picks the files up (cargo-deb gzips the man pages).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::CommandFactory;
use clap_complete::Shell;
use clap_mangen::roff::{bold, italic, roman, Roff};
use clap_mangen::Man;

/// One binary: its command line and what its man page says beyond the options.
struct Binary {
    name: &'static str,
    section: &'static str,
    manual: &'static str,
    command: clap::Command,
    about: &'static str,
    description: &'static str,
    extra: fn(&mut Roff),
}

/// What the man pages say in NAME and DESCRIPTION. The clap definitions' `about` is the crate
/// description, shared by both binaries, so the pages set their own.
const RTRACKD_ABOUT: &str = "rtrack host agent: the resource tracker of a compute host";
const RTRACKD_DESCRIPTION: &str = "\
rtrackd probes the host through sysfs and procfs (CPUs, NUMA nodes, memory and hugepages, \
instance disk, PCI devices with SR-IOV PF/VF links), tracks the claims of instances and \
migrations against that inventory with Nova's rules, serves them on a local Unix socket \
(rtrackctl is its client) and reports the inventory to OpenStack Placement.

Without --once or --check-config it runs as a daemon, normally as the systemd service \
rtrackd.service: it audits the host every [audit] interval_s seconds, reloads its \
configuration on SIGHUP and drains on SIGTERM. With --once it probes once, prints the \
inventory and exits; with --check-config it checks the configuration file and exits.";
const RTRACKCTL_ABOUT: &str = "client of rtrackd, the rtrack host agent";
const RTRACKCTL_DESCRIPTION: &str = "\
rtrackctl talks to rtrackd over its Unix socket: claims, migrations, usage and inventory of \
this host. It prints human tables by default and rtrackd's JSON with --json. Root and the \
members of the group rtrack may use the socket. Each command has its own page, listed \
under SUBCOMMANDS.";

fn binaries() -> [Binary; 2] {
    [
        Binary {
            name: "rtrackd",
            section: "8",
            manual: "System Administration",
            command: rtrack::cli::rtrackd::Cli::command(),
            about: RTRACKD_ABOUT,
            description: RTRACKD_DESCRIPTION,
            extra: rtrackd_sections,
        },
        Binary {
            name: "rtrackctl",
            section: "1",
            manual: "User Commands",
            command: rtrack::cli::rtrackctl::Cli::command(),
            about: RTRACKCTL_ABOUT,
            description: RTRACKCTL_DESCRIPTION,
            extra: rtrackctl_sections,
        },
    ]
}

/// A `.TP` entry: a bold term and its text.
fn item(roff: &mut Roff, term: &str, text: &str) {
    roff.control("TP", [])
        .text([bold(term)])
        .text([roman(text)]);
}

fn rtrackd_sections(roff: &mut Roff) {
    roff.control("SH", ["SIGNALS"]);
    item(
        roff,
        "SIGHUP",
        "Read the configuration file again. If it is valid, the keys that can change live \
         ([resources], [pci], [audit], log.level, api.socket_group) are put in force and the log \
         says which changed keys need a restart; if it is not, the old configuration stays.",
    );
    item(
        roff,
        "SIGTERM, SIGINT",
        "Stop taking requests, let the ones in flight finish (at most about 5 seconds), flush \
         the store and exit 0.",
    );
    roff.control("SH", ["ENVIRONMENT"]);
    item(
        roff,
        "STATE_DIRECTORY",
        "State directory when the configuration and --state-dir name none (set by systemd from \
         StateDirectory=).",
    );
    item(
        roff,
        "RUNTIME_DIRECTORY",
        "The API socket is RUNTIME_DIRECTORY/rtrack.sock when [api] socket is not set (set by \
         systemd from RuntimeDirectory=).",
    );
    item(
        roff,
        "NOTIFY_SOCKET, WATCHDOG_USEC",
        "Set by systemd for Type=notify and WatchdogSec=: rtrackd reports READY after the first \
         audit when the socket listens, and pings the watchdog while its tracker answers.",
    );
    item(
        roff,
        "RTRACK_LOG",
        "Log filter that wins over [log] level, e.g. info,rtrack::upstream=debug.",
    );
    roff.control("SH", ["FILES"]);
    item(
        roff,
        "/etc/rtrack/rtrack.toml",
        "Configuration, read when present. The packaged copy documents every key with its \
         default.",
    );
    item(
        roff,
        "/var/lib/rtrack/",
        "State: the compute node uuid (compute_id) and the SQLite database of claims \
         (rtrack.db).",
    );
    item(
        roff,
        "/run/rtrack/rtrack.sock",
        "The local API socket, mode 0660, group rtrack.",
    );
    roff.control("SH", ["EXIT STATUS"]);
    item(roff, "0", "Done, or the daemon stopped on SIGTERM.");
    item(
        roff,
        "1",
        "Error: bad configuration, unusable probe root, or Placement refused the report of \
         --once --report.",
    );
    item(roff, "2", "Usage error.");
    roff.control("SH", ["SEE ALSO"]);
    roff.text([
        bold("rtrackctl"),
        roman("(1), "),
        bold("systemctl"),
        roman("(1), "),
        bold("systemd.exec"),
        roman("(5)"),
    ]);
}

fn rtrackctl_sections(roff: &mut Roff) {
    roff.control("SH", ["ENVIRONMENT"]);
    item(
        roff,
        "RTRACK_SOCKET",
        "rtrackd's socket when --socket is not given.",
    );
    roff.control("SH", ["FILES"]);
    item(
        roff,
        "/run/rtrack/rtrack.sock",
        "rtrackd's socket (default). Root and members of the group rtrack may use it.",
    );
    roff.control("SH", ["EXIT STATUS"]);
    item(roff, "0", "Done.");
    item(
        roff,
        "1",
        "Any other error: rtrackd unreachable, not found, store failure.",
    );
    item(
        roff,
        "2",
        "Usage error: bad flags, an unreadable --file, or rtrackd found the request malformed.",
    );
    item(
        roff,
        "3",
        "Claim refused (or would be, with --dry-run): the reason on standard error, or the \
         error document on standard output with --json.",
    );
    roff.control("SH", ["SEE ALSO"]);
    roff.text([
        bold("rtrackd"),
        roman("(8); "),
        italic("rtrackctl COMMAND --help"),
        roman(" for the options of each command."),
    ]);
}

/// Writes `bytes` to `path`, naming the path in the error.
fn write(path: &Path, bytes: &[u8]) -> Result<(), String> {
    std::fs::write(path, bytes).map_err(|e| format!("{}: cannot write: {e}", path.display()))
}

fn create_dir(path: &Path) -> Result<(), String> {
    std::fs::create_dir_all(path)
        .map_err(|e| format!("{}: cannot create the directory: {e}", path.display()))
}

/// The command as its man pages show it: its own NAME and DESCRIPTION text, and no `help`
/// subcommand (`--help` is there; a page for `help` would say nothing more).
fn man_command(b: &Binary) -> clap::Command {
    let mut cmd = b
        .command
        .clone()
        .about(b.about)
        .long_about(b.description)
        .disable_help_subcommand(true);
    cmd.build();
    cmd
}

/// A man page: clap's sections (NAME, SYNOPSIS, DESCRIPTION, OPTIONS, SUBCOMMANDS, VERSION),
/// then `extra`.
fn man_page(
    cmd: clap::Command,
    section: &str,
    manual: &str,
    extra: &Roff,
) -> Result<Vec<u8>, String> {
    let name = cmd
        .get_display_name()
        .unwrap_or_else(|| cmd.get_name())
        .to_string();
    let version = cmd.get_version().unwrap_or_default().to_string();
    let man = Man::new(cmd)
        .title(name.to_ascii_uppercase())
        .section(section)
        .source(format!("rtrack {version}"))
        .manual(manual);
    let mut page = Vec::new();
    man.render(&mut page)
        .map_err(|e| format!("{name}: cannot render the man page: {e}"))?;
    // `render` already wrote roff's preamble (the apostrophe string), so no second one here;
    // the extra text has no apostrophes to escape.
    page.extend_from_slice(extra.to_roff().as_bytes());
    Ok(page)
}

/// The page of each subcommand (`rtrackctl-claim.1`, ...), which the main page's SUBCOMMANDS
/// section names.
fn subcommand_pages(b: &Binary, cmd: &clap::Command) -> Result<Vec<(String, Vec<u8>)>, String> {
    let mut see_also = Roff::new();
    see_also.control("SH", ["SEE ALSO"]);
    see_also.text([bold(b.name), roman(format!("({})", b.section))]);
    let mut pages = Vec::new();
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        let name = sub
            .get_display_name()
            .unwrap_or_else(|| sub.get_name())
            .to_string();
        let page = man_page(sub.clone(), b.section, b.manual, &see_also)?;
        pages.push((format!("{name}.{}", b.section), page));
    }
    Ok(pages)
}

fn completion(b: &Binary, shell: Shell) -> Vec<u8> {
    let mut cmd = b.command.clone();
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut cmd, b.name, &mut out);
    out
}

/// Writes every asset under `out`; returns the files written.
fn generate(out: &Path) -> Result<Vec<PathBuf>, String> {
    let man_dir = out.join("man");
    let completion_dir = out.join("completions");
    create_dir(&man_dir)?;
    create_dir(&completion_dir)?;
    let mut written = Vec::new();
    for b in binaries() {
        let cmd = man_command(&b);
        let mut extra = Roff::new();
        (b.extra)(&mut extra);
        let mut pages = vec![(
            format!("{}.{}", b.name, b.section),
            man_page(cmd.clone(), b.section, b.manual, &extra)?,
        )];
        pages.extend(subcommand_pages(&b, &cmd)?);
        for (file, page) in pages {
            let path = man_dir.join(file);
            write(&path, &page)?;
            written.push(path);
        }
        for (shell, ext) in [
            (Shell::Bash, "bash"),
            (Shell::Zsh, "zsh"),
            (Shell::Fish, "fish"),
        ] {
            let path = completion_dir.join(format!("{}.{ext}", b.name));
            write(&path, &completion(&b, shell))?;
            written.push(path);
        }
    }
    Ok(written)
}

fn main() -> ExitCode {
    let args: Vec<_> = std::env::args_os().skip(1).collect();
    let [out] = args.as_slice() else {
        eprintln!("usage: rtrack-gen-assets OUTDIR");
        eprintln!("writes OUTDIR/man/rtrackd.8, OUTDIR/man/rtrackctl.1, OUTDIR/man/rtrackctl-COMMAND.1 and OUTDIR/completions/{{rtrackd,rtrackctl}}.{{bash,zsh,fish}}");
        return ExitCode::from(2);
    };
    match generate(Path::new(out)) {
        Ok(files) => {
            for f in files {
                println!("{}", f.display());
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("rtrack-gen-assets: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_every_page_and_completion() {
        let dir = tempfile::tempdir().unwrap();
        let files = generate(dir.path()).unwrap();
        let names: Vec<String> = files
            .iter()
            .map(|f| {
                f.strip_prefix(dir.path())
                    .unwrap()
                    .to_string_lossy()
                    .into_owned()
            })
            .collect();
        for name in [
            "man/rtrackd.8",
            "man/rtrackctl.1",
            "man/rtrackctl-claim.1",
            "completions/rtrackd.bash",
            "completions/rtrackd.zsh",
            "completions/rtrackd.fish",
            "completions/rtrackctl.bash",
            "completions/rtrackctl.zsh",
            "completions/rtrackctl.fish",
        ] {
            assert!(names.iter().any(|n| n == name), "{name} not in {names:?}");
        }
        // Every command rtrackctl.1 names has its page; `help` has none and is not named.
        let c = std::fs::read_to_string(dir.path().join("man/rtrackctl.1")).unwrap();
        let commands = rtrack::cli::rtrackctl::Cli::command();
        for sub in commands.get_subcommands() {
            let page = format!("man/rtrackctl-{}.1", sub.get_name());
            assert!(names.contains(&page), "{page} missing");
            assert!(
                c.contains(&format!(
                    "rtrackctl\\-{}(1)",
                    sub.get_name().replace('-', "\\-")
                )),
                "{c}"
            );
        }
        assert!(!c.contains("rtrackctl\\-help"), "{c}");
        assert!(c.contains(".TH RTRACKCTL 1 "), "{c}");
        assert!(c.contains("client of rtrackd"), "{c}");
        let claim = std::fs::read_to_string(dir.path().join("man/rtrackctl-claim.1")).unwrap();
        assert!(
            claim.contains(".TH RTRACKCTL\\-CLAIM 1 ") || claim.contains(".TH RTRACKCTL-CLAIM 1 "),
            "{claim}"
        );
        assert!(claim.contains("\\-\\-dry\\-run"), "{claim}");
        let d = std::fs::read_to_string(dir.path().join("man/rtrackd.8")).unwrap();
        assert!(d.contains(".TH RTRACKD 8 "), "{d}");
        assert!(d.contains("\\-\\-check\\-config"), "{d}");
        assert!(d.contains(".SH SIGNALS"), "{d}");
        let bash = std::fs::read_to_string(dir.path().join("completions/rtrackctl.bash")).unwrap();
        assert!(bash.contains("complete -F _rtrackctl"), "{bash}");
        let fish = std::fs::read_to_string(dir.path().join("completions/rtrackd.fish")).unwrap();
        assert!(fish.contains("complete -c rtrackd"), "{fish}");
    }

    #[test]
    fn an_unwritable_outdir_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("not-a-dir");
        std::fs::write(&file, "x").unwrap();
        let e = generate(&file).unwrap_err();
        assert!(e.contains("not-a-dir"), "{e}");
    }
}
