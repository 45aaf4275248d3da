//! Control groups, the file-system side: finding the hierarchies, making a
//! task's group with its limits, reading its OOM kills, removing it.
//!
//! Two layouts, as the host mounts them:
//!
//! - **v2** (unified, `cgroup2` at `/sys/fs/cgroup`): one dir per task,
//!   `<root>/csi-agent/<name>`, with `memory`, `cpu` and `cpuset` enabled in
//!   the `cgroup.subtree_control` of the root and of `csi-agent/`;
//! - **v1** (a mount per controller; a `cgroup2` mount beside them, as
//!   systemd's hybrid layout has at `/sys/fs/cgroup/unified`, holds no
//!   controller and is ignored): a dir per controller,
//!   `<memory>/csi-agent/<name>`, `<cpu>/csi-agent/<name>`, and
//!   `<cpuset>/csi-agent/<name>` when the task asks for cores.
//!
//! The limits are Nomad's ([`Limits`]): a hard memory limit with swap held
//! to it, a soft one (v1 `memory.soft_limit_in_bytes`, v2 `memory.low`),
//! CPU shares (v2 `cpu.weight`, mapped as runc maps them), and a cpuset of
//! the first CPUs no other task of the agent holds. A process joins a group
//! by writing its pid (or `0`, itself) to each dir's `cgroup.procs`
//! (which [`Group::create`] gives), as the task's child does before `exec`.

use std::collections::BTreeSet;
use std::fmt;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::thread;
use std::time::{Duration, Instant};

/// The dir under each hierarchy's root that holds the agent's task groups.
pub const BASE: &str = "csi-agent";

/// The controllers csi-agent sets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Controller {
    Memory,
    Cpu,
    Cpuset,
}

impl Controller {
    pub fn name(self) -> &'static str {
        match self {
            Controller::Memory => "memory",
            Controller::Cpu => "cpu",
            Controller::Cpuset => "cpuset",
        }
    }
}

/// The host's cgroup hierarchies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Hierarchy {
    /// cgroup v2: one tree at `root`.
    Unified { root: PathBuf },
    /// cgroup v1: the mount of each controller csi-agent sets, if any.
    Legacy {
        memory: Option<PathBuf>,
        cpu: Option<PathBuf>,
        cpuset: Option<PathBuf>,
    },
}

/// What a task may use, in the kernel's units.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Limits {
    /// The hard memory limit, in bytes; swap is held to it.
    pub memory_max: Option<u64>,
    /// The soft memory limit (reclaimed first above it), in bytes.
    pub memory_soft: Option<u64>,
    /// CPU shares (v1), relative to other groups: Nomad writes the task's
    /// MHz.
    pub cpu_shares: Option<u64>,
    /// How many CPUs the task has to itself.
    pub cores: Option<u64>,
}

/// A failed write or read of a cgroup file, naming it.
#[derive(Debug)]
pub struct Error {
    pub what: &'static str,
    pub path: PathBuf,
    pub err: io::Error,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}: {}", self.what, self.path.display(), self.err)
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.err)
    }
}

fn fail<'a>(what: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> Error + 'a {
    move |err| Error {
        what,
        path: path.to_path_buf(),
        err,
    }
}

fn write(path: &Path, value: &str) -> Result<(), Error> {
    fs::write(path, value).map_err(fail("cannot write", path))
}

fn read(path: &Path) -> Result<String, Error> {
    fs::read_to_string(path).map_err(fail("cannot read", path))
}

/// Creates `dir` if it is not there.
fn make_dir(dir: &Path) -> Result<(), Error> {
    match fs::create_dir(dir) {
        Err(err) if err.kind() != io::ErrorKind::AlreadyExists => {
            Err(fail("cannot create", dir)(err))
        }
        _ => Ok(()),
    }
}

impl Hierarchy {
    /// The host's hierarchies, from this process's mount table; `None`
    /// when no cgroup file system with a controller is mounted.
    pub fn detect() -> Option<Hierarchy> {
        let text = fs::read_to_string("/proc/self/mountinfo").ok()?;
        Hierarchy::from_mountinfo(&text)
    }

