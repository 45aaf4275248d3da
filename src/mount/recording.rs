//! A [`Mounter`] that records calls instead of making them, for the unit
//! tests of the layers above.

use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, PoisonError};

use libc::{c_int, c_ulong};

use crate::mount::sys::c_path;
use crate::mount::{
    bind_flags, Error, Mounter, Propagation, Result, UnmountMode, REMOUNT_READ_ONLY_FLAGS,
};

/// One recorded call, with the exact flags the real mounter passes to the
/// kernel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MountCall {
    /// A bind mount, with the mount(2) flags.
    Bind {
        source: PathBuf,
        target: PathBuf,
        flags: c_ulong,
    },
    /// A read-only remount, with the mount(2) flags. The real mounter adds
    /// the locked flags the mount already has, which a fake cannot know.
    RemountReadOnly { target: PathBuf, flags: c_ulong },
    /// A propagation change, with the mount(2) flags.
    SetPropagation { target: PathBuf, flags: c_ulong },
    /// An unmount, with the umount2(2) flags.
    Unmount { target: PathBuf, flags: c_int },
}

/// A [`Mounter`] that records each call and succeeds, unless told to fail a
/// call with an errno.
///
/// Like the real mounter, it rejects a path with a NUL byte before making
/// (here: recording) the call.
#[derive(Debug, Default)]
pub struct RecordingMounter {
    calls: Mutex<Vec<MountCall>>,
    failures: Mutex<HashMap<usize, c_int>>,
}

impl RecordingMounter {
    /// A mounter with no calls recorded and no failures planned.
    pub fn new() -> Self {
        Self::default()
    }

    /// The calls recorded so far, in order.
    pub fn calls(&self) -> Vec<MountCall> {
        lock(&self.calls).clone()
    }

    /// Makes the call with index `index` (counted from 0 over all calls)
    /// fail with `errno`; the call is still recorded.
    pub fn fail_call(&self, index: usize, errno: c_int) {
        lock(&self.failures).insert(index, errno);
    }

    /// Records `call` and returns the error planned for it, if any.
    fn record(&self, call: MountCall) -> io::Result<()> {
        let mut calls = lock(&self.calls);
        let index = calls.len();
        calls.push(call);
        match lock(&self.failures).get(&index) {
            Some(&errno) => Err(io::Error::from_raw_os_error(errno)),
            None => Ok(()),
        }
    }
}

/// Locks `mutex`, ignoring poisoning: a panicking test thread leaves the
/// recorded calls intact.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Mounter for RecordingMounter {
    fn bind(&self, source: &Path, target: &Path, recursive: bool) -> Result<()> {
        c_path(source)?;
        c_path(target)?;
        self.record(MountCall::Bind {
            source: source.to_path_buf(),
            target: target.to_path_buf(),
            flags: bind_flags(recursive),
        })
        .map_err(|err| Error::Bind {
            source: source.to_path_buf(),
            target: target.to_path_buf(),
            err,
        })
    }

    fn remount_read_only(&self, target: &Path) -> Result<()> {
        c_path(target)?;
        self.record(MountCall::RemountReadOnly {
            target: target.to_path_buf(),
            flags: REMOUNT_READ_ONLY_FLAGS,
        })
        .map_err(|err| Error::RemountReadOnly {
            target: target.to_path_buf(),
            err,
        })
    }

    fn set_propagation(&self, target: &Path, propagation: Propagation) -> Result<()> {
        c_path(target)?;
        self.record(MountCall::SetPropagation {
            target: target.to_path_buf(),
            flags: propagation.mount_flags(),
        })
        .map_err(|err| Error::SetPropagation {
            target: target.to_path_buf(),
            propagation,
            err,
        })
    }

    fn unmount(&self, target: &Path, mode: UnmountMode) -> Result<()> {
        c_path(target)?;
        self.record(MountCall::Unmount {
            target: target.to_path_buf(),
            flags: mode.flags(),
        })
        .map_err(|err| Error::Unmount {
            target: target.to_path_buf(),
            err,
        })
    }
}

#[cfg(test)]
mod tests {
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;

    use libc::{
        MNT_DETACH, MNT_FORCE, MS_BIND, MS_PRIVATE, MS_RDONLY, MS_REC, MS_REMOUNT, MS_SHARED,
        MS_SLAVE, UMOUNT_NOFOLLOW,
    };

    use super::*;

    fn p(path: &str) -> PathBuf {
        PathBuf::from(path)
    }

    /// Publishes a volume read-only the way a higher layer would, through
    /// the trait.
    fn publish_read_only(
        mounter: &dyn Mounter,
        source: &Path,
        target: &Path,
        propagation: Propagation,
    ) -> Result<()> {
        mounter.bind(source, target, true)?;
        mounter.remount_read_only(target)?;
        mounter.set_propagation(target, propagation)
    }

