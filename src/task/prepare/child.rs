//! The prepare helper's side: bounds itself, reads its input, fetches the
//! artifacts and renders the templates as the agent did on its starter
//! threads (`artifact/`, `templates.rs`), and answers. Whatever the input
//! does to this process (a stack overflow, an allocation past its address
//! space, a hang) ends this process only.

use std::io::{self, Read, Write};
use std::mem::ManuallyDrop;
use std::os::fd::FromRawFd;
use std::os::unix::net::UnixStream;

use super::wire::{self, Answer, Input, Phase, Work};
use crate::sys::process;
use crate::task::env::lookups;
use crate::task::{artifact, exec, templates};

/// The helper's first argument; `csi-agent` lists it nowhere.
pub const ARG: &str = "__prepare-task";

/// The helper's address space (`RLIMIT_AS`): its binary and libraries
/// take some 40 MiB of it, fetching and unpacking stream through small
/// buffers, and a template's text and values stay far below the rest.
pub const ADDRESS_SPACE: u64 = 1 << 30;

/// The helper's `main`: does the work read from stdin and exits 0 once it
/// has answered, or 1 with the reason on stderr (the task's log).
pub fn main() -> ! {
    if !exec::helper::stdin_is_socket() {
        eprintln!(
            "csi-agent: {ARG} is how the agent fetches a task's artifacts and renders its \
             templates: it reads them from the agent on its stdin and is not run by hand"
        );
        std::process::exit(2);
    }
    // What the artifact code warns of (a tar entry skipped) goes to the
    // task's stderr log, with the helper's other words; warnings only,
    // whatever the agent's `RUST_LOG`, so nothing more detailed does.
    let _ = env_logger::Builder::new()
        .filter_level(log::LevelFilter::Warn)
        .target(env_logger::Target::Stderr)
        .format(|out, record| crate::units::log_line(out, record))
        .try_init();
    match serve() {
        Ok(()) => std::process::exit(0),
        Err(line) => {
            eprintln!("csi-agent: {line}");
            std::process::exit(1);
        }
    }
}

fn serve() -> Result<(), String> {
    // Bounded before anything is read: what follows is someone else's.
    process::set_parent_death_signal(libc::SIGKILL)
        .map_err(|e| format!("cannot ask to end with the agent: {e}"))?;
    process::no_core_dumps().map_err(|e| format!("cannot turn off core dumps: {e}"))?;
    process::limit_address_space(ADDRESS_SPACE)
        .map_err(|e| format!("cannot bound the address space (RLIMIT_AS): {e}"))?;
    // SAFETY: fd 0 is the agent's socket (checked by `main`), open for
    // this process's whole life; the stream is never dropped, so it is
    // never closed before the process exits.
    let socket = ManuallyDrop::new(unsafe { UnixStream::from_raw_fd(0) });
    let mut bytes = Vec::new();
    (&*socket)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read the work from the agent: {e}"))?;
    let input = wire::decode_input(&bytes)
        .map_err(|e| format!("cannot read the work from the agent: {e}"))?;
    // Started by a thread of that agent, which may have ended before the
    // parent's death could be asked for.
    if process::parent_pid() != input.agent {
        return Err("the agent that asked for this work is gone".into());
    }
    let send = |answer: &Answer| (&*socket).write_all(&wire::encode_answer(answer));
    let answer = work(&input, &mut |phase| send(&Answer::Phase(phase)))
        .map_err(|e| format!("cannot answer the agent: {e}"))?;
    send(&answer).map_err(|e| format!("cannot answer the agent: {e}"))
}

/// Does `input`'s work, telling `begin` of each phase it begins; the
/// outcome, for the agent.
fn work(input: &Input, begin: &mut dyn FnMut(Phase) -> io::Result<()>) -> io::Result<Answer> {
    let task_dir = &input.task_dir;
    if input.work == Work::Rerender {
        begin(Phase::Templates)?;
        let answer = match templates::rerender(
            &input.templates,
            task_dir,
            &input.env,
            &input.node,
            &input.services,
        ) {
            Ok(changed) => Answer::Rerendered {
                changed: changed.into_iter().map(|i| i as u32).collect(),
            },
            Err(message) => Answer::Failed {
                phase: Phase::Templates,
                message,
            },
        };
        return Ok(answer);
    }
    if !input.artifacts.is_empty() {
        begin(Phase::Artifacts)?;
        let before = lookups(&input.env, &input.node);
        if let Err(message) = artifact::fetch_all(
            &input.artifacts,
            task_dir,
            &before,
            input.user,
            &input.limits,
        ) {
            return Ok(Answer::Failed {
                phase: Phase::Artifacts,
                message,
            });
        }
    }
    begin(Phase::Templates)?;
    let answer = match templates::render_all(
        &input.templates,
        task_dir,
        input.env.clone(),
        &input.node,
        &input.services,
    ) {
        Ok((env, sizes)) => Answer::Started {
            env,
            sizes: sizes.into_iter().map(|n| n as u64).collect(),
        },
        Err(message) => Answer::Failed {
            phase: Phase::Templates,
            message,
        },
    };
    Ok(answer)
}
