//! The prepared start as bytes: what the agent hands the start helper
//! ([`super::helper`]) over its socket.
//!
//! The layout is the agent's own and lives only as long as one start, so
//! it has no versions beyond a check of its first bytes: `MAGIC`, the
//! length of the body (u32), then the body. Numbers are little-endian; a
//! string is its length (u32) and its bytes, without the NUL; an optional
//! string is a byte (0 none, 1 some) and then the string; a list is its
//! length (u32) and its items; a step is a tag byte and its fields in
//! declaration order. Anything short, long or unknown is an error that
//! says what was being read.
//!
//! The task's working directory is not in it: the helper starts there.
//! Its environment is, for the task's exec only: the helper itself runs
//! with none, so that only the task's process carries the task's
//! `CSI_AGENT_ALLOC_ID` (what a restarted agent looks for, in the tracked
//! process or its child, to re-adopt the task).

use std::ffi::{CStr, CString};
use std::fmt;

use super::child::{ChildSetup, Step};
use super::pid_ns::ExitRecord;
use super::syscall::MountFlags;
use crate::task::user::User;

const MAGIC: &[u8; 4] = b"CSIs";

/// One start, as the helper runs it.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Start {
    /// The program, found as `execvp` finds it (the task's `PATH`).
    pub(super) command: CString,
    /// The task's whole argument vector, the command first.
    pub(super) argv: Vec<CString>,
    /// The task's environment, `KEY=value` each.
    pub(super) env: Vec<CString>,
    pub(super) setup: ChildSetup,
}

/// Input the helper cannot read.
#[derive(Debug, PartialEq, Eq)]
pub(in crate::task) struct Corrupt(pub(in crate::task) String);

impl fmt::Display for Corrupt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Corrupt {}

pub(super) fn encode(start: &Start) -> Vec<u8> {
    let mut body = Writer(Vec::new());
    body.cstr(&start.command);
    for list in [&start.argv, &start.env] {
        body.u32(list.len());
        for item in list {
            body.cstr(item);
        }
    }
    let setup = &start.setup;
    body.flag(setup.pid_ns);
    body.flag(setup.ipc_ns);
    body.cstr(&setup.exit_record.dir);
    body.cstr(&setup.exit_record.name);
    for list in [&setup.early, &setup.steps] {
        body.u32(list.len());
        for step in list {
            body.step(step);
        }
    }
    frame(MAGIC, &body.0)
}

/// `body` behind `magic` and its length: one message of the encoding.
pub(in crate::task) fn frame(magic: &[u8; 4], body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(body.len() + 8);
    out.extend_from_slice(magic);
    out.extend_from_slice(&(body.len() as u32).to_le_bytes());
    out.extend_from_slice(body);
    out
}

/// The body of the message `bytes` (from [`frame`]), which must be
/// exactly one message behind `magic`; `what` names the message.
pub(in crate::task) fn unframe<'a>(
    magic: &[u8; 4],
    bytes: &'a [u8],
    what: &str,
) -> Result<&'a [u8], Corrupt> {
    if bytes.is_empty() {
        return Err(Corrupt(format!("no {what} was sent (empty input)")));
    }
    if bytes.len() < 8 || &bytes[..4] != magic {
        return Err(Corrupt(format!(
            "the input is not a {what} from this agent"
        )));
    }
    let len = u32::from_le_bytes(bytes[4..8].try_into().expect("4 bytes")) as usize;
    let body = &bytes[8..];
    if body.len() != len {
        return Err(Corrupt(format!(
            "the {what} is {} bytes long, not the {len} it announces (truncated or corrupt)",
            body.len()
        )));
    }
    Ok(body)
}

pub(super) fn decode(bytes: &[u8]) -> Result<Start, Corrupt> {
    let mut r = Reader(unframe(MAGIC, bytes, "start")?);
    let command = r.cstr("the command")?;
    let argv = r.cstrs("the argument count", "an argument")?;
    let env = r.cstrs("the environment's size", "an environment entry")?;
    let pid_ns = r.flag("the PID namespace flag")?;
    let ipc_ns = r.flag("the IPC namespace flag")?;
    let exit_record = ExitRecord {
        dir: r.cstr("the exit record's directory")?,
        name: r.cstr("the exit record's name")?,
    };
    let early = r.steps()?;
    let steps = r.steps()?;
    if !r.0.is_empty() {
        return Err(Corrupt(format!("{} bytes follow the last step", r.0.len())));
    }
    Ok(Start {
        command,
        argv,
        env,
        setup: ChildSetup {
            early,
            pid_ns,
            ipc_ns,
            exit_record,
            steps,
        },
    })
}

