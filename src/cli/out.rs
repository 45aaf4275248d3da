//! The CLI's standard output: one writer for every command, which treats
//! a closed pipe as the end of the output (`csi-agent validate ... | head
//! -1`). The command goes on and exits with its own code; what it would
//! have printed after the reader left is dropped. Rust ignores SIGPIPE, so
//! without this every `println!` into a closed pipe panicked (exit 101).

use std::fmt;
use std::io::{self, Write};
use std::sync::atomic::{AtomicBool, Ordering};

/// The reader of standard output went away.
static CLOSED: AtomicBool = AtomicBool::new(false);

/// Writes `args` to standard output; a closed pipe ends the output for
/// good, any other error is reported once on standard error.
pub fn write(args: fmt::Arguments<'_>) {
    if CLOSED.load(Ordering::Relaxed) {
        return;
    }
    let mut out = io::stdout().lock();
    if let Err(err) = out.write_fmt(args).and_then(|()| out.flush()) {
        CLOSED.store(true, Ordering::Relaxed);
        if err.kind() != io::ErrorKind::BrokenPipe {
            eprintln!("csi-agent: cannot write to standard output: {err}");
        }
    }
}

/// Whether the reader of standard output went away: a command that would
/// go on printing (`events -follow`) can stop.
pub fn closed() -> bool {
    CLOSED.load(Ordering::Relaxed)
}

/// Copies `from` to standard output, as [`write()`] does.
pub fn copy(from: &mut impl io::Read) -> io::Result<()> {
    if CLOSED.load(Ordering::Relaxed) {
        return Ok(());
    }
    let mut out = io::stdout().lock();
    match io::copy(from, &mut out).and_then(|_| out.flush()) {
        Err(err) if err.kind() == io::ErrorKind::BrokenPipe => {
            CLOSED.store(true, Ordering::Relaxed);
            Ok(())
        }
        other => other.map(drop),
    }
}

/// `println!` through [`write()`].
macro_rules! outln {
    () => {
        $crate::cli::out::write(format_args!("\n"))
    };
    ($($arg:tt)*) => {
        $crate::cli::out::write(format_args!("{}\n", format_args!($($arg)*)))
    };
}

/// `print!` through [`write()`].
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::cli::out::write(format_args!($($arg)*))
    };
}

pub(crate) use {out, outln};
