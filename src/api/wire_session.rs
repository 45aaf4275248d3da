//! The protobuf messages of `alloc exec` and `alloc fs` (`session.rs`),
//! mapped to and from the agent's own types: `wire.rs`'s part for the
//! sessions, in a file of its own.

use protobuf::MessageField;

use crate::proto::agent as pb;

pub fn exec_lookup(start: &pb::AllocExecStart) -> crate::task::exec_target::ExecLookup {
    crate::task::exec_target::ExecLookup {
        alloc_id: start.alloc_id.clone(),
        task: start.task.clone(),
    }
}

/// A terminal size as rows and columns; a missing or zero one is 24x80,
/// a terminal's customary default.
pub fn terminal_size(size: Option<&pb::TerminalSize>) -> (u16, u16) {
    let clamp = |n: u32, default: u16| match u16::try_from(n) {
        Ok(0) => default,
        Ok(n) => n,
        Err(_) => u16::MAX,
    };
    size.map_or((24, 80), |s| (clamp(s.rows, 24), clamp(s.cols, 80)))
}

pub fn exec_output(stdout: &[u8], stderr: &[u8]) -> pb::AllocExecOutput {
    pb::AllocExecOutput {
        stdout: stdout.to_vec(),
        stderr: stderr.to_vec(),
        ..Default::default()
    }
}

pub fn exec_exited(code: i32) -> pb::AllocExecOutput {
    pb::AllocExecOutput {
        exited: true,
        exit_code: code,
        ..Default::default()
    }
}

pub fn fs_request(req: &pb::AllocFsRequest) -> crate::task::alloc_fs::FsRequest {
    crate::task::alloc_fs::FsRequest {
        path: req.path.clone(),
        stat: req.stat,
        offset: req.offset,
    }
}

fn fs_entry(entry: crate::task::alloc_fs::FsEntry) -> pb::AllocFsEntry {
    pb::AllocFsEntry {
        name: entry.name,
        size: entry.size,
        mode: entry.mode,
        modified_unix: entry.modified_unix,
        is_dir: entry.is_dir,
        link_target: entry.link_target,
        ..Default::default()
    }
}

pub fn fs_answer(answer: crate::task::alloc_fs::FsAnswer) -> pb::AllocFsResponse {
    pb::AllocFsResponse {
        entry: MessageField::some(fs_entry(answer.entry)),
        entries: answer.entries.into_iter().map(fs_entry).collect(),
        data: answer.data,
        eof: answer.eof,
        ..Default::default()
    }
}
