//! Sparse files: where a file's data lies, so that a copy of a volume's
//! backing file (a snapshot, a clone) copies its data and keeps its holes.
//!
//! [`data_extents`] asks the kernel with `lseek(2)`'s `SEEK_DATA` and
//! `SEEK_HOLE`. File systems that do not track holes answer as if the whole
//! file were data, so the answer is always usable: at worst the copy is not
//! sparse. `lseek` is one small function holding the only `unsafe` block.

use std::fs::File;
use std::io;
use std::ops::Range;
use std::os::fd::AsRawFd;

use super::cvt;

/// The byte ranges of `file` that hold data, in order; the rest of its
/// length reads as zeros. Moves the file offset: use positional I/O with
/// the file afterwards.
pub fn data_extents(file: &File) -> io::Result<Vec<Range<u64>>> {
    let len = file.metadata()?.len();
    let mut extents = Vec::new();
    let mut offset = 0;
    while offset < len {
        let start = match lseek(file, offset, libc::SEEK_DATA) {
            Ok(start) => start,
            // No data at or after `offset`: the rest is a hole.
            Err(err) if err.raw_os_error() == Some(libc::ENXIO) => break,
            Err(err) => return Err(err),
        };
        if start >= len {
            break;
        }
        // There is always a hole at the end of the file, so this succeeds.
        let end = lseek(file, start, libc::SEEK_HOLE)?.min(len);
        extents.push(start..end);
        offset = end;
    }
    Ok(extents)
}

/// `lseek(file, offset, whence)`: the resulting offset.
fn lseek(file: &File, offset: u64, whence: libc::c_int) -> io::Result<u64> {
    let offset =
        libc::off_t::try_from(offset).map_err(|_| io::Error::from_raw_os_error(libc::EOVERFLOW))?;
    // SAFETY: lseek takes a descriptor, an offset and a constant by value;
    // no memory is passed. The descriptor is `file`'s, open for the whole
    // call.
    let ret = cvt(unsafe { libc::lseek(file.as_raw_fd(), offset, whence) })?;
    Ok(ret as u64)
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::FileExt;

    use super::*;

    #[test]
    fn a_file_with_holes_has_its_written_ranges_as_data() {
        let path = std::env::temp_dir().join(format!("csi-agent-sparse-{}", std::process::id()));
        let file = File::options()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .unwrap();
        const MIB: u64 = 1 << 20;
        file.set_len(8 * MIB).unwrap();
        assert!(data_extents(&file).unwrap().is_empty(), "all hole");
        file.write_all_at(&[1; 4096], 2 * MIB).unwrap();
        file.write_all_at(&[2; 4096], 6 * MIB).unwrap();
        let extents = data_extents(&file).unwrap();
        // A file system may round extents to its blocks, or (without hole
        // tracking) call everything data; either way the data is covered
        // and the extents are ordered and within the file.
        for written in [2 * MIB, 6 * MIB] {
            assert!(
                extents
                    .iter()
                    .any(|e| e.start <= written && written + 4096 <= e.end),
                "{extents:?}"
            );
        }
        assert!(extents.windows(2).all(|w| w[0].end <= w[1].start));
        assert!(extents.iter().all(|e| e.start < e.end && e.end <= 8 * MIB));
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn an_empty_file_has_no_data() {
        let path =
            std::env::temp_dir().join(format!("csi-agent-sparse-empty-{}", std::process::id()));
        let file = File::create(&path).unwrap();
        assert!(data_extents(&file).unwrap().is_empty());
        std::fs::remove_file(&path).unwrap();
    }
}
