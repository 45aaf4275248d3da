//! The child's side of a start: what the process the agent tracks does
//! before the task's `exec`.
//!
//! [`ChildSetup::new`] turns the launch's plans (the namespace plan, and
//! for an `exec` task the root plan) into a list of [`Step`]s with every
//! path already a C string; the agent hands them to the start helper
//! ([`super::helper`], through [`super::encoding`]), which performs them
//! in order ([`super::perform`]) with nothing but system calls, through
//! [`Syscall`](super::syscall::Syscall): it allocates nothing, takes no
//! lock and logs nothing, which is what the task's process, forked by the
//! helper ([`super::pid_ns`]), may do until its exec. A failing step
//! names itself and the path it was about, in one line the helper writes
//! to the task's stderr log.
//!
//! The order, for an `exec` task:
//!
//! 0. a session; the task's control groups (before anything it does is
//!    charged); the pid file (the pid the agent tracks: this child's);
//! 1. a mount namespace of its own; then the IPC and PID namespaces, and
//!    the fork of the task's process ([`super::pid_ns`]: from here on the
//!    grandchild, PID 1 of its namespace when it has one, goes on; the
//!    child waits for it and records its exit, and shares its mounts
//!    and, after the pivot, its root);
//! 2. the host's shared mounts made slaves (see [`super::super::mounts`]);
//! 3. the task dir bound onto itself (private): the new root;
//! 4. `chroot_env` (recursive binds, then read-only with all below them),
//!    `/dev`, `/proc`, `/secrets`, `/alloc`, a plugin task's `mount_dir`
//!    and `stage_publish_base_dir`;
//! 5. the volumes at their destinations;
//! 6. `pivot_root` into the task dir; the old root is made a slave
//!    recursively, so that detaching it unmounts nothing on the host (as
//!    runc does), and detached; the cwd becomes `/`;
//! 7. its capabilities' bounding set, the task's user, then for a task
//!    running as root its other capability sets ([`super::caps`]), and
//!    `no_new_privs`;
//! 8. the task's `work_dir`, if it has one, as its user.
//!
//! A `raw_exec` task skips the IPC and PID namespaces of 1 (not the fork),
//! and 3, 4 and 6, and gets the control socket covered instead.

use std::ffi::{CStr, CString};
use std::path::Path;

use super::syscall::MountFlags;
use super::Launch;
use crate::mount::{self, Propagation};
use crate::task::user::User;

/// One thing the child does, prepared in the agent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Step {
    /// A mount(2) call: a bind, a propagation change, or a new file system
    /// when `fstype` is set.
    Mount {
        source: Option<CString>,
        target: CString,
        fstype: Option<CString>,
        flags: MountFlags,
        data: Option<CString>,
        /// Ignore "not a mount point" and "no such path": the mount went
        /// away after the plan was made.
        tolerate_gone: bool,
        what: &'static [u8],
    },
    /// Makes the mount at `target` read-only: with `recursive`, it and every
    /// mount below (mount_setattr; a bind remount of the top one only on a
    /// kernel without it), else the top one with a bind remount.
    ReadOnly {
        target: CString,
        recursive: bool,
        remount_flags: MountFlags,
        what: &'static [u8],
    },
    Mkdir {
        path: CString,
    },
    /// An empty file to bind a device node onto.
    CreateFile {
        path: CString,
    },
    Symlink {
        target: &'static CStr,
        link: CString,
    },
    WritePid {
        path: CString,
    },
    PivotRoot {
        root: CString,
    },
    BecomeUser(User),
    /// Drops every capability up to `last` but `keep` from the bounding
    /// set.
    DropBounding {
        keep: u64,
        last: u32,
    },
    /// Makes `caps` the effective, permitted, inheritable and ambient sets.
    SetCaps {
        caps: u64,
        last: u32,
    },
    NoNewPrivs,
    /// Joins a control group: `0` (itself) to its `cgroup.procs`.
    JoinCgroup {
        procs: CString,
    },
    /// Sets its OOM score adjustment to 0, as Nomad's executor starts a
    /// task with, rather than keep the agent's.
    ResetOomScoreAdj,
    /// Enters the task's `work_dir`.
    Chdir {
        path: CString,
    },
}

