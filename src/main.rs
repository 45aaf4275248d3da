//! The `csi-agent` binary: argument dispatch only; see the library.

use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    // The agent's start helper, before anything else runs.
    if args.first().map(String::as_str) == Some(csi_agent::task::exec::helper::ARG) {
        csi_agent::task::exec::helper::main();
    }
    // The helper that runs alloc exec's command inside an exec task.
    if args.first().map(String::as_str) == Some(csi_agent::task::exec::enter::ARG) {
        csi_agent::task::exec::enter::main(&args);
    }
    // The helper that fetches a task's artifacts and renders its templates.
    if args.first().map(String::as_str) == Some(csi_agent::task::prepare::ARG) {
        csi_agent::task::prepare::main();
    }
    csi_agent::cli::main(args)
}
