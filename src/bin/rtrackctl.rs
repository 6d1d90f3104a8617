//! `rtrackctl`: client of rtrackd's local API (see `rtrack::cli::rtrackctl`).
//! In: the command line. Out: requests to the socket, the answers printed, an exit code.

fn main() -> std::process::ExitCode {
    rtrack::cli::rtrackctl::main()
}