/// Writes the encoding's items; also the prepare helper's
/// (`task/prepare/`).
pub(in crate::task) struct Writer(pub(in crate::task) Vec<u8>);

impl Writer {
    pub(in crate::task) fn u8(&mut self, v: u8) {
        self.0.push(v);
    }
    pub(in crate::task) fn flag(&mut self, v: bool) {
        self.u8(u8::from(v));
    }
    pub(in crate::task) fn u32(&mut self, v: impl TryInto<u32>) {
        let v: u32 = v.try_into().ok().expect("a start's sizes fit in u32");
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    pub(in crate::task) fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    pub(in crate::task) fn bytes(&mut self, v: &[u8]) {
        self.u32(v.len());
        self.0.extend_from_slice(v);
    }
    pub(in crate::task) fn cstr(&mut self, v: &CStr) {
        self.bytes(v.to_bytes());
    }
    pub(in crate::task) fn opt_cstr(&mut self, v: Option<&CString>) {
        self.flag(v.is_some());
        if let Some(v) = v {
            self.cstr(v);
        }
    }
    fn step(&mut self, step: &Step) {
        match step {
            Step::Mount {
                source,
                target,
                fstype,
                flags,
                data,
                tolerate_gone,
                what,
            } => {
                self.u8(0);
                self.opt_cstr(source.as_ref());
                self.cstr(target);
                self.opt_cstr(fstype.as_ref());
                self.u64(flags.bits());
                self.opt_cstr(data.as_ref());
                self.flag(*tolerate_gone);
                self.bytes(what);
            }
            Step::ReadOnly {
                target,
                recursive,
                remount_flags,
                what,
            } => {
                self.u8(1);
                self.cstr(target);
                self.flag(*recursive);
                self.u64(remount_flags.bits());
                self.bytes(what);
            }
            Step::Mkdir { path } => {
                self.u8(2);
                self.cstr(path);
            }
            Step::CreateFile { path } => {
                self.u8(3);
                self.cstr(path);
            }
            Step::Symlink { target, link } => {
                self.u8(4);
                self.cstr(target);
                self.cstr(link);
            }
            Step::WritePid { path } => {
                self.u8(5);
                self.cstr(path);
            }
            Step::PivotRoot { root } => {
                self.u8(6);
                self.cstr(root);
            }
            Step::BecomeUser(user) => {
                self.u8(7);
                self.u32(user.uid);
                self.u32(user.gid);
            }
            Step::DropBounding { keep, last } => {
                self.u8(8);
                self.u64(*keep);
                self.u32(*last);
            }
            Step::SetCaps { caps, last } => {
                self.u8(9);
                self.u64(*caps);
                self.u32(*last);
            }
            Step::NoNewPrivs => self.u8(10),
            Step::JoinCgroup { procs } => {
                self.u8(11);
                self.cstr(procs);
            }
            Step::ResetOomScoreAdj => self.u8(12),
            Step::Chdir { path } => {
                self.u8(13);
                self.cstr(path);
            }
        }
    }
}

/// Reads the encoding's items, each error naming `what` was read.
pub(in crate::task) struct Reader<'a>(pub(in crate::task) &'a [u8]);