/// The child's side, prepared in the agent.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct ChildSetup {
    /// What the child does before the namespaces: join its control groups
    /// and write its pid.
    pub(super) early: Vec<Step>,
    /// A PID namespace of its own (the task is PID 1), an IPC one.
    pub(super) pid_ns: bool,
    pub(super) ipc_ns: bool,
    /// Where the process the agent tracks records the task's exit.
    pub(super) exit_record: super::pid_ns::ExitRecord,
    /// What the task's process (the grandchild) does then.
    pub(super) steps: Vec<Step>,
}

fn c(path: &Path) -> mount::Result<CString> {
    mount::c_path(path)
}

fn bind(source: &Path, target: &Path, recursive: bool, what: &'static [u8]) -> mount::Result<Step> {
    let mut flags = MountFlags::BIND;
    if recursive {
        flags = flags | MountFlags::REC;
    }
    Ok(Step::Mount {
        source: Some(c(source)?),
        target: c(target)?,
        fstype: None,
        flags,
        data: None,
        tolerate_gone: false,
        what,
    })
}

fn propagation(target: &Path, flags: MountFlags, what: &'static [u8]) -> mount::Result<Step> {
    Ok(Step::Mount {
        source: None,
        target: c(target)?,
        fstype: None,
        flags,
        data: None,
        tolerate_gone: false,
        what,
    })
}

/// The mount(2) flags of `propagation`, as [`crate::mount`] sets it.
fn propagation_flags(propagation: Propagation) -> MountFlags {
    MountFlags::from_bits(propagation.mount_flags())
}

/// The flags of a read-only remount of a bind of `source`, which keep the
/// per-mount flags the kernel would refuse to drop.
fn read_only_remount(source: &Path) -> mount::Result<MountFlags> {
    mount::read_only_remount_flags(source).map(MountFlags::from_bits)
}

fn new_fs(
    fstype: &'static CStr,
    target: &Path,
    flags: MountFlags,
    data: Option<String>,
    what: &'static [u8],
) -> mount::Result<Step> {
    Ok(Step::Mount {
        source: Some(fstype.to_owned()),
        target: c(target)?,
        fstype: Some(fstype.to_owned()),
        flags,
        data: data.map(|d| CString::new(d).expect("mount options hold no NUL")),
        tolerate_gone: false,
        what,
    })
}

