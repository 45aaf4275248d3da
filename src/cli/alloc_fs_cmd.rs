//! `csi-agent alloc fs`: an alloc dir's listing, a file's content, or one
//! entry's stat (`-stat`), as Nomad's `alloc fs` shows them. The agent
//! reads beneath the alloc dir and returns a bounded part of a file per
//! call (`MAX_FS_READ`); this command asks again until the end.

use std::io::{self, Write};
use std::time::{Duration, UNIX_EPOCH};

use super::args::{self, switch, value, Flag};
use super::plugin_cmd::columns;
use super::CliError;
use crate::api::client::{resolve_address, AgentClient};
use crate::proto::agent as api;
use crate::units::format_timestamp;

pub const USAGE: &str = "\
usage: csi-agent alloc fs [-stat] [-H] [-address ADDR] ALLOC [PATH]

  Lists a dir of the allocation's dir (alloc/, TASK/local, TASK/logs...),
  or prints a file; -stat shows the entry itself. PATH is relative to the
  alloc dir (default: the alloc dir itself) and never leads out of it: a
  symlink is listed with its target but not followed. -H prints sizes
  in KiB, MiB... rather than bytes.";

const FLAGS: &[Flag] = &[switch("stat"), switch("H"), value("address")];

pub fn run(argv: &[String]) -> Result<(), CliError> {
    let args = args::parse(FLAGS, argv)?;
    args.at_most(2)?;
    let alloc = args.positional(0, "the ALLOC ID")?;
    let path = args.positional(1, "PATH").unwrap_or_default().to_string();
    let client = AgentClient::connect(&resolve_address(args.value("address"))?)?;
    let human = args.switch("H");
    let first = client.alloc_fs(alloc, &path, args.switch("stat"), 0)?;
    let entry = first.entry.clone().unwrap_or_default();
    let print_error = |err| CliError::Io {
        what: "failed to print the file".into(),
        err,
    };
    if args.switch("stat") || entry.is_dir {
        let mut rows = vec![vec![
            "Mode".to_string(),
            "Size".to_string(),
            "Modified Time".to_string(),
            "Name".to_string(),
        ]];
        let shown = if args.switch("stat") {
            vec![entry]
        } else {
            first.entries
        };
        rows.extend(shown.iter().map(|e| row(e, human)));
        print!("{}", columns(&rows));
        return Ok(());
    }
    let mut stdout = io::stdout().lock();
    stdout.write_all(&first.data).map_err(print_error)?;
    let (mut offset, mut eof) = (first.data.len() as u64, first.eof);
    while !eof {
        let next = client.alloc_fs(alloc, &path, false, offset)?;
        if next.data.is_empty() {
            break;
        }
        stdout.write_all(&next.data).map_err(print_error)?;
        offset += next.data.len() as u64;
        eof = next.eof;
    }
    stdout.flush().map_err(print_error)
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
