//! The signals a job file names: a task's `kill_signal` and a template's
//! `change_signal`.

use super::keywords;

keywords! {
    /// The signal a task is stopped with (`kill_signal`), before SIGKILL
    /// once its `kill_timeout` has passed; Nomad's default is SIGTERM.
    pub enum KillSignal ("kill signal") {
        Term = "SIGTERM",
        Int = "SIGINT",
        Quit = "SIGQUIT",
        Hup = "SIGHUP",
        Usr1 = "SIGUSR1",
        Usr2 = "SIGUSR2",
        Abrt = "SIGABRT",
        Alrm = "SIGALRM",
        Winch = "SIGWINCH",
        Kill = "SIGKILL",
    }
}

impl KillSignal {
    /// The signal's number.
    pub fn number(self) -> i32 {
        match self {
            KillSignal::Term => libc::SIGTERM,
            KillSignal::Int => libc::SIGINT,
            KillSignal::Quit => libc::SIGQUIT,
            KillSignal::Hup => libc::SIGHUP,
            KillSignal::Usr1 => libc::SIGUSR1,
            KillSignal::Usr2 => libc::SIGUSR2,
            KillSignal::Abrt => libc::SIGABRT,
            KillSignal::Alrm => libc::SIGALRM,
            KillSignal::Winch => libc::SIGWINCH,
            KillSignal::Kill => libc::SIGKILL,
        }
    }
}
