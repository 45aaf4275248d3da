//! `csi-agent alloc exec`: a command in a running task, its stdin, stdout
//! and stderr streamed over the control API (`AllocExec`), as Nomad's
//! `alloc exec`: `-i` (stdin, on by default), `-t` (a TTY, on by default
//! when stdin and stdout are terminals: this terminal goes raw, and its
//! size goes along at the start and on each SIGWINCH), and the command's
//! exit code as this process's, with nothing printed of its own.
//!
//! Flags come before the alloc ID: everything after it is the command.

use std::io::{self, Read, Write};
use std::os::fd::AsFd;
use std::thread;

use crossbeam_channel::{unbounded, Sender};
use futures_util::{SinkExt as _, StreamExt as _};
use grpcio::WriteFlags;

use super::args::UsageError;
use super::CliError;
use crate::api::client::{resolve_address, AgentClient};
use crate::grpc::block_on;
use crate::proto::agent as api;
use crate::sys::tty;

pub const USAGE: &str = "\
usage: csi-agent alloc exec [-task TASK] [-i=BOOL] [-t=BOOL] [-address ADDR] ALLOC COMMAND [ARGS...]

  Runs COMMAND in a running task of an allocation: in an exec task's
  root, namespaces and control groups, as the task's user; in a raw_exec
  task's environment and working dir; in a docker task's container, as
  docker exec runs it. -task names the task (needed when
  the alloc has more than one). -i passes stdin (default true); -t gives
  the command a TTY (default: when stdin and stdout are terminals; needs
  -i). Exits with the command's exit code (126: it cannot be run, 127:
  not found).";

/// What the command line asks for.
#[derive(Debug, PartialEq, Eq)]
struct Options {
    task: String,
    stdin: bool,
    tty: Option<bool>,
    address: Option<String>,
    alloc: String,
    command: Vec<String>,
}

fn parse(argv: &[String]) -> Result<Options, UsageError> {
    let mut options = Options {
        task: String::new(),
        stdin: true,
        tty: None,
        address: None,
        alloc: String::new(),
        command: Vec::new(),
    };
    let mut rest = argv.iter();
    while let Some(arg) = rest.next() {
        if arg == "--" {
            let Some(alloc) = rest.next() else { break };
            options.alloc = alloc.clone();
            break;
        }
        let Some(flag) = arg.strip_prefix("--").or_else(|| arg.strip_prefix('-')) else {
            options.alloc = arg.clone();
            break;
        };
        let (name, value) = match flag.split_once('=') {
            Some((name, value)) => (name, Some(value.to_string())),
            None => (flag, None),
        };
        let boolean = |value: Option<String>| match value.as_deref() {
            None | Some("true") | Some("1") => Ok(true),
            Some("false") | Some("0") => Ok(false),
            Some(other) => Err(UsageError::new(format!(
                "-{name} takes true or false, not {other:?}"
            ))),
        };
        let mut text = |value: Option<String>| match value {
            Some(value) => Ok(value),
            None => rest
                .next()
                .cloned()
                .ok_or_else(|| UsageError::new(format!("-{name} needs a value"))),
        };
        match name {
            "task" => options.task = text(value)?,
            "address" => options.address = Some(text(value)?),
            "i" => options.stdin = boolean(value)?,
            "t" => options.tty = Some(boolean(value)?),
            _ => return Err(UsageError::new(format!("unknown flag -{name}"))),
        }
    }
    options.command = rest.cloned().collect();
    if options.alloc.is_empty() {
        return Err(UsageError::new("missing the ALLOC ID"));
    }
    if options.command.is_empty() {
        return Err(UsageError::new("missing the COMMAND"));
    }
    Ok(options)
}

/// Whether `-h` is among the flags before the alloc ID (after it, it is
/// the command's).
pub fn wants_help(argv: &[String]) -> bool {
    let mut rest = argv.iter();
    while let Some(arg) = rest.next() {
        match arg.as_str() {
            "-h" | "-help" | "--help" => return true,
            "-task" | "--task" | "-address" | "--address" => {
                rest.next();
            }
            "--" => return false,
            flag if flag.starts_with('-') => {}
            _ => return false,
        }
    }
    false
}

fn size(rows: u16, cols: u16) -> api::TerminalSize {
    api::TerminalSize {
        rows: u32::from(rows),
        cols: u32::from(cols),
        ..Default::default()
    }
}

/// This terminal's size: stdout's, else stdin's.
fn terminal_size() -> Option<(u16, u16)> {
    tty::window_size(io::stdout().as_fd()).or_else(|| tty::window_size(io::stdin().as_fd()))
}

