//! Tests of [`SysMounter`] and [`MountInfo`] against the real kernel.
//!
//! They need root. Each test works in a scratch directory of its own, made
//! a private mount so that nothing propagates to the host, and leaves no
//! mount behind, even when it fails.

use std::fs::{self, File};
use std::io::Read as _;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::mount::sys::{c_path, euid, mount};
use crate::mount::{
    is_mount_point, Error, MountInfo, MountInfoEntry, Mounter, Propagation, Result, SysMounter,
    UnmountMode, REMOUNT_READ_ONLY_FLAGS,
};

/// Tells whether a test that needs root can run. In CI, which runs as
/// root, a missing root is a failure rather than a silent skip.
fn require_root() -> bool {
    if euid() == 0 {
        return true;
    }
    if std::env::var("CI").as_deref() == Ok("true") {
        panic!("this test needs root; CI runs as root");
    }
    eprintln!("skipping a test that needs root");
    false
}

/// A directory of one test's own, made a private mount so that nothing
/// mounted below it propagates to the host, whatever the propagation of
/// the temporary directory is. Dropping it detaches every mount below it,
/// even after a failed assertion, then removes it.
struct Scratch {
    root: PathBuf,
}

impl Scratch {
    fn new() -> Self {
        static COUNTER: AtomicUsize = AtomicUsize::new(0);
        let name = format!(
            "csi-agent mount-test-{}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        );
        let root = std::env::temp_dir().join(name);
        fs::create_dir(&root).unwrap();
        let scratch = Self {
            root: fs::canonicalize(&root).unwrap(),
        };
        SysMounter
            .bind(&scratch.root, &scratch.root, false)
            .unwrap();
        SysMounter
            .set_propagation(&scratch.root, Propagation::Private)
            .unwrap();
        scratch
    }

    /// Creates the directory `name` in the scratch directory.
    fn dir(&self, name: &str) -> PathBuf {
        let dir = self.root.join(name);
        fs::create_dir_all(&dir).unwrap();
        dir
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        // Every mount of the test is below the scratch directory's own
        // mount, so detaching that one detaches them all. This relies on
        // umount2(2) alone, not on the parser under test.
        for _ in 0..16 {
            match SysMounter.unmount(&self.root, UnmountMode::Detach) {
                Ok(()) => continue,
                Err(Error::Unmount { err, .. }) if err.raw_os_error() == Some(libc::EINVAL) => {
                    break;
                }
                Err(err) => {
                    eprintln!("leaving {} behind: {err}", self.root.display());
                    return;
                }
            }
        }
        // Removing a tree with a mount left in it would delete files of
        // the mounted directory, so check the mount table first.
        let leftover = MountInfo::read()
            .map(|info| info.under(&self.root).count())
            .unwrap_or(usize::MAX);
        if leftover != 0 {
            eprintln!(
                "leaving {} behind: it may still be mounted",
                self.root.display()
            );
            return;
        }
        if let Err(err) = fs::remove_dir_all(&self.root) {
            eprintln!("failed to remove {}: {err}", self.root.display());
        }
    }
}

/// The top mount at `path`, which must be a mount point.
fn top(path: &Path) -> MountInfoEntry {
    MountInfo::read()
        .unwrap()
        .get(path)
        .unwrap_or_else(|| panic!("{} is not a mount point", path.display()))
        .clone()
}

fn is_mounted(path: &Path) -> bool {
    is_mount_point(path).unwrap()
}

/// The path of `dir` inside its file system, which mountinfo shows as
/// the root of a bind mount of `dir`.
fn fs_path(dir: &Path) -> PathBuf {
    let info = MountInfo::read().unwrap();
    let mount_point = info
        .entries()
        .iter()
        .map(|entry| &entry.mount_point)
        .filter(|mount_point| dir.starts_with(mount_point))
        .max_by_key(|mount_point| mount_point.components().count())
        .unwrap();
    let entry = info.get(mount_point).unwrap();
    entry.root.join(dir.strip_prefix(mount_point).unwrap())
}

/// Makes `dir` a shared mount of its own, like a host directory that
/// propagates mounts.
fn shared_mount_point(dir: &Path) -> u32 {
    SysMounter.bind(dir, dir, false).unwrap();
    SysMounter
        .set_propagation(dir, Propagation::Bidirectional)
        .unwrap();
    top(dir).shared_peer_group().expect("a shared mount")
}

fn io_errno(result: Result<()>) -> Option<i32> {
    match result {
        Err(
            Error::Bind { err, .. }
            | Error::ReadMountFlags { err, .. }
            | Error::RemountReadOnly { err, .. }
            | Error::SetPropagation { err, .. }
            | Error::Unmount { err, .. },
        ) => err.raw_os_error(),
        other => panic!("expected an error from the kernel, got {other:?}"),
    }
}

#[test]
fn bind_shares_files_both_ways_until_unmounted() {
    if !require_root() {
        return;
    }
    let scratch = Scratch::new();
    let src = scratch.dir("src");
    let dst = scratch.dir("dst");
    fs::write(src.join("before"), "from src").unwrap();
    assert!(!is_mounted(&dst));

    SysMounter.bind(&src, &dst, false).unwrap();
    assert!(is_mounted(&dst));
    let entry = top(&dst);
    assert_eq!(entry.root, fs_path(&src));
    assert_ne!(entry.root, Path::new("/"));
    assert!(entry.propagation.is_empty(), "{entry:?}");
    assert!(!entry.is_read_only());
    assert_eq!(fs::read_to_string(dst.join("before")).unwrap(), "from src");
    fs::write(dst.join("through-dst"), "from dst").unwrap();
    assert_eq!(
        fs::read_to_string(src.join("through-dst")).unwrap(),
        "from dst"
    );

    SysMounter.unmount(&dst, UnmountMode::Normal).unwrap();
    assert!(!is_mounted(&dst));
    assert!(MountInfo::read().unwrap().get(&dst).is_none());
    assert!(!dst.join("through-dst").exists());
    assert!(src.join("through-dst").exists());
}

#[test]
fn remount_read_only_fails_writes_with_erofs_on_that_mount_only() {
    if !require_root() {
        return;
    }
    let scratch = Scratch::new();
    let src = scratch.dir("src");
    let dst = scratch.dir("dst");
    SysMounter.bind(&src, &dst, false).unwrap();

    SysMounter.remount_read_only(&dst).unwrap();
    assert!(top(&dst).is_read_only());
    let err = fs::write(dst.join("file"), "x").unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EROFS));
    // The read-only flag belongs to the bind mount, not to the file
    // system: the source stays writable and the change shows through.
    fs::write(src.join("file"), "through src").unwrap();
    assert_eq!(fs::read_to_string(dst.join("file")).unwrap(), "through src");
}