impl<'a> Reader<'a> {
    pub(in crate::task) fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], Corrupt> {
        if self.0.len() < n {
            return Err(Corrupt(format!("the message ends inside {what}")));
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }
    pub(in crate::task) fn u8(&mut self, what: &str) -> Result<u8, Corrupt> {
        Ok(self.take(1, what)?[0])
    }
    pub(in crate::task) fn flag(&mut self, what: &str) -> Result<bool, Corrupt> {
        match self.u8(what)? {
            0 => Ok(false),
            1 => Ok(true),
            other => Err(Corrupt(format!("{what} is {other}, neither 0 nor 1"))),
        }
    }
    pub(in crate::task) fn u32(&mut self, what: &str) -> Result<u32, Corrupt> {
        Ok(u32::from_le_bytes(
            self.take(4, what)?.try_into().expect("4 bytes"),
        ))
    }
    pub(in crate::task) fn u64(&mut self, what: &str) -> Result<u64, Corrupt> {
        Ok(u64::from_le_bytes(
            self.take(8, what)?.try_into().expect("8 bytes"),
        ))
    }
    /// A count of items, each at least one byte: a count larger than the
    /// bytes left is corrupt (and allocates nothing).
    pub(in crate::task) fn len(&mut self, what: &str) -> Result<usize, Corrupt> {
        let n = self.u32(what)? as usize;
        if n > self.0.len() {
            return Err(Corrupt(format!(
                "{what} is {n}, more than the {} bytes left",
                self.0.len()
            )));
        }
        Ok(n)
    }
    pub(in crate::task) fn bytes(&mut self, what: &str) -> Result<&'a [u8], Corrupt> {
        let n = self.u32(what)? as usize;
        self.take(n, what)
    }
    pub(in crate::task) fn cstr(&mut self, what: &str) -> Result<CString, Corrupt> {
        CString::new(self.bytes(what)?).map_err(|_| Corrupt(format!("{what} holds a NUL byte")))
    }
    pub(in crate::task) fn cstrs(
        &mut self,
        count: &str,
        what: &str,
    ) -> Result<Vec<CString>, Corrupt> {
        let n = self.len(count)?;
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            out.push(self.cstr(what)?);
        }
        Ok(out)
    }
    pub(in crate::task) fn opt_cstr(&mut self, what: &str) -> Result<Option<CString>, Corrupt> {
        if self.flag(what)? {
            self.cstr(what).map(Some)
        } else {
            Ok(None)
        }
    }
    /// A step's message or a symlink's target: the helper keeps them for
    /// its short life (it execs or exits), as the agent's are `'static`.
    fn leaked(&mut self, what: &str) -> Result<&'static [u8], Corrupt> {
        Ok(Box::leak(self.bytes(what)?.into()))
    }
    fn steps(&mut self) -> Result<Vec<Step>, Corrupt> {
        let n = self.len("a step count")?;
        let mut steps = Vec::with_capacity(n);
        for _ in 0..n {
            steps.push(self.step()?);
        }
        Ok(steps)
    }
    fn step(&mut self) -> Result<Step, Corrupt> {
        let step = match self.u8("a step's tag")? {
            0 => Step::Mount {
                source: self.opt_cstr("a mount's source")?,
                target: self.cstr("a mount's target")?,
                fstype: self.opt_cstr("a mount's type")?,
                flags: MountFlags::from_bits(self.u64("a mount's flags")?),
                data: self.opt_cstr("a mount's options")?,
                tolerate_gone: self.flag("a mount's tolerance")?,
                what: self.leaked("a mount's message")?,
            },
            1 => Step::ReadOnly {
                target: self.cstr("a read-only target")?,
                recursive: self.flag("a read-only's recursion")?,
                remount_flags: MountFlags::from_bits(self.u64("a read-only's flags")?),
                what: self.leaked("a read-only's message")?,
            },
            2 => Step::Mkdir {
                path: self.cstr("a directory")?,
            },
            3 => Step::CreateFile {
                path: self.cstr("a file")?,
            },
            4 => Step::Symlink {
                target: Box::leak(self.cstr("a symlink's target")?.into_boxed_c_str()),
                link: self.cstr("a symlink")?,
            },
            5 => Step::WritePid {
                path: self.cstr("the pid file")?,
            },
            6 => Step::PivotRoot {
                root: self.cstr("the new root")?,
            },
            7 => Step::BecomeUser(User {
                uid: self.u32("a uid")?,
                gid: self.u32("a gid")?,
            }),
            8 => Step::DropBounding {
                keep: self.u64("the bounding set")?,
                last: self.u32("the last capability")?,
            },
            9 => Step::SetCaps {
                caps: self.u64("the capabilities")?,
                last: self.u32("the last capability")?,
            },
            10 => Step::NoNewPrivs,
            11 => Step::JoinCgroup {
                procs: self.cstr("a cgroup.procs file")?,
            },
            12 => Step::ResetOomScoreAdj,
            13 => Step::Chdir {
                path: self.cstr("the working directory")?,
            },
            tag => return Err(Corrupt(format!("unknown step tag {tag}"))),
        };
        Ok(step)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(text: &str) -> CString {
        CString::new(text).unwrap()
    }

    /// A start with every kind of step.
    fn every_step() -> Start {
        Start {
            command: s("/bin/sh"),
            argv: vec![s("/bin/sh"), s("-c"), s("echo hi; sleep 1"), s("")],
            env: vec![s("PATH=/usr/bin:/bin"), s("NOMAD_TASK_NAME=t"), s("EMPTY=")],
            setup: ChildSetup {
                early: vec![
                    Step::ResetOomScoreAdj,
                    Step::JoinCgroup {
                        procs: s("/sys/fs/cgroup/csi-agent/a.t/cgroup.procs"),
                    },
                    Step::WritePid {
                        path: s("/a/t.pid"),
                    },
                ],
                pid_ns: true,
                ipc_ns: false,
                exit_record: ExitRecord {
                    dir: s("/a"),
                    name: s("t.exit"),
                },
                steps: vec![
                    Step::Mount {
                        source: None,
                        target: s("/"),
                        fstype: None,
                        flags: MountFlags::REC | MountFlags::SLAVE,
                        data: None,
                        tolerate_gone: true,
                        what: b"cannot make / a slave mount: ",
                    },
                    Step::Mount {
                        source: Some(s("tmpfs")),
                        target: s("/t/dev"),
                        fstype: Some(s("tmpfs")),
                        flags: MountFlags::NOSUID,
                        data: Some(s("mode=755")),
                        tolerate_gone: false,
                        what: b"cannot mount a tmpfs at ",
                    },
                    Step::ReadOnly {
                        target: s("/t/usr"),
                        recursive: true,
                        remount_flags: MountFlags::from_bits(
                            libc::MS_BIND | libc::MS_REMOUNT | libc::MS_RDONLY,
                        ),
                        what: b"cannot make chroot_env read-only at ",
                    },
                    Step::Mkdir {
                        path: s("/t/dev/shm"),
                    },
                    Step::CreateFile {
                        path: s("/t/dev/null"),
                    },
                    Step::Symlink {
                        target: c"/proc/self/fd",
                        link: s("/t/dev/fd"),
                    },
                    Step::PivotRoot { root: s("/t") },
                    Step::DropBounding {
                        keep: 0x5,
                        last: 40,
                    },
                    Step::BecomeUser(User {
                        uid: 65534,
                        gid: 65533,
                    }),
                    Step::SetCaps {
                        caps: u64::MAX,
                        last: 63,
                    },
                    Step::Chdir {
                        path: s("/srv/data"),
                    },
                    Step::NoNewPrivs,
                ],
            },
        }
    }

    #[test]
    fn a_start_with_every_step_survives_the_round_trip() {
        let start = every_step();
        assert_eq!(decode(&encode(&start)).unwrap(), start);
    }

    #[test]
    fn every_truncation_of_a_start_is_refused() {
        let bytes = encode(&every_step());
        for len in 0..bytes.len() {
            assert!(decode(&bytes[..len]).is_err(), "{len} bytes were accepted");
        }
        let err = decode(&bytes[..bytes.len() - 3]).unwrap_err();
        assert!(err.to_string().contains("truncated"), "{err}");
        assert_eq!(
            decode(&[]).unwrap_err().to_string(),
            "no start was sent (empty input)"
        );
    }

    /// The body of a start whose announced length matches, to reach the
    /// checks past the length.
    fn framed(body: &[u8]) -> Vec<u8> {
        let mut out = MAGIC.to_vec();
        out.extend_from_slice(&(body.len() as u32).to_le_bytes());
        out.extend_from_slice(body);
        out
    }

    #[test]
    fn corrupt_starts_are_refused_with_what_was_read() {
        let err = |bytes: &[u8]| decode(bytes).unwrap_err().to_string();
        assert_eq!(
            err(b"agent -config x"),
            "the input is not a start from this agent"
        );
        // A command with a NUL inside.
        assert_eq!(
            err(&framed(b"\x02\0\0\0a\0")),
            "the command holds a NUL byte"
        );
        // A huge argument count.
        let mut body = b"\x01\0\0\0a".to_vec();
        body.extend_from_slice(&u32::MAX.to_le_bytes());
        assert!(err(&framed(&body)).starts_with("the argument count is 4294967295"));
        // An unknown step tag, then bytes after the last step.
        let mut bytes = encode(&every_step());
        let good = bytes.clone();
        let tag = good.len() - 1; // NoNewPrivs, the last step, is one byte
        bytes[tag] = 99;
        assert_eq!(err(&bytes), "unknown step tag 99");
        let mut long = good[8..].to_vec();
        long.push(0);
        assert_eq!(err(&framed(&long)), "1 bytes follow the last step");
    }
}