    /// The hierarchies a mount table shows: v1 when a v1 mount holds a
    /// controller csi-agent sets, else v2 when a `cgroup2` mount has
    /// controllers to give (its `cgroup.controllers` is read).
    pub fn from_mountinfo(text: &str) -> Option<Hierarchy> {
        let mut unified = None;
        let (mut memory, mut cpu, mut cpuset) = (None, None, None);
        for line in text.lines() {
            let Some((left, right)) = line.split_once(" - ") else {
                continue;
            };
            let Some(mount_point) = left.split(' ').nth(4) else {
                continue;
            };
            let mount_point = PathBuf::from(unescape(mount_point));
            let mut right = right.split(' ');
            let fs_type = right.next().unwrap_or("");
            let super_options = right.nth(1).unwrap_or("");
            match fs_type {
                "cgroup2" if unified.is_none() => unified = Some(mount_point),
                "cgroup" => {
                    for option in super_options.split(',') {
                        let slot = match option {
                            "memory" => &mut memory,
                            "cpu" => &mut cpu,
                            "cpuset" => &mut cpuset,
                            _ => continue,
                        };
                        slot.get_or_insert_with(|| mount_point.clone());
                    }
                }
                _ => {}
            }
        }
        if memory.is_some() || cpu.is_some() || cpuset.is_some() {
            return Some(Hierarchy::Legacy {
                memory,
                cpu,
                cpuset,
            });
        }
        let root = unified?;
        let controllers = fs::read_to_string(root.join("cgroup.controllers")).ok()?;
        (!controllers.trim().is_empty()).then_some(Hierarchy::Unified { root })
    }

    /// The version, as Nomad's `attr.os.cgroups.version` says it.
    pub fn version(&self) -> u8 {
        match self {
            Hierarchy::Unified { .. } => 2,
            Hierarchy::Legacy { .. } => 1,
        }
    }

    /// The names of the groups under csi-agent's own dir, in any of the
    /// hierarchies.
    pub fn group_names(&self) -> BTreeSet<String> {
        let roots: Vec<&Path> = match self {
            Hierarchy::Unified { root } => vec![root.as_path()],
            Hierarchy::Legacy {
                memory,
                cpu,
                cpuset,
            } => [memory, cpu, cpuset]
                .into_iter()
                .filter_map(|r| r.as_deref())
                .collect(),
        };
        order::set(
            roots
                .into_iter()
                .filter_map(|root| fs::read_dir(root.join(BASE)).ok())
                .flatten()
                .flatten()
                .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                .filter_map(|e| e.file_name().into_string().ok()),
        )
    }

    /// The group `name` (paths only: nothing is made).
    pub fn group(&self, name: &str) -> Group {
        let under = |root: &Path| root.join(BASE).join(name);
        match self {
            Hierarchy::Unified { root } => Group {
                unified: true,
                dirs: vec![(None, under(root))],
            },
            Hierarchy::Legacy {
                memory,
                cpu,
                cpuset,
            } => Group {
                unified: false,
                dirs: [
                    (Controller::Memory, memory),
                    (Controller::Cpu, cpu),
                    (Controller::Cpuset, cpuset),
                ]
                .into_iter()
                .filter_map(|(c, root)| root.as_deref().map(|r| (Some(c), under(r))))
                .collect(),
            },
        }
    }
}

/// Undoes mountinfo's octal escapes (`\040` for a space).
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\' && i + 4 <= bytes.len() {
            if let Some(n) = field
                .get(i + 1..i + 4)
                .and_then(|digits| u8::from_str_radix(digits, 8).ok())
            {
                out.push(n);
                i += 4;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// One task's group: a dir per controller (v1) or one dir (v2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Group {
    unified: bool,
    /// Each dir with its controller (`None` on v2, where one dir has all).
    dirs: Vec<(Option<Controller>, PathBuf)>,
}

impl Group {
    /// Where the group's memory files are (for reading them back).
    pub fn dir(&self, controller: Controller) -> Option<&Path> {
        self.dirs
            .iter()
            .find(|(c, _)| c.map_or(true, |c| c == controller))
            .map(|(_, d)| d.as_path())
    }

