//! What a start asks of the kernel, and in which order: the child's side
//! of representative launches run in-process against the recording
//! [`Syscall`](super::syscall::Syscall), without root and without a fork.

use std::collections::BTreeMap;
use std::ffi::CString;
use std::path::{Path, PathBuf};

use super::child::ChildSetup;
use super::encoding::Start;
use super::helper::{self, Returned};
use super::perform::{self, Failed};
use super::pid_ns::{End, Role};
use super::syscall::{CStrArray, Call, MountFlags, RecordingSyscall};
use super::Launch;
use crate::mount::{self, Propagation};
use crate::task::mounts::{DriverMount, NamespacePlan};
use crate::task::root::{PluginDir, RootBind, RootPlan};
use crate::task::user::User;

/// The highest capability of the kernel the tests plan for, whatever
/// this machine's is: the bounding set's drops are listed one by one.
const LAST_CAP: u32 = 7;

const NOBODY: User = User {
    uid: 65534,
    gid: 65534,
};

fn p(path: &str) -> PathBuf {
    PathBuf::from(path)
}

/// A `raw_exec` task: the host's root, the control socket covered, one
/// control group, the agent's user and capabilities.
fn raw_exec() -> Launch {
    Launch {
        command: "/bin/sh".into(),
        args: vec!["-c".into(), "echo hi".into()],
        env: BTreeMap::from([("PATH".to_string(), "/bin".to_string())]),
        cwd: p("/t"),
        work_dir: None,
        stdout: p("/t/logs/stdout"),
        stderr: p("/t/logs/stderr"),
        pid_file: p("/a/t.pid"),
        exit_record: p("/a/t.exit"),
        user: None,
        namespace: NamespacePlan {
            slave_root: true,
            slave: Vec::new(),
            mounts: Vec::new(),
            hide: vec![p("/d/control.sock")],
        },
        root: None,
        cgroup_procs: vec![p("/sys/fs/cgroup/csi-agent/a.t/cgroup.procs")],
        pid_ns: false,
        ipc_ns: false,
        caps: None,
        no_new_privs: false,
    }
}

/// An `exec` task as nobody in a root of its own, with a `chroot_env`
/// bind, a plugin dir, a volume, its own PID namespace and two
/// capabilities.
fn exec() -> Launch {
    Launch {
        user: Some(NOBODY),
        namespace: NamespacePlan {
            slave_root: true,
            slave: Vec::new(),
            mounts: vec![DriverMount {
                source: p("/v"),
                target: p("/t/data"),
                read_only: false,
                propagation: Propagation::HostToTask,
            }],
            hide: Vec::new(),
        },
        root: Some(RootPlan {
            dir: p("/t"),
            binds: vec![RootBind {
                source: p("/usr"),
                target: p("/t/usr"),
            }],
            devices: vec!["null"],
            alloc_dir: p("/a/alloc"),
            owner: NOBODY,
            plugin_dirs: vec![PluginDir {
                source: p("/d/csi/p"),
                destination: p("/local/csi"),
                propagation: Propagation::Bidirectional,
            }],
        }),
        cgroup_procs: vec![p("/cg/memory/csi-agent/a.t/cgroup.procs")],
        pid_ns: true,
        caps: Some(0x5),
        no_new_privs: true,
        ..raw_exec()
    }
}

fn setup(launch: &Launch) -> ChildSetup {
    ChildSetup::new(launch, LAST_CAP).expect("a plan")
}

/// Runs the child's side of `setup` against `sys`.
fn run<'a>(setup: &'a ChildSetup, sys: &RecordingSyscall) -> Result<Role, Failed<'a>> {
    // SAFETY: the double forks nothing.
    unsafe { perform::run(setup, sys) }
}

/// The start of `launch` as the helper runs it after reading it: its
/// stdin set up, then [`helper::start_task`] to the exec.
fn start(launch: &Launch, sys: &RecordingSyscall) -> Vec<String> {
    let start = start_of(launch);
    helper::set_up_stdio(sys).expect("stdin set up");
    let ended = exec_start(&start, sys);
    assert!(
        matches!(&ended, Returned::ExecFailed(err) if err.raw_os_error() == Some(libc::ECANCELED)),
        "the double's exec returns: {ended:?}"
    );
    sys.lines()
}

