//! `rtrackd`: the rtrack host agent (see `rtrack::cli::rtrackd`).

fn main() -> std::process::ExitCode {
    rtrack::cli::rtrackd::main()
}