#[test]
fn remount_read_only_keeps_nosuid_nodev_and_noexec() {
    if !require_root() {
        return;
    }
    let scratch = Scratch::new();
    let src = scratch.dir("src");
    let dst = scratch.dir("dst");
    // A source mount with locked flags, as on a nosuid volume.
    SysMounter.bind(&src, &src, false).unwrap();
    let locked = libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC;
    mount(
        c"none",
        &c_path(&src).unwrap(),
        libc::MS_REMOUNT | libc::MS_BIND | locked,
    )
    .unwrap();
    SysMounter.bind(&src, &dst, false).unwrap();
    let locked_options = ["nosuid", "nodev", "noexec"];
    for option in locked_options {
        assert!(top(&dst).has_mount_option(option), "{option}");
    }

    SysMounter.remount_read_only(&dst).unwrap();
    let entry = top(&dst);
    assert!(entry.is_read_only(), "{entry:?}");
    for option in locked_options {
        assert!(entry.has_mount_option(option), "{option} lost: {entry:?}");
    }

    // This is what the extra flags prevent: a bare bind remount clears
    // the flags it does not name.
    mount(c"none", &c_path(&dst).unwrap(), REMOUNT_READ_ONLY_FLAGS).unwrap();
    assert!(!top(&dst).has_mount_option("nosuid"));
}