fn start_of(launch: &Launch) -> Start {
    let c = |s: &str| CString::new(s).unwrap();
    let mut argv = vec![c(&launch.command)];
    argv.extend(launch.args.iter().map(|a| c(a)));
    Start {
        command: c(&launch.command),
        argv,
        env: launch
            .env
            .iter()
            .map(|(k, v)| c(&format!("{k}={v}")))
            .collect(),
        setup: setup(launch),
    }
}

fn exec_start<'a>(start: &'a Start, sys: &RecordingSyscall) -> Returned<'a> {
    let (argv, env) = (CStrArray::new(&start.argv), CStrArray::new(&start.env));
    // SAFETY: the double forks and execs nothing.
    unsafe { helper::start_task(sys, start, &argv, &env) }
}

/// The lines of the calls from the first that starts with `first` on.
fn from(lines: &[String], first: &str) -> Vec<String> {
    let at = lines
        .iter()
        .position(|l| l.starts_with(first))
        .unwrap_or_else(|| panic!("no {first:?} in {lines:#?}"));
    lines[at..].to_vec()
}

/// The mount(2) calls among `lines`.
fn mounts(lines: &[String]) -> Vec<String> {
    lines
        .iter()
        .filter(|l| l.starts_with("mount "))
        .cloned()
        .collect()
}

#[test]
fn a_raw_exec_start_joins_its_group_forks_covers_the_socket_and_execs() {
    let sys = RecordingSyscall::new();
    assert_eq!(
        start(&raw_exec(), &sys),
        [
            // The helper's stdin: the agent's socket moved, /dev/null.
            "dup_cloexec 0 3",
            "open /dev/null read",
            "dup2 4 0",
            "close 4",
            "signal PIPE default",
            "setsid",
            "open /proc/self/oom_score_adj write",
            "write 4 0",
            "close 4",
            "open /sys/fs/cgroup/csi-agent/a.t/cgroup.procs write",
            "write 4 0",
            "close 4",
            "open /a/t.pid truncate 0600",
            "getpid",
            "write 4 4242",
            "write 4 \\n",
            "close 4",
            "unshare mount",
            "open /a directory",
            "fork",
            "close 4",
            "parent death signal KILL",
            "mount none / rec|slave",
            "mount /dev/null /d/control.sock bind",
            "exec /bin/sh [/bin/sh -c echo hi] [PATH=/bin]",
        ]
    );
}