    /// Makes the group with `limits` written; on v1 the cpuset dir only
    /// when the limits ask for cores. Gives the `cgroup.procs` files a
    /// process writes itself to, to join it.
    pub fn create(&self, limits: &Limits) -> Result<Vec<PathBuf>, Error> {
        let mut procs = Vec::new();
        for (controller, dir) in &self.dirs {
            let Some(base) = dir.parent() else { continue };
            let Some(root) = base.parent() else { continue };
            match controller {
                None => {
                    make_dir(base)?;
                    enable_controllers(root)?;
                    enable_controllers(base)?;
                    make_dir(dir)?;
                    write_unified(dir, base, limits)?;
                }
                Some(Controller::Cpuset) => {
                    let Some(cores) = limits.cores else { continue };
                    // A v1 cpuset group starts with no CPUs and no
                    // memory nodes: the base gets its parent's.
                    make_dir(base)?;
                    for file in ["cpuset.cpus", "cpuset.mems"] {
                        if read(&base.join(file))?.trim().is_empty() {
                            write(&base.join(file), read(&root.join(file))?.trim())?;
                        }
                    }
                    make_dir(dir)?;
                    let cpus = pick_cpus(base, dir, cores)?;
                    write(&dir.join("cpuset.cpus"), &cpus)?;
                    write(
                        &dir.join("cpuset.mems"),
                        read(&base.join("cpuset.mems"))?.trim(),
                    )?;
                }
                Some(Controller::Memory) => {
                    make_dir(base)?;
                    make_dir(dir)?;
                    if let Some(max) = limits.memory_max {
                        write(&dir.join("memory.limit_in_bytes"), &max.to_string())?;
                        let swap = dir.join("memory.memsw.limit_in_bytes");
                        if swap.exists() {
                            write(&swap, &max.to_string())?;
                        }
                    }
                    if let Some(soft) = limits.memory_soft {
                        write(&dir.join("memory.soft_limit_in_bytes"), &soft.to_string())?;
                    }
                }
                Some(Controller::Cpu) => {
                    make_dir(base)?;
                    make_dir(dir)?;
                    if let Some(shares) = limits.cpu_shares {
                        write(&dir.join("cpu.shares"), &shares.max(2).to_string())?;
                    }
                }
            }
            procs.push(dir.join("cgroup.procs"));
        }
        Ok(procs)
    }

    /// Whether any of its dirs is there.
    pub fn exists(&self) -> bool {
        self.dirs.iter().any(|(_, d)| d.is_dir())
    }

    /// How many times the OOM killer killed a process of the group (v1
    /// `memory.oom_control`, v2 `memory.events`); `None` when the group or
    /// the count is not there (v1 before Linux 4.13).
    pub fn oom_kills(&self) -> Option<u64> {
        let dir = self.dir(Controller::Memory)?;
        let file = if self.unified {
            "memory.events"
        } else {
            "memory.oom_control"
        };
        let text = fs::read_to_string(dir.join(file)).ok()?;
        keyed(&text, "oom_kill")
    }

    /// How many times the memory limit was hit (v1 `memory.failcnt`, v2
    /// `memory.events` `max`): with a SIGKILL, an OOM kill on a kernel
    /// that does not count them.
    pub fn limit_hits(&self) -> Option<u64> {
        let dir = self.dir(Controller::Memory)?;
        if self.unified {
            keyed(&fs::read_to_string(dir.join("memory.events")).ok()?, "max")
        } else {
            fs::read_to_string(dir.join("memory.failcnt"))
                .ok()?
                .trim()
                .parse()
                .ok()
        }
    }

    /// The pids in the group.
    pub fn pids(&self) -> Vec<u32> {
        let mut pids: Vec<u32> = self
            .dirs
            .iter()
            .filter_map(|(_, d)| fs::read_to_string(d.join("cgroup.procs")).ok())
            .flat_map(|text| {
                text.lines()
                    .filter_map(|l| l.trim().parse().ok())
                    .collect::<Vec<u32>>()
            })
            .collect();
        order::sort(&mut pids);
        pids.dedup();
        pids
    }

    /// Removes the group's dirs if no process is in them, killing
    /// nothing; whether it is gone. A dir already gone is no error.
    pub fn remove_if_empty(&self) -> Result<bool, Error> {
        if !self.pids().is_empty() {
            return Ok(false);
        }
        for (_, dir) in &self.dirs {
            match fs::remove_dir(dir) {
                Err(err) if err.raw_os_error() == Some(libc::EBUSY) => return Ok(false),
                Err(err) if err.kind() != io::ErrorKind::NotFound => {
                    return Err(fail("cannot remove", dir)(err))
                }
                _ => {}
            }
        }
        Ok(true)
    }

    /// Kills what still runs in the group and removes its dirs, waiting up
    /// to `wait` for the killed processes to leave it. A dir already gone
    /// is no error.
    pub fn remove(&self, wait: Duration) -> Result<(), Error> {
        let deadline = Instant::now() + wait;
        loop {
            for pid in self.pids() {
                let _ = super::process::kill(pid, libc::SIGKILL);
            }
            let mut last = None;
            for (_, dir) in &self.dirs {
                match fs::remove_dir(dir) {
                    Err(err) if err.kind() != io::ErrorKind::NotFound => {
                        last = Some(fail("cannot remove", dir)(err));
                    }
                    _ => {}
                }
            }
            match last {
                None => return Ok(()),
                Some(err) if Instant::now() >= deadline => return Err(err),
                Some(_) => thread::sleep(Duration::from_millis(10)),
            }
        }
    }
}