#[test]
fn only_a_recursive_bind_brings_the_mounts_below_along() {
    if !require_root() {
        return;
    }
    let scratch = Scratch::new();
    let src = scratch.dir("src");
    let sub = scratch.dir("src/sub");
    let inner = scratch.dir("inner");
    fs::write(inner.join("file"), "inner").unwrap();
    SysMounter.bind(&inner, &sub, false).unwrap();
    let flat = scratch.dir("flat");
    let deep = scratch.dir("deep");

    SysMounter.bind(&src, &flat, false).unwrap();
    SysMounter.bind(&src, &deep, true).unwrap();

    assert!(is_mounted(&flat));
    assert!(!is_mounted(&flat.join("sub")));
    assert!(!flat.join("sub/file").exists());
    assert!(is_mounted(&deep.join("sub")));
    assert_eq!(top(&deep.join("sub")).root, fs_path(&inner));
    assert_eq!(fs::read_to_string(deep.join("sub/file")).unwrap(), "inner");
}

#[test]
fn bidirectional_mounts_propagate_both_ways() {
    if !require_root() {
        return;
    }
    let scratch = Scratch::new();
    let host = scratch.dir("host");
    let task = scratch.dir("task");
    let extra = scratch.dir("extra");
    fs::write(extra.join("file"), "extra").unwrap();
    let group = shared_mount_point(&host);

    SysMounter.bind(&host, &task, false).unwrap();
    SysMounter
        .set_propagation(&task, Propagation::Bidirectional)
        .unwrap();
    let entry = top(&task);
    assert_eq!(entry.shared_peer_group(), Some(group), "{entry:?}");
    assert_eq!(entry.master_peer_group(), None);

    SysMounter
        .bind(&extra, &scratch.dir("task/from-task"), false)
        .unwrap();
    assert!(is_mounted(&host.join("from-task")));
    assert_eq!(
        fs::read_to_string(host.join("from-task/file")).unwrap(),
        "extra"
    );
    SysMounter
        .bind(&extra, &scratch.dir("host/from-host"), false)
        .unwrap();
    assert!(is_mounted(&task.join("from-host")));
}

#[test]
fn host_to_task_receives_host_mounts_and_sends_none() {
    if !require_root() {
        return;
    }
    let scratch = Scratch::new();
    let host = scratch.dir("host");
    let task = scratch.dir("task");
    let extra = scratch.dir("extra");
    fs::write(extra.join("file"), "extra").unwrap();
    let group = shared_mount_point(&host);
    SysMounter.bind(&host, &task, false).unwrap();
    assert_eq!(top(&task).shared_peer_group(), Some(group));

    SysMounter
        .set_propagation(&task, Propagation::HostToTask)
        .unwrap();
    let entry = top(&task);
    assert_eq!(entry.master_peer_group(), Some(group), "{entry:?}");
    assert_eq!(entry.shared_peer_group(), None);

    SysMounter
        .bind(&extra, &scratch.dir("host/from-host"), false)
        .unwrap();
    assert!(is_mounted(&task.join("from-host")));
    assert_eq!(
        fs::read_to_string(task.join("from-host/file")).unwrap(),
        "extra"
    );
    SysMounter
        .bind(&extra, &scratch.dir("task/from-task"), false)
        .unwrap();
    assert!(!is_mounted(&host.join("from-task")));
    assert!(!host.join("from-task/file").exists());
}