#[test]
fn an_exec_task_builds_its_root_pivots_then_drops_its_privileges() {
    let sys = RecordingSyscall::new();
    let setup = setup(&exec());
    assert_eq!(run(&setup, &sys).unwrap(), Role::Task);
    assert_eq!(
        sys.lines(),
        [
            "setsid",
            "open /proc/self/oom_score_adj write",
            "write 3 0",
            "close 3",
            "open /cg/memory/csi-agent/a.t/cgroup.procs write",
            "write 3 0",
            "close 3",
            "open /a/t.pid truncate 0600",
            "getpid",
            "write 3 4242",
            "write 3 \\n",
            "close 3",
            "unshare mount",
            "unshare pid",
            "open /a directory",
            "fork",
            "close 3",
            "parent death signal KILL",
            // The task's process, PID 1 of its namespace, builds its root.
            "mount none / rec|slave",
            "mount /t /t bind",
            "mount none /t private",
            "mount /usr /t/usr bind|rec",
            "mount none /t/usr rec|slave",
            "mount_setattr /t/usr rdonly rec",
            "mount tmpfs /t/dev tmpfs nosuid|strictatime mode=755,size=65536k",
            "open /t/dev/null create 0644",
            "close 3",
            "mount /dev/null /t/dev/null bind",
            "mkdir /t/dev/shm 0755",
            "mount tmpfs /t/dev/shm tmpfs nosuid|nodev|noexec mode=1777,size=65536k",
            "mkdir /t/dev/pts 0755",
            "mount devpts /t/dev/pts devpts nosuid|noexec newinstance,ptmxmode=0666,mode=0620",
            "symlink /t/dev/ptmx -> pts/ptmx",
            "symlink /t/dev/fd -> /proc/self/fd",
            "symlink /t/dev/stdin -> /proc/self/fd/0",
            "symlink /t/dev/stdout -> /proc/self/fd/1",
            "symlink /t/dev/stderr -> /proc/self/fd/2",
            "mount proc /t/proc proc nosuid|nodev|noexec",
            "mount tmpfs /t/secrets tmpfs nosuid|nodev mode=0700,uid=65534,gid=65534,size=1m",
            "mount /a/alloc /t/alloc bind|rec",
            "mount none /t/alloc rec|private",
            "mount /d/csi/p /t/local/csi bind|rec",
            "mount none /t/local/csi rec|shared",
            "mount /v /t/data bind|rec",
            "mount none /t/data rec|slave",
            // The pivot, the old root detached as a slave.
            "open / directory",
            "chdir /t",
            "pivot_root . .",
            "fchdir 3",
            "mount none . rec|slave",
            "umount . detach",
            "close 3",
            "chdir /",
            // Capabilities 0 and 2 kept in the bounding set, then the user.
            "drop bounding 1",
            "drop bounding 3",
            "drop bounding 4",
            "drop bounding 5",
            "drop bounding 6",
            "drop bounding 7",
            "setgroups 65534",
            "setgid 65534",
            "setuid 65534",
            "no_new_privs",
        ]
    );
}

#[test]
fn each_volume_is_bound_then_made_read_only_then_given_its_propagation() {
    let volume = |source: &str, target: &str, read_only, propagation| DriverMount {
        source: p(source),
        target: p(target),
        read_only,
        propagation,
    };
    let mut launch = raw_exec();
    launch.namespace = NamespacePlan {
        slave_root: false,
        slave: vec![p("/srv")],
        mounts: vec![
            volume("/v/rw", "/t/rw", false, Propagation::HostToTask),
            // A source that exists: its read-only remount keeps the
            // per-mount flags the host's /proc has, read in the plan.
            volume("/proc", "/t/ro", true, Propagation::Private),
            volume("/v/both", "/t/both", false, Propagation::Bidirectional),
        ],
        hide: Vec::new(),
    };
    let sys = RecordingSyscall::new();
    run(&setup(&launch), &sys).unwrap();
    let remount =
        MountFlags::from_bits(mount::read_only_remount_flags(Path::new("/proc")).unwrap());
    assert_eq!(
        mounts(&sys.lines()),
        [
            "mount none /srv slave".to_string(),
            "mount /v/rw /t/rw bind|rec".into(),
            "mount none /t/rw rec|slave".into(),
            "mount /proc /t/ro bind|rec".into(),
            format!("mount none /t/ro {remount}"),
            "mount none /t/ro rec|private".into(),
            "mount /v/both /t/both bind|rec".into(),
            "mount none /t/both rec|shared".into(),
        ]
    );
    assert!(
        remount.to_string().starts_with("remount|bind|rdonly"),
        "{remount}"
    );
}

#[test]
fn control_groups_are_joined_before_the_pid_file_and_any_namespace() {
    let mut launch = raw_exec();
    launch.cgroup_procs = vec![
        p("/sys/fs/cgroup/memory/csi-agent/a.t/cgroup.procs"),
        p("/sys/fs/cgroup/cpu/csi-agent/a.t/cgroup.procs"),
    ];
    let sys = RecordingSyscall::new();
    run(&setup(&launch), &sys).unwrap();
    let opens: Vec<String> = sys
        .lines()
        .into_iter()
        .filter(|l| l.starts_with("open ") || l.starts_with("unshare "))
        .collect();
    assert_eq!(
        opens,
        [
            "open /proc/self/oom_score_adj write",
            "open /sys/fs/cgroup/memory/csi-agent/a.t/cgroup.procs write",
            "open /sys/fs/cgroup/cpu/csi-agent/a.t/cgroup.procs write",
            "open /a/t.pid truncate 0600",
            "unshare mount",
            "open /a directory",
        ]
    );
}