/// Enables csi-agent's controllers, those `dir` has, for its children.
fn enable_controllers(dir: &Path) -> Result<(), Error> {
    let available = read(&dir.join("cgroup.controllers"))?;
    let enabled = read(&dir.join("cgroup.subtree_control")).unwrap_or_default();
    for controller in [Controller::Memory, Controller::Cpu, Controller::Cpuset] {
        let name = controller.name();
        let has = |text: &str| text.split_whitespace().any(|c| c == name);
        if has(&available) && !has(&enabled) {
            write(&dir.join("cgroup.subtree_control"), &format!("+{name}"))?;
        }
    }
    Ok(())
}

/// Writes the limits of a v2 group at `dir` (its parent `base`).
fn write_unified(dir: &Path, base: &Path, limits: &Limits) -> Result<(), Error> {
    if let Some(max) = limits.memory_max {
        write(&dir.join("memory.max"), &max.to_string())?;
        let swap = dir.join("memory.swap.max");
        if swap.exists() {
            write(&swap, "0")?;
        }
    }
    if let Some(soft) = limits.memory_soft {
        write(&dir.join("memory.low"), &soft.to_string())?;
    }
    if let Some(shares) = limits.cpu_shares {
        write(&dir.join("cpu.weight"), &cpu_weight(shares).to_string())?;
    }
    if let Some(cores) = limits.cores {
        write(&dir.join("cpuset.cpus"), &pick_cpus(base, dir, cores)?)?;
    }
    Ok(())
}

/// The v2 `cpu.weight` (1 to 10000) for v1 CPU shares (2 to 262144), as
/// runc maps them (and so Nomad).
pub fn cpu_weight(shares: u64) -> u64 {
    let shares = shares.clamp(2, 262_144);
    1 + ((shares - 2) * 9999) / 262_142
}

/// The value of `key` in a flat keyed file (`key value` lines).
pub fn keyed(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|line| {
        let (k, v) = line.split_once(' ')?;
        (k == key).then(|| v.trim().parse().ok()).flatten()
    })
}

/// `cores` CPUs for the group at `dir`: the first of its parent `base`'s
/// (effective) CPUs that no sibling group holds, then held ones if too
/// few are free.
fn pick_cpus(base: &Path, dir: &Path, cores: u64) -> Result<String, Error> {
    let effective = base.join("cpuset.cpus.effective");
    let parent = if effective.exists() {
        effective
    } else {
        base.join("cpuset.cpus")
    };
    let available = parse_cpus(read(&parent)?.trim()).unwrap_or_default();
    let mut held = Vec::new();
    if let Ok(entries) = fs::read_dir(base) {
        for entry in entries.flatten() {
            let path = entry.path();
            if path == dir || !path.is_dir() {
                continue;
            }
            if let Ok(text) = fs::read_to_string(path.join("cpuset.cpus")) {
                held.extend(parse_cpus(text.trim()).unwrap_or_default());
            }
        }
    }
    Ok(format_cpus(&choose_cpus(&available, &held, cores)))
}

/// The first `n` of `available` not in `held`, then held ones.
pub fn choose_cpus(available: &[u32], held: &[u32], n: u64) -> Vec<u32> {
    let n = usize::try_from(n).unwrap_or(usize::MAX);
    let free = available.iter().filter(|c| !held.contains(c));
    let taken = available.iter().filter(|c| held.contains(c));
    let mut out: Vec<u32> = free.chain(taken).take(n).copied().collect();
    order::sort(&mut out);
    out
}

/// A CPU list as the kernel writes it (`0-3,8`).
pub fn parse_cpus(text: &str) -> Option<Vec<u32>> {
    let mut out = Vec::new();
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (u32, u32) = (a.parse().ok()?, b.parse().ok()?);
                out.extend(a..=b);
            }
            None => out.push(part.parse().ok()?),
        }
    }
    Some(out)
}