    #[test]
    fn bind_sets_ms_rec_only_when_recursive() {
        let mounter = RecordingMounter::new();
        mounter.bind(&p("/src"), &p("/dst"), false).unwrap();
        mounter.bind(&p("/src"), &p("/dst2"), true).unwrap();
        assert_eq!(
            mounter.calls(),
            [
                MountCall::Bind {
                    source: p("/src"),
                    target: p("/dst"),
                    flags: MS_BIND,
                },
                MountCall::Bind {
                    source: p("/src"),
                    target: p("/dst2"),
                    flags: MS_BIND | MS_REC,
                },
            ]
        );
    }

    #[test]
    fn remount_read_only_is_a_bind_remount() {
        let mounter = RecordingMounter::new();
        mounter.remount_read_only(&p("/dst")).unwrap();
        assert_eq!(
            mounter.calls(),
            [MountCall::RemountReadOnly {
                target: p("/dst"),
                flags: MS_REMOUNT | MS_BIND | MS_RDONLY,
            }]
        );
    }

    #[test]
    fn each_propagation_maps_to_its_recursive_flag() {
        let mounter = RecordingMounter::new();
        for propagation in Propagation::ALL {
            mounter.set_propagation(&p("/dst"), propagation).unwrap();
        }
        let flags: Vec<_> = mounter
            .calls()
            .into_iter()
            .map(|call| match call {
                MountCall::SetPropagation { target, flags } => {
                    assert_eq!(target, p("/dst"));
                    flags
                }
                other => panic!("unexpected call {other:?}"),
            })
            .collect();
        assert_eq!(
            flags,
            [MS_PRIVATE | MS_REC, MS_SLAVE | MS_REC, MS_SHARED | MS_REC]
        );
    }

    #[test]
    fn each_unmount_mode_maps_to_its_flags() {
        let mounter = RecordingMounter::new();
        mounter.unmount(&p("/a"), UnmountMode::Normal).unwrap();
        mounter.unmount(&p("/b"), UnmountMode::Detach).unwrap();
        mounter.unmount(&p("/c"), UnmountMode::Force).unwrap();
        assert_eq!(
            mounter.calls(),
            [
                MountCall::Unmount {
                    target: p("/a"),
                    flags: UMOUNT_NOFOLLOW,
                },
                MountCall::Unmount {
                    target: p("/b"),
                    flags: MNT_DETACH | UMOUNT_NOFOLLOW,
                },
                MountCall::Unmount {
                    target: p("/c"),
                    flags: MNT_FORCE | UMOUNT_NOFOLLOW,
                },
            ]
        );
    }

    #[test]
    fn records_a_whole_sequence_through_the_trait() {
        let mounter = RecordingMounter::new();
        publish_read_only(
            &mounter,
            &p("/var/lib/v"),
            &p("/run/t/v"),
            Propagation::HostToTask,
        )
        .unwrap();
        assert_eq!(
            mounter.calls(),
            [
                MountCall::Bind {
                    source: p("/var/lib/v"),
                    target: p("/run/t/v"),
                    flags: MS_BIND | MS_REC,
                },
                MountCall::RemountReadOnly {
                    target: p("/run/t/v"),
                    flags: MS_REMOUNT | MS_BIND | MS_RDONLY,
                },
                MountCall::SetPropagation {
                    target: p("/run/t/v"),
                    flags: MS_SLAVE | MS_REC,
                },
            ]
        );
    }

    #[test]
    fn a_planned_failure_is_recorded_and_returned_as_the_step_error() {
        let mounter = RecordingMounter::new();
        mounter.fail_call(1, libc::EPERM);
        let err = publish_read_only(&mounter, &p("/s"), &p("/t"), Propagation::Private)
            .expect_err("the remount is planned to fail");
        match err {
            Error::RemountReadOnly { target, err } => {
                assert_eq!(target, p("/t"));
                assert_eq!(err.raw_os_error(), Some(libc::EPERM));
            }
            other => panic!("unexpected error {other:?}"),
        }
        // The bind and the failed remount were made, the propagation was not.
        assert_eq!(mounter.calls().len(), 2);

        mounter.fail_call(2, libc::EBUSY);
        let err = mounter.unmount(&p("/t"), UnmountMode::Normal).unwrap_err();
        assert!(
            matches!(&err, Error::Unmount { err, .. } if err.raw_os_error() == Some(libc::EBUSY)),
            "{err:?}"
        );
        assert!(mounter.unmount(&p("/t"), UnmountMode::Normal).is_ok());
    }

    #[test]
    fn a_path_with_a_nul_byte_is_rejected_before_the_call() {
        let mounter = RecordingMounter::new();
        let bad = PathBuf::from(OsStr::from_bytes(b"/a\0b"));
        for result in [
            mounter.bind(&bad, &p("/t"), false),
            mounter.bind(&p("/s"), &bad, false),
            mounter.remount_read_only(&bad),
            mounter.set_propagation(&bad, Propagation::Private),
            mounter.unmount(&bad, UnmountMode::Detach),
        ] {
            assert!(
                matches!(&result, Err(Error::InvalidPath { path }) if *path == bad),
                "{result:?}"
            );
        }
        assert!(mounter.calls().is_empty());
    }
}
