//! `rtrackctl`: client of rtrackd's local API (see `rtrack::cli::rtrackctl`).

fn main() -> std::process::ExitCode {
    rtrack::cli::rtrackctl::main()
}
