//! The exit record: the file in which the process the agent tracks for an
//! `exec` or `raw_exec` task writes the task's exit status before it ends
//! ([`super::pid_ns`] writes it, with system calls only), so that an
//! agent that was killed while the task ended still knows how it ended.
//!
//! It lives beside the task's pid file, `<alloc dir>/<task>.exit`, out of
//! the task's root, and holds `<pid> <wait status>\n`: the pid of the
//! process that wrote it, which the reader matches against the pid it
//! tracks. [`spawn`](super::spawn) removes it before each start, so a
//! record is always this start's.

use std::fs;
use std::io;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;

/// The exit record of task `task` of the alloc whose dir is `alloc_dir`.
pub fn path(alloc_dir: &Path, task: &str) -> PathBuf {
    alloc_dir.join(format!("{task}.exit"))
}

/// Removes the record an earlier start left; none is no error.
pub fn clear(path: &Path) -> io::Result<()> {
    match fs::remove_file(path) {
        Err(err) if err.kind() != io::ErrorKind::NotFound => Err(err),
        _ => Ok(()),
    }
}

/// The status the record at `path` holds, if the process `pid` wrote it
/// whole.
pub fn read(path: &Path, pid: u32) -> Option<ExitStatus> {
    parse(&fs::read_to_string(path).ok()?, pid)
}

fn parse(text: &str, pid: u32) -> Option<ExitStatus> {
    let line = text.strip_suffix('\n')?;
    let (writer, status) = line.split_once(' ')?;
    if writer.parse::<u32>().ok()? != pid {
        return None;
    }
    Some(ExitStatus::from_raw(status.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_counts_only_whole_and_for_the_tracked_pid() {
        let exited_7 = parse("42 1792\n", 42).expect("a whole record");
        assert_eq!(exited_7.code(), Some(7));
        assert_eq!(parse("42 9\n", 42).and_then(|s| s.signal()), Some(9));
        assert_eq!(parse("42 0\n", 42).map(|s| s.success()), Some(true));
        assert_eq!(parse("43 0\n", 42), None, "another process's");
        assert_eq!(parse("42 0", 42), None, "cut short");
        assert_eq!(parse("", 42), None);
    }

    #[test]
    fn clearing_a_missing_record_is_no_error() {
        let dir = std::env::temp_dir().join(format!("csi-agent-exit-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let record = path(&dir, "t");
        assert_eq!(record, dir.join("t.exit"));
        clear(&record).unwrap();
        fs::write(&record, "1 0\n").unwrap();
        assert_eq!(read(&record, 1).map(|s| s.success()), Some(true));
        clear(&record).unwrap();
        assert!(!record.exists());
        let _ = fs::remove_dir_all(&dir);
    }
}