#[test]
fn host_to_task_of_a_mount_that_is_not_shared_is_private() {
    if !require_root() {
        return;
    }
    let scratch = Scratch::new();
    let src = scratch.dir("src");
    let dst = scratch.dir("dst");
    SysMounter.bind(&src, &dst, false).unwrap();
    SysMounter
        .set_propagation(&dst, Propagation::HostToTask)
        .unwrap();
    // A slave needs a master: with no peer group to receive from, the
    // kernel makes the mount private.
    assert!(top(&dst).propagation.is_empty());
}

#[test]
fn private_cuts_propagation_and_bidirectional_restores_a_peer_group() {
    if !require_root() {
        return;
    }
    let scratch = Scratch::new();
    let host = scratch.dir("host");
    let task = scratch.dir("task");
    let extra = scratch.dir("extra");
    let group = shared_mount_point(&host);
    SysMounter.bind(&host, &task, false).unwrap();

    SysMounter
        .set_propagation(&task, Propagation::Private)
        .unwrap();
    assert!(top(&task).propagation.is_empty());
    SysMounter
        .bind(&extra, &scratch.dir("host/after"), false)
        .unwrap();
    assert!(!is_mounted(&task.join("after")));

    SysMounter
        .set_propagation(&task, Propagation::Bidirectional)
        .unwrap();
    let entry = top(&task);
    let new_group = entry.shared_peer_group().expect("shared again");
    assert_ne!(new_group, group, "a new peer group, not the host's");
    assert_eq!(entry.master_peer_group(), None);
}

#[test]
fn mount_points_with_escaped_characters_are_found() {
    if !require_root() {
        return;
    }
    let scratch = Scratch::new();
    let src = scratch.dir("src with space");
    let dst = scratch.dir("dst\twith\ntab, newline\\and backslash");
    SysMounter.bind(&src, &dst, false).unwrap();
    assert!(is_mounted(&dst));
    assert_eq!(top(&dst).root, fs_path(&src));
    SysMounter.unmount(&dst, UnmountMode::Normal).unwrap();
    assert!(!is_mounted(&dst));
}

#[test]
fn get_returns_the_top_of_a_real_stack() {
    if !require_root() {
        return;
    }
    let scratch = Scratch::new();
    let below = scratch.dir("below");
    let above = scratch.dir("above");
    let dst = scratch.dir("dst");
    SysMounter.bind(&below, &dst, false).unwrap();
    SysMounter.bind(&above, &dst, false).unwrap();
    let info = MountInfo::read().unwrap();
    assert_eq!(info.stack(&dst).count(), 2);
    assert_eq!(info.get(&dst).unwrap().root, fs_path(&above));

    SysMounter.unmount(&dst, UnmountMode::Normal).unwrap();
    assert_eq!(top(&dst).root, fs_path(&below));
    SysMounter.unmount(&dst, UnmountMode::Normal).unwrap();
    assert!(!is_mounted(&dst));
}

#[test]
fn a_busy_mount_needs_detach() {
    if !require_root() {
        return;
    }
    let scratch = Scratch::new();
    let src = scratch.dir("src");
    let dst = scratch.dir("dst");
    fs::write(src.join("file"), "still readable").unwrap();
    SysMounter.bind(&src, &dst, false).unwrap();
    let mut open = File::open(dst.join("file")).unwrap();

    let busy = SysMounter.unmount(&dst, UnmountMode::Normal);
    assert_eq!(io_errno(busy), Some(libc::EBUSY));
    assert!(is_mounted(&dst));
    SysMounter.unmount(&dst, UnmountMode::Detach).unwrap();
    assert!(!is_mounted(&dst));
    let mut text = String::new();
    open.read_to_string(&mut text).unwrap();
    assert_eq!(text, "still readable");
}

