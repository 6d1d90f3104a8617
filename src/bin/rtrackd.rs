//! `rtrackd`: the rtrack host agent (see `rtrack::cli::rtrackd`).
//! In: the command line and the configuration. Out: the daemon, or `--once`'s report.

fn main() -> std::process::ExitCode {
    rtrack::cli::rtrackd::main()
}
