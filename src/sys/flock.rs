//! Advisory whole-file locks (`flock(2)`), for the hostpath plugin's
//! processes that share one base dir: a controller process and a node
//! process change the records of one state, each under an exclusive lock
//! of the record's lock file.
//!
//! A lock belongs to the open file description: it is released when the
//! file is closed (or its process dies), so a crashed process never leaves
//! a lock behind. Two opens of one file in one process are two holders.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;

use super::cvt;

/// Waits for an exclusive lock on `file`.
pub fn lock_exclusive(file: &File) -> io::Result<()> {
    loop {
        match flock(file, libc::LOCK_EX) {
            // A signal interrupted the wait: wait again.
            Err(err) if err.kind() == io::ErrorKind::Interrupted => continue,
            other => return other,
        }
    }
}

/// Waits for a shared lock on `file`: any number of holders of a shared
/// lock, or one of an exclusive lock.
pub fn lock_shared(file: &File) -> io::Result<()> {
    loop {
        match flock(file, libc::LOCK_SH) {
            // A signal interrupted the wait: wait again.
            Err(err) if err.kind() == io::ErrorKind::Interrupted => continue,
            other => return other,
        }
    }
}

/// Takes an exclusive lock on `file` if nobody else holds one: false when
/// another holder has it.
pub fn try_lock_exclusive(file: &File) -> io::Result<bool> {
    match flock(file, libc::LOCK_EX | libc::LOCK_NB) {
        Ok(()) => Ok(true),
        Err(err) if err.kind() == io::ErrorKind::WouldBlock => Ok(false),
        Err(err) => Err(err),
    }
}

/// Releases a lock taken on `file`.
pub fn unlock(file: &File) -> io::Result<()> {
    flock(file, libc::LOCK_UN)
}

fn flock(file: &File, operation: libc::c_int) -> io::Result<()> {
    // SAFETY: flock(2) takes a file descriptor, which `file` keeps open for
    // the duration of the call, and an integer; it touches no memory of ours.
    cvt(unsafe { libc::flock(file.as_raw_fd(), operation) })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_open_of_a_locked_file_cannot_take_the_lock_until_it_is_released() {
        let path = std::env::temp_dir().join(format!("csi-agent-flock-{}", std::process::id()));
        let first = File::create(&path).unwrap();
        let second = File::open(&path).unwrap();
        lock_exclusive(&first).unwrap();
        assert!(!try_lock_exclusive(&second).unwrap());
        unlock(&first).unwrap();
        assert!(try_lock_exclusive(&second).unwrap());
        drop(second);
        // Closing the holder released it.
        assert!(try_lock_exclusive(&first).unwrap());
        std::fs::remove_file(&path).unwrap();
    }
}