impl ChildSetup {
    /// The steps of `launch`'s start, on a kernel whose highest
    /// capability is `last_cap` ([`super::caps::last_cap`]).
    pub(super) fn new(launch: &Launch, last_cap: u32) -> mount::Result<ChildSetup> {
        let plan = &launch.namespace;
        let mut early = vec![Step::ResetOomScoreAdj];
        for procs in &launch.cgroup_procs {
            early.push(Step::JoinCgroup { procs: c(procs)? });
        }
        early.push(Step::WritePid {
            path: c(&launch.pid_file)?,
        });
        let mut steps = Vec::new();
        if plan.slave_root {
            steps.push(propagation(
                Path::new("/"),
                MountFlags::REC | MountFlags::SLAVE,
                b"cannot make / a slave mount: ",
            )?);
        }
        for path in &plan.slave {
            steps.push(Step::Mount {
                source: None,
                target: c(path)?,
                fstype: None,
                flags: MountFlags::SLAVE,
                data: None,
                tolerate_gone: true,
                what: b"cannot make a host mount a slave: ",
            });
        }
        if let Some(root) = &launch.root {
            steps.push(bind(
                &root.dir,
                &root.dir,
                false,
                b"cannot bind the task dir onto itself: ",
            )?);
            steps.push(propagation(
                &root.dir,
                MountFlags::PRIVATE,
                b"cannot make the task root private: ",
            )?);
            for b in &root.binds {
                steps.push(bind(
                    &b.source,
                    &b.target,
                    true,
                    b"cannot bind chroot_env at ",
                )?);
                steps.push(propagation(
                    &b.target,
                    MountFlags::REC | MountFlags::SLAVE,
                    b"cannot make chroot_env a slave at ",
                )?);
                steps.push(Step::ReadOnly {
                    target: c(&b.target)?,
                    recursive: true,
                    remount_flags: read_only_remount(&b.source)?,
                    what: b"cannot make chroot_env read-only at ",
                });
            }
            let dev = root.target(Path::new("/dev"));
            steps.push(new_fs(
                c"tmpfs",
                &dev,
                MountFlags::NOSUID | MountFlags::STRICTATIME,
                Some("mode=755,size=65536k".to_string()),
                b"cannot mount a tmpfs at ",
            )?);
            for name in &root.devices {
                let node = dev.join(name);
                steps.push(Step::CreateFile { path: c(&node)? });
                steps.push(bind(
                    &Path::new("/dev").join(name),
                    &node,
                    false,
                    b"cannot bind a device at ",
                )?);
            }
            let shm = dev.join("shm");
            steps.push(Step::Mkdir { path: c(&shm)? });
            steps.push(new_fs(
                c"tmpfs",
                &shm,
                MountFlags::NOSUID | MountFlags::NODEV | MountFlags::NOEXEC,
                Some("mode=1777,size=65536k".to_string()),
                b"cannot mount a tmpfs at ",
            )?);
            let pts = dev.join("pts");
            steps.push(Step::Mkdir { path: c(&pts)? });
            steps.push(new_fs(
                c"devpts",
                &pts,
                MountFlags::NOSUID | MountFlags::NOEXEC,
                Some("newinstance,ptmxmode=0666,mode=0620".to_string()),
                b"cannot mount devpts at ",
            )?);
            for (target, link) in [
                (c"pts/ptmx", "ptmx"),
                (c"/proc/self/fd", "fd"),
                (c"/proc/self/fd/0", "stdin"),
                (c"/proc/self/fd/1", "stdout"),
                (c"/proc/self/fd/2", "stderr"),
            ] {
                steps.push(Step::Symlink {
                    target,
                    link: c(&dev.join(link))?,
                });
            }
            steps.push(new_fs(
                c"proc",
                &root.target(Path::new("/proc")),
                MountFlags::NOSUID | MountFlags::NODEV | MountFlags::NOEXEC,
                None,
                b"cannot mount proc at ",
            )?);
            steps.push(new_fs(
                c"tmpfs",
                &root.target(Path::new("/secrets")),
                MountFlags::NOSUID | MountFlags::NODEV,
                Some(format!(
                    "mode=0700,uid={},gid={},size=1m",
                    root.owner.uid, root.owner.gid
                )),
                b"cannot mount a tmpfs at ",
            )?);
            let alloc = root.target(Path::new("/alloc"));
            steps.push(bind(
                &root.alloc_dir,
                &alloc,
                true,
                b"cannot bind the alloc dir at ",
            )?);
            steps.push(propagation(
                &alloc,
                propagation_flags(Propagation::Private),
                b"cannot make the alloc dir private at ",
            )?);
            for dir in &root.plugin_dirs {
                let target = root.target(&dir.destination);
                steps.push(bind(
                    &dir.source,
                    &target,
                    true,
                    b"cannot bind a plugin dir at ",
                )?);
                steps.push(propagation(
                    &target,
                    propagation_flags(dir.propagation),
                    b"cannot set the propagation of a plugin dir at ",
                )?);
            }
        }
        for m in &plan.mounts {
            steps.push(bind(
                &m.source,
                &m.target,
                true,
                b"cannot bind-mount a volume at ",
            )?);
            if m.read_only {
                steps.push(Step::ReadOnly {
                    target: c(&m.target)?,
                    recursive: false,
                    remount_flags: read_only_remount(&m.source)?,
                    what: b"cannot make a volume read-only at ",
                });
            }
            steps.push(propagation(
                &m.target,
                propagation_flags(m.propagation),
                b"cannot set the propagation of a volume at ",
            )?);
        }
        for path in &plan.hide {
            steps.push(Step::Mount {
                source: Some(c(Path::new("/dev/null"))?),
                target: c(path)?,
                fstype: None,
                flags: MountFlags::BIND,
                data: None,
                tolerate_gone: true,
                what: b"cannot hide ",
            });
        }
        if let Some(root) = &launch.root {
            steps.push(Step::PivotRoot {
                root: c(&root.dir)?,
            });
        }
        let last = last_cap;
        if let Some(keep) = launch.caps {
            steps.push(Step::DropBounding { keep, last });
        }
        if let Some(user) = launch.user {
            steps.push(Step::BecomeUser(user));
        }
        if let Some(caps) = launch.caps {
            // Another user's sets were cleared by setuid: it keeps only
            // the bounding set, as under Nomad.
            if launch.user.map_or(true, |u| u.uid == 0) {
                steps.push(Step::SetCaps { caps, last });
            }
        }
        if launch.no_new_privs {
            steps.push(Step::NoNewPrivs);
        }
        if let Some(dir) = &launch.work_dir {
            steps.push(Step::Chdir { path: c(dir)? });
        }
        let record_dir = launch.exit_record.parent().unwrap_or(Path::new("/"));
        let record_name = launch
            .exit_record
            .file_name()
            .map_or(Path::new(""), Path::new);
        Ok(ChildSetup {
            early,
            pid_ns: launch.pid_ns,
            ipc_ns: launch.ipc_ns,
            exit_record: super::pid_ns::ExitRecord {
                dir: c(record_dir)?,
                name: c(record_name)?,
            },
            steps,
        })
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::path::PathBuf;

    use super::*;
    use crate::task::mounts::{DriverMount, NamespacePlan};
    use crate::task::root::{PluginDir, RootBind, RootPlan};

    /// The step in words, with its flags by name.
    fn describe(step: &Step) -> String {
        let text = |c: &CStr| c.to_string_lossy().into_owned();
        match step {
            Step::Mount {
                source,
                target,
                fstype,
                flags,
                data,
                ..
            } => {
                let names: Vec<&str> = [
                    (libc::MS_BIND, "bind"),
                    (libc::MS_REC, "rec"),
                    (libc::MS_PRIVATE, "private"),
                    (libc::MS_SLAVE, "slave"),
                    (libc::MS_SHARED, "shared"),
                    (libc::MS_NOSUID, "nosuid"),
                    (libc::MS_NODEV, "nodev"),
                    (libc::MS_NOEXEC, "noexec"),
                ]
                .into_iter()
                .filter(|(flag, _)| flags.bits() & flag != 0)
                .map(|(_, name)| name)
                .collect();
                let mut out = format!("mount {}", names.join("|"));
                if let Some(fstype) = fstype {
                    out.push_str(&format!(" {}", text(fstype)));
                } else if let Some(source) = source {
                    out.push_str(&format!(" {}", text(source)));
                }
                out.push_str(&format!(" {}", text(target)));
                if let Some(data) = data {
                    out.push_str(&format!(" {}", text(data)));
                }
                out
            }
            Step::ReadOnly {
                target, recursive, ..
            } => format!(
                "read-only{} {}",
                if *recursive { " rec" } else { "" },
                text(target)
            ),
            Step::Mkdir { path } => format!("mkdir {}", text(path)),
            Step::CreateFile { path } => format!("file {}", text(path)),
            Step::Symlink { target, link } => format!("symlink {} {}", text(link), text(target)),
            Step::WritePid { path } => format!("pid {}", text(path)),
            Step::PivotRoot { root } => format!("pivot {}", text(root)),
            Step::BecomeUser(user) => format!("user {}", user.uid),
            Step::JoinCgroup { procs } => format!("cgroup {}", text(procs)),
            Step::DropBounding { keep, .. } => format!("bounding {keep:#x}"),
            Step::SetCaps { caps, .. } => format!("caps {caps:#x}"),
            Step::NoNewPrivs => "no_new_privs".to_string(),
            Step::Chdir { path } => format!("cd {}", text(path)),
            Step::ResetOomScoreAdj => "oom_score_adj 0".to_string(),
        }
    }

    /// Every step in words, the namespaces where they are made.
    fn describe_all(setup: &ChildSetup) -> Vec<String> {
        let mut out: Vec<String> = setup.early.iter().map(describe).collect();
        if setup.pid_ns || setup.ipc_ns {
            out.push(format!(
                "namespaces pid={} ipc={}",
                setup.pid_ns, setup.ipc_ns
            ));
        }
        let record = &setup.exit_record;
        out.push(format!(
            "fork, exit in {}/{}",
            record.dir.to_string_lossy(),
            record.name.to_string_lossy()
        ));
        out.extend(setup.steps.iter().map(describe));
        out
    }

    #[test]
    fn an_exec_task_builds_its_root_then_pivots_then_becomes_its_user() {
        let nobody = User {
            uid: 65534,
            gid: 65534,
        };
        let launch = Launch {
            command: "/bin/sh".into(),
            args: Vec::new(),
            env: BTreeMap::new(),
            cwd: PathBuf::from("/t"),
            work_dir: None,
            stdout: PathBuf::from("/t/logs/stdout"),
            stderr: PathBuf::from("/t/logs/stderr"),
            pid_file: PathBuf::from("/a/t.pid"),
            exit_record: PathBuf::from("/a/t.exit"),
            user: Some(nobody),
            namespace: NamespacePlan {
                slave_root: true,
                slave: Vec::new(),
                mounts: vec![DriverMount {
                    source: PathBuf::from("/v"),
                    target: PathBuf::from("/t/data"),
                    read_only: false,
                    propagation: Propagation::HostToTask,
                }],
                hide: Vec::new(),
            },
            root: Some(RootPlan {
                dir: PathBuf::from("/t"),
                binds: vec![RootBind {
                    source: PathBuf::from("/usr"),
                    target: PathBuf::from("/t/usr"),
                }],
                devices: vec!["null"],
                alloc_dir: PathBuf::from("/a/alloc"),
                owner: nobody,
                plugin_dirs: vec![PluginDir {
                    source: PathBuf::from("/d/csi/p"),
                    destination: PathBuf::from("/local/csi"),
                    propagation: Propagation::Bidirectional,
                }],
            }),
            cgroup_procs: vec![PathBuf::from("/cg/memory/csi-agent/a.t/cgroup.procs")],
            pid_ns: true,
            ipc_ns: false,
            caps: Some(0x5),
            no_new_privs: true,
        };
        let steps = describe_all(&ChildSetup::new(&launch, 40).unwrap());
        assert_eq!(
            steps,
            [
                "oom_score_adj 0",
                "cgroup /cg/memory/csi-agent/a.t/cgroup.procs",
                "pid /a/t.pid",
                "namespaces pid=true ipc=false",
                "fork, exit in /a/t.exit",
                "mount rec|slave /",
                "mount bind /t /t",
                "mount private /t",
                "mount bind|rec /usr /t/usr",
                "mount rec|slave /t/usr",
                "read-only rec /t/usr",
                "mount nosuid tmpfs /t/dev mode=755,size=65536k",
                "file /t/dev/null",
                "mount bind /dev/null /t/dev/null",
                "mkdir /t/dev/shm",
                "mount nosuid|nodev|noexec tmpfs /t/dev/shm mode=1777,size=65536k",
                "mkdir /t/dev/pts",
                "mount nosuid|noexec devpts /t/dev/pts newinstance,ptmxmode=0666,mode=0620",
                "symlink /t/dev/ptmx pts/ptmx",
                "symlink /t/dev/fd /proc/self/fd",
                "symlink /t/dev/stdin /proc/self/fd/0",
                "symlink /t/dev/stdout /proc/self/fd/1",
                "symlink /t/dev/stderr /proc/self/fd/2",
                "mount nosuid|nodev|noexec proc /t/proc",
                "mount nosuid|nodev tmpfs /t/secrets mode=0700,uid=65534,gid=65534,size=1m",
                "mount bind|rec /a/alloc /t/alloc",
                "mount rec|private /t/alloc",
                "mount bind|rec /d/csi/p /t/local/csi",
                "mount rec|shared /t/local/csi",
                "mount bind|rec /v /t/data",
                "mount rec|slave /t/data",
                "pivot /t",
                "bounding 0x5",
                "user 65534",
                "no_new_privs",
            ]
        );
    }

    #[test]
    fn a_raw_exec_task_keeps_the_host_root_without_the_control_socket() {
        let launch = Launch {
            command: "/bin/sh".into(),
            args: Vec::new(),
            env: BTreeMap::new(),
            cwd: PathBuf::from("/t"),
            work_dir: None,
            stdout: PathBuf::from("/t/logs/stdout"),
            stderr: PathBuf::from("/t/logs/stderr"),
            pid_file: PathBuf::from("/a/t.pid"),
            exit_record: PathBuf::from("/a/t.exit"),
            user: None,
            namespace: NamespacePlan {
                slave_root: true,
                slave: Vec::new(),
                mounts: Vec::new(),
                hide: vec![PathBuf::from("/d/control.sock")],
            },
            root: None,
            cgroup_procs: Vec::new(),
            pid_ns: false,
            ipc_ns: false,
            caps: None,
            no_new_privs: false,
        };
        let steps = describe_all(&ChildSetup::new(&launch, 40).unwrap());
        assert_eq!(
            steps,
            [
                "oom_score_adj 0",
                "pid /a/t.pid",
                "fork, exit in /a/t.exit",
                "mount rec|slave /",
                "mount bind /dev/null /d/control.sock",
            ]
        );
    }
}