#[test]
fn unmount_does_not_follow_a_symlink() {
    if !require_root() {
        return;
    }
    let scratch = Scratch::new();
    let src = scratch.dir("src");
    let dst = scratch.dir("dst");
    let link = scratch.root.join("link");
    symlink(&dst, &link).unwrap();
    SysMounter.bind(&src, &dst, false).unwrap();

    let through_link = SysMounter.unmount(&link, UnmountMode::Detach);
    assert_eq!(io_errno(through_link), Some(libc::EINVAL));
    assert!(is_mounted(&dst));
}

#[test]
fn kernel_errors_name_the_step_and_carry_the_errno() {
    if !require_root() {
        return;
    }
    let scratch = Scratch::new();
    let dir = scratch.dir("dir");
    let missing = scratch.root.join("missing");

    let err = SysMounter.bind(&missing, &dir, false).unwrap_err();
    assert!(
        matches!(&err, Error::Bind { source, target, .. } if *source == missing && *target == dir)
    );
    assert_eq!(io_errno(Err(err)), Some(libc::ENOENT));
    let err = SysMounter.remount_read_only(&missing).unwrap_err();
    assert!(matches!(&err, Error::ReadMountFlags { target, .. } if *target == missing));
    assert_eq!(io_errno(Err(err)), Some(libc::ENOENT));
    // `dir` is not a mount point.
    let err = SysMounter.remount_read_only(&dir).unwrap_err();
    assert!(matches!(&err, Error::RemountReadOnly { .. }), "{err:?}");
    assert_eq!(io_errno(Err(err)), Some(libc::EINVAL));
    let err = SysMounter
        .set_propagation(&dir, Propagation::Private)
        .unwrap_err();
    assert!(
        matches!(
            &err,
            Error::SetPropagation {
                propagation: Propagation::Private,
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(io_errno(Err(err)), Some(libc::EINVAL));
    let err = SysMounter.unmount(&dir, UnmountMode::Normal).unwrap_err();
    assert!(matches!(&err, Error::Unmount { target, .. } if *target == dir));
    assert_eq!(io_errno(Err(err)), Some(libc::EINVAL));
}

#[test]
fn a_bind_and_its_rebind_show_the_same_source_and_have_their_own_mount_ids() {
    if !require_root() {
        return;
    }
    let scratch = Scratch::new();
    let volume = scratch.dir("volume");
    let publish = scratch.dir("publish");
    let target = scratch.dir("target");
    let other = scratch.dir("other");
    SysMounter.bind(&volume, &publish, false).unwrap();
    SysMounter.bind(&publish, &target, false).unwrap();
    SysMounter.bind(&other, &other, false).unwrap();
    let info = MountInfo::read().unwrap();
    assert!(crate::mount::same_source(&info, &target, &publish));
    assert!(!crate::mount::same_source(&info, &other, &publish));
    assert!(
        !crate::mount::same_source(&info, &volume, &publish),
        "not a mount point"
    );

    let Some(id) = crate::mount::mount_id(&target).unwrap() else {
        // A kernel before 5.8 cannot tell, nor can qemu-user 7.2, which
        // does not copy statx's mount ID.
        if let Some(kernel) = crate::sys::emulation::emulated_on() {
            crate::sys::emulation::note(&format!(
                "emulated on {kernel}: statx reports no mount ID; mount IDs not checked"
            ));
        }
        return;
    };
    assert_ne!(Some(id), crate::mount::mount_id(&publish).unwrap());
    // Stacked over by someone else: the top mount has another ID.
    SysMounter.bind(&other, &target, false).unwrap();
    assert_ne!(Some(id), crate::mount::mount_id(&target).unwrap());
    SysMounter.unmount(&target, UnmountMode::Normal).unwrap();
    assert_eq!(Some(id), crate::mount::mount_id(&target).unwrap());
    let described = crate::mount::describe(&MountInfo::read().unwrap(), &target);
    assert!(
        described.ends_with(&format!(
            "[{}] ({}, mount {})",
            fs_path(&volume).display(),
            top(&target).fs_type,
            top(&target).mount_id
        )),
        "{described}"
    );
}
