//! `csi-agent alloc fs`: an alloc dir's listing, a file's content, or one
//! entry's stat (`-stat`), as Nomad's `alloc fs` shows them, as a table
//! or `-json`. The agent reads beneath the alloc dir and returns a bounded
//! part of a file per call (`MAX_FS_READ`); this command asks again until
//! the end. `-tail` starts at the last `-c` bytes, or the last `-n` lines
//! (found by reading back from the end `TAIL_CHUNK` at a time); `-f`
//! takes the agent's stream of what is appended (`AllocFsFollow`) until
//! the agent ends it, the alloc done.

use std::io::{self, Write};
use std::time::{Duration, UNIX_EPOCH};

use futures_util::StreamExt as _;

use super::args::{self, switch, value, Flag, UsageError};
use super::json::from_message;
use super::plugin_cmd::columns;
use super::{out, CliError};
use crate::api::client::{resolve_address, AgentClient};
use crate::grpc::block_on;
use crate::proto::agent as api;
use crate::units::format_timestamp;
use json::Value as Json;

pub const USAGE: &str = "\
usage: csi-agent alloc fs [-stat] [-H] [-json] [-f] [-tail] [-n LINES] [-c BYTES]
                          [-address ADDR] ALLOC [PATH]

  Lists a dir of the allocation's dir (alloc/, TASK/local, TASK/logs...),
  or prints a file; -stat shows the entry itself. PATH is relative to the
  alloc dir (default: the alloc dir itself) and never leads out of it: a
  symlink is listed with its target but not followed.

  -H        sizes in KiB, MiB... rather than bytes
  -json     a listing or a stat as JSON
  -tail     the end of the file: its last -n lines (10 unless -n or -c)
            or its last -c bytes
  -n LINES  with -tail, how many lines
  -c BYTES  with -tail, how many bytes
  -f        go on printing what is appended to the file, as tail -f does,
            until the alloc stops or the command is interrupted";

const FLAGS: &[Flag] = &[
    switch("stat"),
    switch("H"),
    switch("json"),
    switch("f"),
    switch("tail"),
    value("n"),
    value("c"),
    value("address"),
];

/// How many lines `-tail` prints without `-n` or `-c`, as Nomad's.
const DEFAULT_TAIL_LINES: u64 = 10;

/// How much of a file `-tail -n` reads back from its end per call.
const TAIL_CHUNK: u64 = 64 * 1024;

pub fn run(argv: &[String]) -> Result<(), CliError> {
    let args = args::parse(FLAGS, argv)?;
    args.at_most(2)?;
    let alloc = args.positional(0, "the ALLOC ID")?;
    let path = args.positional(1, "PATH").unwrap_or_default().to_string();
    let number = |flag: &str| -> Result<Option<u64>, CliError> {
        match args.value(flag) {
            None => Ok(None),
            Some(text) => text.parse().map(Some).map_err(|_| {
                UsageError::new(format!("-{flag} wants a whole number, not {text:?}")).into()
            }),
        }
    };
    let (lines, bytes) = (number("n")?, number("c")?);
    if (lines.is_some() || bytes.is_some()) && !args.switch("tail") {
        return Err(UsageError::new("-n and -c go with -tail").into());
    }
    if lines.is_some() && bytes.is_some() {
        return Err(UsageError::new("-n and -c cannot go together").into());
    }
    let client = AgentClient::connect(&resolve_address(args.value("address"))?)?;
    let human = args.switch("H");
    let first = client.alloc_fs(alloc, &path, args.switch("stat"), 0)?;
    let entry = first.entry.clone().unwrap_or_default();
    if args.switch("stat") || entry.is_dir {
        let shown = if args.switch("stat") {
            vec![entry]
        } else {
            first.entries
        };
        if args.switch("json") {
            let items: Vec<Json> = shown.iter().map(from_message).collect();
            let json = if args.switch("stat") {
                items.into_iter().next().unwrap_or(Json::Null)
            } else {
                Json::Array(items)
            };
            out::outln!("{}", json.pretty());
            return Ok(());
        }
        let mut rows = vec![vec![
            "Mode".to_string(),
            "Size".to_string(),
            "Modified Time".to_string(),
            "Name".to_string(),
        ]];
        rows.extend(shown.iter().map(|e| row(e, human)));
        print!("{}", columns(&rows));
        return Ok(());
    }
    let offset = if args.switch("tail") {
        match bytes {
            Some(n) => entry.size.saturating_sub(n),
            None => tail_lines_offset(
                &client,
                alloc,
                &path,
                entry.size,
                lines.unwrap_or(DEFAULT_TAIL_LINES),
            )?,
        }
    } else {
        0
    };
    let mut stdout = io::stdout().lock();
    if args.switch("f") {
        return follow(&client, alloc, &path, offset, &mut stdout);
    }
    let (mut data, mut eof) = if offset == 0 {
        (first.data, first.eof)
    } else {
        let next = client.alloc_fs(alloc, &path, false, offset)?;
        (next.data, next.eof)
    };
    let mut offset = offset;
    loop {
        stdout.write_all(&data).map_err(print_error)?;
        offset += data.len() as u64;
        if eof || data.is_empty() {
            break;
        }
        let next = client.alloc_fs(alloc, &path, false, offset)?;
        (data, eof) = (next.data, next.eof);
    }
    stdout.flush().map_err(print_error)
}

