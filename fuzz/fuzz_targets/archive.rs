//! Fuzzes the archive readers (`src/task/artifact/`): tar, gzip'd tar,
//! zip and a lone gzip file, each unpacked into the bounded sink in a
//! fresh temp dir, opened and held as the artifact hook holds a task's
//! (so every entry is written by the kernel's beneath-resolving calls of
//! `sys::beneath`). The input's first byte picks the format. No input may panic a reader, write outside the temp dir or
//! get past the sink's bounds.

#![no_main]

use std::fs;
use std::io::{self, Write};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use libfuzzer_sys::fuzz_target;

// The readers and their sink, compiled from the crate's own source; they
// name each other as `super::`, which is this crate's root here, and the
// sink names `crate::sys`. The C shim under `ffi` is compiled by build.rs.
#[allow(dead_code)]
#[path = "../../src/task/artifact/ffi.rs"]
mod ffi;
#[allow(dead_code)]
#[path = "../../src/task/artifact/gzip.rs"]
mod gzip;
#[allow(dead_code)]
#[path = "../../src/sys/mod.rs"]
mod sys;
#[allow(dead_code)]
#[path = "../../src/task/artifact/tar.rs"]
mod tar;
#[allow(dead_code)]
#[path = "../../src/task/artifact/unpack.rs"]
mod unpack;
#[allow(dead_code)]
#[path = "../../src/task/artifact/zip.rs"]
mod zip;

use unpack::{Dir, Sink, UnpackLimits};

const LIMITS: UnpackLimits = UnpackLimits {
    file_count: 64,
    size: 1 << 20,
};

fuzz_target!(|data: &[u8]| {
    let Some((&kind, archive)) = data.split_first() else {
        return;
    };
    static RUN: AtomicU64 = AtomicU64::new(0);
    let base = std::env::temp_dir().join(format!(
        "csi-agent-fuzz-archive-{}-{}",
        std::process::id(),
        RUN.fetch_add(1, Ordering::Relaxed)
    ));
    let dest = base.join("dest");
    fs::create_dir_all(&dest).unwrap();
    let _ = unpack(kind % 4, archive, &base, &dest);
    check_within(&dest);
    fs::remove_dir_all(&base).unwrap();
});

fn unpack(kind: u8, archive: &[u8], base: &Path, dest: &Path) -> io::Result<()> {
    let mut sink = Sink::in_dir(Dir::open(dest)?, LIMITS);
    match kind {
        0 => tar::unpack(&mut io::Cursor::new(archive), &mut sink),
        1 => {
            let mut gz = gzip::GzipReader::new(io::Cursor::new(archive))?;
            tar::unpack(&mut gz, &mut sink)
        }
        2 => {
            let path = base.join("archive.zip");
            fs::File::create(&path)?.write_all(archive)?;
            zip::unpack(&mut fs::File::open(&path)?, &mut sink)
        }
        _ => {
            let mut gz = gzip::GzipReader::new(io::Cursor::new(archive))?;
            sink.file("file", 0o644, &mut gz)
        }
    }
}

/// Walks `dest`: every link it holds must point inside it, and its files
/// must hold no more than the sink allows.
fn check_within(dest: &Path) {
    let (mut files, mut bytes) = (0u64, 0u64);
    let mut stack = vec![dest.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in fs::read_dir(&dir).unwrap() {
            let entry = entry.unwrap();
            let meta = entry.path().symlink_metadata().unwrap();
            files += 1;
            if meta.is_dir() {
                stack.push(entry.path());
            } else if meta.file_type().is_symlink() {
                let target = fs::read_link(entry.path()).unwrap();
                assert!(target.is_relative(), "{:?} -> {target:?}", entry.path());
            } else {
                bytes += meta.len();
            }
        }
    }
    assert!(bytes <= LIMITS.size, "{bytes} bytes unpacked");
    assert!(
        files <= 4 * LIMITS.file_count + 16,
        "{files} entries unpacked"
    );
}