pub fn run(argv: &[String]) -> Result<(), CliError> {
    let options = parse(argv)?;
    let is_terminal =
        tty::is_terminal(io::stdin().as_fd()) && tty::is_terminal(io::stdout().as_fd());
    let with_tty = options.tty.unwrap_or(is_terminal);
    if with_tty && !options.stdin {
        return Err(UsageError::new("-i must be enabled if running with tty").into());
    }
    let client = AgentClient::connect(&resolve_address(options.address.as_deref())?)?;
    let (mut sender, mut receiver) = client.alloc_exec()?;
    let (rows, cols) = terminal_size().unwrap_or((24, 80));
    let start = api::AllocExecInput {
        start: protobuf::MessageField::some(api::AllocExecStart {
            alloc_id: options.alloc.clone(),
            task: options.task.clone(),
            command: options.command.clone(),
            tty: with_tty,
            size: protobuf::MessageField::some(size(rows, cols)),
            ..Default::default()
        }),
        stdin_closed: !options.stdin,
        ..Default::default()
    };
    block_on(sender.send((start, WriteFlags::default())))
        .map_err(|err| client.stream_error(err))?;
    let (inputs, to_send) = unbounded::<api::AllocExecInput>();
    thread::Builder::new()
        .name("exec-send".into())
        .spawn(move || {
            for input in to_send {
                if block_on(sender.send((input, WriteFlags::default()))).is_err() {
                    return;
                }
            }
        })
        .map_err(|err| CliError::Io {
            what: "cannot start the thread that sends stdin".into(),
            err,
        })?;
    if options.stdin {
        forward_stdin(inputs.clone());
    }
    if with_tty {
        forward_resizes(inputs.clone());
    }
    // Raw only once the call is on its way; restored before exiting.
    let raw = if with_tty && tty::is_terminal(io::stdin().as_fd()) {
        tty::RawMode::enter(io::stdin().as_fd()).ok()
    } else {
        None
    };
    let outcome = (|| {
        let mut stdout = io::stdout().lock();
        let mut stderr = io::stderr().lock();
        loop {
            match block_on(receiver.next()) {
                Some(Ok(out)) => {
                    if !out.stdout.is_empty() {
                        let _ = stdout.write_all(&out.stdout);
                        let _ = stdout.flush();
                    }
                    if !out.stderr.is_empty() {
                        let _ = stderr.write_all(&out.stderr);
                        let _ = stderr.flush();
                    }
                    if out.exited {
                        return Ok(out.exit_code);
                    }
                }
                Some(Err(err)) => return Err(CliError::Api(client.stream_error(err))),
                None => {
                    return Err(CliError::Io {
                        what: "the agent ended alloc exec without the command's exit code".into(),
                        err: io::ErrorKind::UnexpectedEof.into(),
                    })
                }
            }
        }
    })();
    drop(raw);
    drop(inputs);
    let code = outcome?;
    std::process::exit(code);
}

/// Sends stdin as it comes, then its end.
fn forward_stdin(inputs: Sender<api::AllocExecInput>) {
    let spawned = thread::Builder::new()
        .name("exec-stdin".into())
        .spawn(move || {
            let mut stdin = io::stdin().lock();
            let mut buf = vec![0u8; 32 * 1024];
            loop {
                let input = match stdin.read(&mut buf) {
                    Ok(0) | Err(_) => api::AllocExecInput {
                        stdin_closed: true,
                        ..Default::default()
                    },
                    Ok(n) => api::AllocExecInput {
                        stdin: buf[..n].to_vec(),
                        ..Default::default()
                    },
                };
                let closed = input.stdin_closed;
                if inputs.send(input).is_err() || closed {
                    return;
                }
            }
        });
    if let Err(err) = spawned {
        log::warn!("stdin is not passed on: {err}");
    }
}

/// Sends this terminal's size each time it changes (SIGWINCH).
fn forward_resizes(inputs: Sender<api::AllocExecInput>) {
    let mut signals = match signal_hook::iterator::Signals::new([libc::SIGWINCH]) {
        Ok(signals) => signals,
        Err(err) => {
            log::warn!("window size changes are not passed on: {err}");
            return;
        }
    };
    let spawned = thread::Builder::new()
        .name("exec-winch".into())
        .spawn(move || {
            for _ in signals.forever() {
                let Some((rows, cols)) = terminal_size() else {
                    continue;
                };
                let input = api::AllocExecInput {
                    resize: protobuf::MessageField::some(size(rows, cols)),
                    ..Default::default()
                };
                if inputs.send(input).is_err() {
                    return;
                }
            }
        });
    if let Err(err) = spawned {
        log::warn!("window size changes are not passed on: {err}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(text: &str) -> Vec<String> {
        text.split_whitespace().map(str::to_string).collect()
    }

    #[test]
    fn flags_stop_at_the_alloc_and_the_command_keeps_its_own() {
        let options = parse(&args("-task web -t=false ab12 ls -la -task x")).unwrap();
        assert_eq!(options.task, "web");
        assert_eq!(options.tty, Some(false));
        assert!(options.stdin);
        assert_eq!(options.alloc, "ab12");
        assert_eq!(options.command, args("ls -la -task x"));
        let options = parse(&args("-i=false -- -odd sh")).unwrap();
        assert!(!options.stdin);
        assert_eq!(options.alloc, "-odd");
        assert!(parse(&args("ab12")).is_err());
        assert!(parse(&args("-bogus ab12 sh")).is_err());
        assert!(parse(&args("-t=maybe ab12 sh")).is_err());
        assert!(wants_help(&args("-task web -h")));
        assert!(!wants_help(&args("-task -h ab12 ls")));
        assert!(!wants_help(&args("ab12 ls -h")));
    }
}