fn print_error(err: io::Error) -> CliError {
    CliError::Io {
        what: "failed to print the file".into(),
        err,
    }
}

/// Where the last `lines` lines of a file of `size` bytes start: read
/// back from its end [`TAIL_CHUNK`] at a time (a last line without its
/// newline counts as one).
fn tail_lines_offset(
    client: &AgentClient,
    alloc: &str,
    path: &str,
    size: u64,
    lines: u64,
) -> Result<u64, CliError> {
    if lines == 0 {
        return Ok(size);
    }
    let mut end = size;
    let mut seen = 0;
    while end > 0 {
        let start = end.saturating_sub(TAIL_CHUNK);
        let answer = client.alloc_fs(alloc, path, false, start)?;
        let len = ((end - start) as usize).min(answer.data.len());
        let chunk = &answer.data[..len];
        for (i, byte) in chunk.iter().enumerate().rev() {
            // The file's own last newline ends its last line.
            if *byte != b'\n' || start + i as u64 == size - 1 {
                continue;
            }
            seen += 1;
            if seen == lines {
                return Ok(start + i as u64 + 1);
            }
        }
        end = start;
    }
    Ok(0)
}

/// Prints the file from `offset`, then what is appended to it, until the
/// agent ends the stream (the alloc stopped) or the command is
/// interrupted.
fn follow(
    client: &AgentClient,
    alloc: &str,
    path: &str,
    offset: u64,
    stdout: &mut impl Write,
) -> Result<(), CliError> {
    let mut stream = client.alloc_fs_follow(alloc, path, offset)?;
    while let Some(item) = block_on(stream.next()) {
        let answer = item.map_err(|e| client.error(e))?;
        if answer.data.is_empty() {
            continue;
        }
        stdout.write_all(&answer.data).map_err(print_error)?;
        stdout.flush().map_err(print_error)?;
    }
    Ok(())
}

fn row(entry: &api::AllocFsEntry, human: bool) -> Vec<String> {
    let mut name = entry.name.clone();
    if entry.is_dir {
        name.push('/');
    }
    if !entry.link_target.is_empty() {
        name = format!("{name} -> {}", entry.link_target);
    }
    let modified = UNIX_EPOCH + Duration::from_secs(entry.modified_unix.max(0) as u64);
    let stamp = format_timestamp(modified);
    // Seconds are enough: the milliseconds of a file's time are not kept.
    let stamp = match stamp.split_once('.') {
        Some((secs, _)) => format!("{secs}Z"),
        None => stamp,
    };
    vec![
        mode_string(entry.mode),
        size_string(entry.size, human),
        stamp,
        name,
    ]
}

/// A mode as Go's `FileMode` prints it, as Nomad shows it: the type
/// (`d` dir, `L` symlink, `-` file...) then `rwx` for owner, group, other.
pub fn mode_string(mode: u32) -> String {
    let kind = match mode & libc::S_IFMT {
        libc::S_IFDIR => 'd',
        libc::S_IFLNK => 'L',
        libc::S_IFIFO => 'p',
        libc::S_IFSOCK => 'S',
        libc::S_IFCHR => 'c',
        libc::S_IFBLK => 'D',
        _ => '-',
    };
    let mut text = String::from(kind);
    for shift in [6, 3, 0] {
        let bits = (mode >> shift) & 7;
        text.push(if bits & 4 != 0 { 'r' } else { '-' });
        text.push(if bits & 2 != 0 { 'w' } else { '-' });
        text.push(if bits & 1 != 0 { 'x' } else { '-' });
    }
    text
}

fn size_string(size: u64, human: bool) -> String {
    if !human {
        return size.to_string();
    }
    let units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = size as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < units.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{size} B")
    } else {
        format!("{value:.1} {}", units[unit])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_and_sizes_print_as_nomads() {
        assert_eq!(mode_string(libc::S_IFDIR | 0o755), "drwxr-xr-x");
        assert_eq!(mode_string(libc::S_IFREG | 0o640), "-rw-r-----");
        assert_eq!(mode_string(libc::S_IFLNK | 0o777), "Lrwxrwxrwx");
        assert_eq!(size_string(1536, true), "1.5 KiB");
        assert_eq!(size_string(12, true), "12 B");
        assert_eq!(size_string(1536, false), "1536");
    }
}