#[test]
fn pid_and_ipc_namespaces_follow_the_mount_one_and_precede_the_fork() {
    for (pid_ns, ipc_ns, expected) in [
        (true, true, vec!["unshare mount", "unshare ipc|pid", "fork"]),
        (true, false, vec!["unshare mount", "unshare pid", "fork"]),
        (false, true, vec!["unshare mount", "unshare ipc", "fork"]),
        (false, false, vec!["unshare mount", "fork"]),
    ] {
        let launch = Launch {
            pid_ns,
            ipc_ns,
            ..exec()
        };
        let sys = RecordingSyscall::new();
        run(&setup(&launch), &sys).unwrap();
        let namespaces: Vec<String> = sys
            .lines()
            .into_iter()
            .filter(|l| l.starts_with("unshare") || l == "fork")
            .collect();
        assert_eq!(namespaces, expected, "pid_ns {pid_ns}, ipc_ns {ipc_ns}");
    }
}

#[test]
fn a_task_of_another_user_keeps_only_the_bounding_set() {
    let launch = Launch {
        work_dir: Some(p("/srv/work")),
        ..exec()
    };
    let sys = RecordingSyscall::new();
    let lines = start(&launch, &sys);
    assert_eq!(
        from(&lines, "drop bounding"),
        [
            "drop bounding 1",
            "drop bounding 3",
            "drop bounding 4",
            "drop bounding 5",
            "drop bounding 6",
            "drop bounding 7",
            // The only group, then the group, then the user; setuid
            // cleared the other sets.
            "setgroups 65534",
            "setgid 65534",
            "setuid 65534",
            "no_new_privs",
            // Its work_dir, entered as the user, in its root.
            "chdir /srv/work",
            "exec /bin/sh [/bin/sh -c echo hi] [PATH=/bin]",
        ]
    );
}

#[test]
fn a_root_task_gets_its_capabilities_in_every_set_and_the_ambient_one() {
    let launch = Launch {
        user: None,
        no_new_privs: false,
        ..exec()
    };
    let sys = RecordingSyscall::new();
    run(&setup(&launch), &sys).unwrap();
    assert_eq!(
        from(&sys.lines(), "drop bounding"),
        [
            "drop bounding 1",
            "drop bounding 3",
            "drop bounding 4",
            "drop bounding 5",
            "drop bounding 6",
            "drop bounding 7",
            "capset 0x5",
            "raise ambient 0",
            "raise ambient 2",
        ]
    );
}

#[test]
fn a_task_with_the_agents_capabilities_makes_no_capability_call() {
    let sys = RecordingSyscall::new();
    run(&setup(&raw_exec()), &sys).unwrap();
    let caps = sys.calls().into_iter().filter(|call| {
        matches!(
            call,
            Call::DropBounding(_)
                | Call::Capset(_)
                | Call::RaiseAmbient(_)
                | Call::SetNoNewPrivs
                | Call::Setgroups(_)
                | Call::Setgid(_)
                | Call::Setuid(_)
        )
    });
    assert_eq!(caps.count(), 0);
}

#[test]
fn the_waiter_records_the_task_s_status_and_ends_as_it_did() {
    for (status, end) in [
        (3 << 8, End::Exited(3)),
        (libc::SIGKILL, End::Signalled(libc::SIGKILL)),
    ] {
        let sys = RecordingSyscall::new();
        sys.fork_as_parent(77);
        sys.wait_gives(status);
        let setup = setup(&exec());
        assert_eq!(run(&setup, &sys).unwrap(), Role::Waiter(end));
        assert_eq!(
            from(&sys.lines(), "open /a directory"),
            [
                "open /a directory".to_string(),
                "fork".into(),
                // Every descriptor but stdio and the record's dir closed:
                // the agent's status socket among them.
                "close_range 4 4294967295".into(),
                "signal TERM ignore".into(),
                "signal INT ignore".into(),
                "signal HUP ignore".into(),
                "signal QUIT ignore".into(),
                "signal USR1 ignore".into(),
                "signal USR2 ignore".into(),
                "signal PIPE ignore".into(),
                "signal ALRM ignore".into(),
                "wait 77".into(),
                "openat 3 t.exit truncate nofollow 0600".into(),
                "getpid".into(),
                format!("write 4 4242 {status}\\n"),
                "fsync 4".into(),
                "fsync 3".into(),
                "close 4".into(),
            ],
            "the waiter mounts nothing, its task does"
        );
    }
}