/// CPUs as a list the kernel reads: `0,1,2` (ranges are not needed).
pub fn format_cpus(cpus: &[u32]) -> String {
    cpus.iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    const HYBRID: &str = "\
24 1 0:22 / /sys/fs/cgroup ro,nosuid - tmpfs tmpfs ro,mode=755
25 24 0:23 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
26 24 0:24 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
27 24 0:25 / /sys/fs/cgroup/cpu\\040acct rw,relatime - cgroup cgroup rw,cpuacct
28 24 0:26 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
29 24 0:27 / /sys/fs/cgroup/cpuset rw,relatime - cgroup cgroup rw,cpuset
";

    fn temp_dir(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("csi-agent-cgroup-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn a_hybrid_host_is_v1_with_a_mount_per_controller() {
        let h = Hierarchy::from_mountinfo(HYBRID).unwrap();
        assert_eq!(
            h,
            Hierarchy::Legacy {
                memory: Some("/sys/fs/cgroup/memory".into()),
                cpu: Some("/sys/fs/cgroup/cpu".into()),
                cpuset: Some("/sys/fs/cgroup/cpuset".into()),
            }
        );
        assert_eq!(h.version(), 1);
        let g = h.group("a1b2c3d4.web");
        assert_eq!(
            g.dir(Controller::Memory),
            Some(Path::new("/sys/fs/cgroup/memory/csi-agent/a1b2c3d4.web"))
        );
        assert_eq!(
            g.dir(Controller::Cpuset),
            Some(Path::new("/sys/fs/cgroup/cpuset/csi-agent/a1b2c3d4.web"))
        );
        assert_eq!(unescape("/a\\040b\\"), "/a b\\");
        assert_eq!(
            Hierarchy::from_mountinfo("1 0 0:1 / / rw - ext4 /dev/x rw\n"),
            None
        );
    }

    #[test]
    fn keyed_files_cpu_weights_and_cpu_lists() {
        let events = "low 0\nhigh 0\nmax 12\noom 2\noom_kill 1\n";
        assert_eq!(keyed(events, "oom_kill"), Some(1));
        assert_eq!(keyed(events, "oom"), Some(2));
        assert_eq!(keyed("oom_kill_disable 0\nunder_oom 0\n", "oom_kill"), None);
        // runc's mapping: the v1 default 1024 is about 39, 2 is 1.
        assert_eq!(cpu_weight(2), 1);
        assert_eq!(cpu_weight(1024), 39);
        assert_eq!(cpu_weight(500), 19);
        assert_eq!(cpu_weight(262_144), 10_000);
        assert_eq!(parse_cpus("0-3,8"), Some(vec![0, 1, 2, 3, 8]));
        assert_eq!(parse_cpus(""), Some(vec![]));
        assert_eq!(parse_cpus("x"), None);
        assert_eq!(choose_cpus(&[0, 1, 2, 3], &[0, 2], 2), vec![1, 3]);
        assert_eq!(choose_cpus(&[0, 1], &[0], 2), vec![0, 1]);
        assert_eq!(format_cpus(&[1, 3]), "1,3");
    }

    #[test]
    fn a_v2_group_gets_its_limits_and_its_controllers_enabled() {
        let root = temp_dir("v2");
        fs::write(
            root.join("cgroup.controllers"),
            "cpuset cpu io memory pids\n",
        )
        .unwrap();
        fs::write(root.join("cgroup.subtree_control"), "").unwrap();
        let base = root.join(BASE);
        fs::create_dir(&base).unwrap();
        fs::write(base.join("cgroup.controllers"), "cpuset cpu memory\n").unwrap();
        fs::write(base.join("cgroup.subtree_control"), "memory cpu cpuset\n").unwrap();
        fs::write(base.join("cpuset.cpus.effective"), "0-3\n").unwrap();
        fs::create_dir(base.join("other.t")).unwrap();
        fs::write(base.join("other.t/cpuset.cpus"), "0\n").unwrap();

        let h = Hierarchy::Unified { root: root.clone() };
        let g = h.group("a1.t");
        let procs = g
            .create(&Limits {
                memory_max: Some(32 << 20),
                memory_soft: Some(16 << 20),
                cpu_shares: Some(500),
                cores: Some(2),
            })
            .unwrap();
        let dir = base.join("a1.t");
        assert_eq!(procs, vec![dir.join("cgroup.procs")]);
        let file = |f: &str| fs::read_to_string(dir.join(f)).unwrap();
        assert_eq!(file("memory.max"), (32u64 << 20).to_string());
        assert_eq!(file("memory.low"), (16u64 << 20).to_string());
        assert_eq!(file("cpu.weight"), "19");
        assert_eq!(file("cpuset.cpus"), "1,2");
        // The root's controllers were enabled one by one (a plain file
        // keeps the last).
        assert_eq!(
            fs::read_to_string(root.join("cgroup.subtree_control")).unwrap(),
            "+cpuset"
        );
        assert!(g.exists());
        fs::write(dir.join("memory.events"), "max 3\noom 1\noom_kill 1\n").unwrap();
        assert_eq!(g.oom_kills(), Some(1));
        assert_eq!(g.limit_hits(), Some(3));
        assert!(g.pids().is_empty());
        let _ = fs::remove_dir_all(&root);
    }
}
