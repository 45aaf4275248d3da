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

pub fn stats(
    alloc_id: &str,
    usage: Vec<crate::task::alloc_stats::Usage>,
) -> pb::AllocStatsResponse {
    pb::AllocStatsResponse {
        alloc_id: alloc_id.to_string(),
        tasks: usage.into_iter().map(task_usage).collect(),
        ..Default::default()
    }
}

fn task_usage(u: crate::task::alloc_stats::Usage) -> pb::TaskUsage {
    let mut memory = pb::MemoryUsage::default();
    let mut put = |name: &str, value: Option<u64>, field: &mut u64| {
        if let Some(v) = value {
            *field = v;
            memory.measured.push(name.to_string());
        }
    };
    let m = u.memory;
    let (mut rss, mut cache, mut swap, mut usage, mut max) = (0, 0, 0, 0, 0);
    put("RSS", m.rss, &mut rss);
    put("Cache", m.cache, &mut cache);
    put("Swap", m.swap, &mut swap);
    put("Usage", m.usage, &mut usage);
    put("Max Usage", m.max_usage, &mut max);
    memory.rss = rss;
    memory.cache = cache;
    memory.swap = swap;
    memory.usage = usage;
    memory.max_usage = max;
    let c = u.cpu;
    let mut cpu = pb::CpuUsage {
        percent: c.percent.unwrap_or_default(),
        user_mode: c.user_mode.unwrap_or_default(),
        system_mode: c.system_mode.unwrap_or_default(),
        throttled_periods: c.throttled_periods.unwrap_or_default(),
        throttled_time: c.throttled_time_ns.unwrap_or_default(),
        total_mhz: c.total_mhz.unwrap_or_default(),
        ..Default::default()
    };
    for (name, there) in [
        ("Percent", c.percent.is_some()),
        ("System Mode", c.system_mode.is_some()),
        ("Throttled Periods", c.throttled_periods.is_some()),
        ("Throttled Time", c.throttled_time_ns.is_some()),
        ("User Mode", c.user_mode.is_some()),
    ] {
        if there {
            cpu.measured.push(name.to_string());
        }
    }
    pb::TaskUsage {
        task: u.task,
        source: u.source,
        note: u.note,
        memory: MessageField::some(memory),
        cpu: MessageField::some(cpu),
        ..Default::default()
    }
}