#[test]
fn a_waiter_whose_wait_fails_records_nothing_and_ends_with_127() {
    let sys = RecordingSyscall::new();
    sys.fork_as_parent(77);
    sys.fail_first(libc::ECHILD, |call| matches!(call, Call::Wait(_)));
    let setup = setup(&raw_exec());
    assert_eq!(run(&setup, &sys).unwrap(), Role::Waiter(End::Exited(127)));
    assert_eq!(sys.lines().last().unwrap(), "wait 77");
}

#[test]
fn a_failing_mount_names_its_target_and_nothing_after_it_is_called() {
    let sys = RecordingSyscall::new();
    sys.fail_first(libc::EACCES, |call| call.mounts_at("/t/data"));
    let launch = exec();
    let start = start_of(&launch);
    let Returned::StepFailed(failed) = exec_start(&start, &sys) else {
        panic!("the volume's bind fails the start");
    };
    assert_eq!(failed.to_string(), "cannot bind-mount a volume at /t/data");
    assert_eq!(failed.err.raw_os_error(), Some(libc::EACCES));
    assert!(sys.calls().last().unwrap().mounts_at("/t/data"));
    let calls = sys.calls().len();

    // The helper writes the step to the task's stderr log, as the agent
    // reads it back (`child_error_line`).
    let err = failed.report(&sys);
    assert_eq!(err.raw_os_error(), Some(libc::EACCES));
    let written: Vec<u8> = sys.calls()[calls..]
        .iter()
        .flat_map(|call| match call {
            Call::Write { fd: 2, bytes } => bytes.clone(),
            other => panic!("{other} after the failed mount"),
        })
        .collect();
    assert_eq!(
        String::from_utf8(written).unwrap(),
        "csi-agent: cannot bind-mount a volume at /t/data\n"
    );
}

#[test]
fn a_host_mount_gone_since_the_plan_is_passed_over_and_nothing_else_is() {
    let mut launch = raw_exec();
    launch.namespace.slave_root = false;
    launch.namespace.slave = vec![p("/gone"), p("/srv")];
    launch.namespace.hide = vec![p("/d/control.sock")];
    for errno in [libc::EINVAL, libc::ENOENT] {
        let sys = RecordingSyscall::new();
        sys.fail_first(errno, |call| call.mounts_at("/gone"));
        sys.fail_first(errno, |call| call.mounts_at("/d/control.sock"));
        run(&setup(&launch), &sys).expect("gone mounts are passed over");
        assert_eq!(
            mounts(&sys.lines()),
            [
                "mount none /gone slave",
                "mount none /srv slave",
                "mount /dev/null /d/control.sock bind",
            ]
        );
    }
    let sys = RecordingSyscall::new();
    sys.fail_first(libc::EPERM, |call| call.mounts_at("/gone"));
    let setup = setup(&launch);
    let failed = run(&setup, &sys).unwrap_err();
    assert_eq!(
        failed.to_string(),
        "cannot make a host mount a slave: /gone"
    );
    assert!(sys.calls().last().unwrap().mounts_at("/gone"));
}

