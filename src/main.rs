//! The `csi-agent` binary: argument dispatch only; see the library.

use std::process::ExitCode;

fn main() -> ExitCode {
    csi_agent::cli::main(std::env::args().skip(1).collect())
}