#[test]
fn without_mount_setattr_chroot_env_is_remounted_read_only_at_its_top() {
    let sys = RecordingSyscall::new();
    sys.fail_first(libc::ENOSYS, |call| {
        matches!(call, Call::MountSetattrReadOnly { .. })
    });
    let setup = setup(&exec());
    run(&setup, &sys).unwrap();
    let lines = sys.lines();
    let after = from(&lines, "mount_setattr /t/usr");
    let remount = MountFlags::from_bits(mount::read_only_remount_flags(Path::new("/usr")).unwrap());
    assert_eq!(after[1], format!("mount none /t/usr {remount}"));

    let sys = RecordingSyscall::new();
    sys.fail_first(libc::EPERM, |call| {
        matches!(call, Call::MountSetattrReadOnly { .. })
    });
    let failed = run(&setup, &sys).unwrap_err();
    assert_eq!(
        failed.to_string(),
        "cannot make chroot_env read-only at /t/usr"
    );
    assert_eq!(
        sys.lines().last().unwrap(),
        "mount_setattr /t/usr rdonly rec"
    );
}

#[test]
fn a_failed_pivot_root_closes_the_old_root_and_stops_the_start() {
    let sys = RecordingSyscall::new();
    sys.fail_first(libc::EINVAL, |call| matches!(call, Call::PivotRoot { .. }));
    let setup = setup(&exec());
    let failed = run(&setup, &sys).unwrap_err();
    assert_eq!(failed.to_string(), "cannot pivot_root into /t");
    assert_eq!(
        from(&sys.lines(), "open / directory"),
        ["open / directory", "chdir /t", "pivot_root . .", "close 3"]
    );
}

#[test]
fn a_failing_setuid_stops_the_start_before_no_new_privs_and_the_exec() {
    let sys = RecordingSyscall::new();
    sys.fail_first(libc::EPERM, |call| matches!(call, Call::Setuid(_)));
    let launch = exec();
    let start = start_of(&launch);
    let Returned::StepFailed(failed) = exec_start(&start, &sys) else {
        panic!("setuid fails the start");
    };
    assert_eq!(failed.to_string(), "cannot switch user");
    assert_eq!(sys.lines().last().unwrap(), "setuid 65534");
}

#[test]
fn a_failed_exec_is_the_start_s_error_with_no_step_named() {
    let sys = RecordingSyscall::new();
    sys.fail_first(libc::ENOENT, |call| matches!(call, Call::Exec { .. }));
    let launch = raw_exec();
    let start = start_of(&launch);
    match exec_start(&start, &sys) {
        Returned::ExecFailed(err) => assert_eq!(err.raw_os_error(), Some(libc::ENOENT)),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_missing_work_dir_is_named_in_the_error() {
    let launch = Launch {
        work_dir: Some(p("/srv/missing")),
        ..raw_exec()
    };
    let sys = RecordingSyscall::new();
    sys.fail_first(
        libc::ENOENT,
        |call| matches!(call, Call::Chdir(path) if path.as_bytes() == b"/srv/missing"),
    );
    let setup = setup(&launch);
    let failed = run(&setup, &sys).unwrap_err();
    assert_eq!(
        failed.to_string(),
        "cannot enter the working directory /srv/missing"
    );
}

#[test]
fn the_oom_score_adjustment_may_fail_a_control_group_join_may_not() {
    let setup = setup(&raw_exec());
    let sys = RecordingSyscall::new();
    sys.fail_first(libc::EACCES, |call| matches!(call, Call::Write { .. }));
    run(&setup, &sys).expect("the agent's adjustment is kept");
    assert_eq!(
        sys.lines()[1..3],
        ["open /proc/self/oom_score_adj write", "write 3 0"]
    );

    let sys = RecordingSyscall::new();
    // setsid, then open, write and close of oom_score_adj; then open and
    // write of cgroup.procs.
    sys.fail_call(5, libc::EBUSY);
    let failed = run(&setup, &sys).unwrap_err();
    assert_eq!(
        failed.to_string(),
        "cannot join the cgroup /sys/fs/cgroup/csi-agent/a.t/cgroup.procs"
    );
    assert_eq!(
        from(&sys.lines(), "open /sys/fs/cgroup"),
        [
            "open /sys/fs/cgroup/csi-agent/a.t/cgroup.procs write",
            "write 3 0",
            "close 3",
        ]
    );
}
