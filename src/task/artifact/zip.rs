//! zip archives unpacked into a [`Sink`]: the central directory read from
//! the end of the file, each entry stored or deflated (through zlib's raw
//! inflate), its CRC-32 and size checked while it is written (a mismatch
//! removes the half-written file), unix modes and symlinks kept when the
//! archive was made on unix. Encrypted entries and zip64 archives are
//! refused by name.

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};

use super::gzip::{crc32_update, GzipReader};
use super::unpack::Sink;

const EOCD_SIG: u32 = 0x0605_4b50;
const CENTRAL_SIG: u32 = 0x0201_4b50;
const LOCAL_SIG: u32 = 0x0403_4b50;
/// The end record's fixed part, and the most its comment adds.
const EOCD_LEN: u64 = 22;
const MAX_COMMENT: u64 = 0xffff;
/// The longest symlink target read.
const MAX_LINK: u64 = 4096;
/// The largest central directory read into memory: room for the most
/// entries a zip without zip64 holds (65,535), with names of 1 KiB.
pub const MAX_DIRECTORY: u64 = 64 << 20;

fn bad(message: impl Into<String>) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("zip: {}", message.into()),
    )
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// One entry of the central directory.
struct Entry {
    name: String,
    method: u16,
    encrypted: bool,
    crc: u32,
    compressed: u64,
    size: u64,
    /// The unix mode, when the archive was made on unix.
    mode: Option<u32>,
    local_header: u64,
}

/// Reads the central directory.
fn directory(file: &mut File) -> io::Result<Vec<Entry>> {
    let len = file.seek(SeekFrom::End(0))?;
    if len < EOCD_LEN {
        return Err(bad("too short to be a zip archive"));
    }
    let tail_len = len.min(EOCD_LEN + MAX_COMMENT);
    let mut tail = vec![0u8; tail_len as usize];
    file.seek(SeekFrom::Start(len - tail_len))?;
    file.read_exact(&mut tail)?;
    let at = (0..=tail.len() - EOCD_LEN as usize)
        .rev()
        .find(|&i| u32_at(&tail, i) == EOCD_SIG)
        .ok_or_else(|| bad("no end of central directory record"))?;
    let end = &tail[at..];
    let count = u16_at(end, 10);
    let size = u32_at(end, 12);
    let offset = u32_at(end, 16);
    if count == 0xffff || size == 0xffff_ffff || offset == 0xffff_ffff {
        return Err(bad("zip64 archives are not supported"));
    }
    if offset as u64 + size as u64 > len {
        return Err(bad("the central directory lies past the end"));
    }
    if size as u64 > MAX_DIRECTORY {
        return Err(bad(format!(
            "a central directory of {size} bytes, more than {MAX_DIRECTORY} (MAX_DIRECTORY)"
        )));
    }
    let mut dir = vec![0u8; size as usize];
    file.seek(SeekFrom::Start(offset as u64))?;
    file.read_exact(&mut dir)?;
    let mut entries = Vec::with_capacity(count as usize);
    let mut pos = 0;
    for _ in 0..count {
        if pos + 46 > dir.len() || u32_at(&dir, pos) != CENTRAL_SIG {
            return Err(bad("a central directory entry is damaged"));
        }
        let h = &dir[pos..];
        let name_len = u16_at(h, 28) as usize;
        let extra_len = u16_at(h, 30) as usize;
        let comment_len = u16_at(h, 32) as usize;
        let next = pos + 46 + name_len + extra_len + comment_len;
        if next > dir.len() {
            return Err(bad("a central directory entry is cut short"));
        }
        let made_on_unix = u16_at(h, 4) >> 8 == 3;
        let external = u32_at(h, 38);
        let compressed = u32_at(h, 20);
        let size = u32_at(h, 24);
        let local_header = u32_at(h, 42);
        if compressed == 0xffff_ffff || size == 0xffff_ffff || local_header == 0xffff_ffff {
            return Err(bad("zip64 entries are not supported"));
        }
        entries.push(Entry {
            name: String::from_utf8_lossy(&h[46..46 + name_len]).into_owned(),
            method: u16_at(h, 10),
            encrypted: u16_at(h, 8) & 1 != 0,
            crc: u32_at(h, 16),
            compressed: compressed as u64,
            size: size as u64,
            mode: made_on_unix.then_some(external >> 16).filter(|&m| m != 0),
            local_header: local_header as u64,
        });
        pos = next;
    }
    Ok(entries)
}

/// An entry's bytes, checked against its size and CRC-32 at their end.
struct Checked<R> {
    inner: R,
    crc: u32,
    read: u64,
    want_crc: u32,
    want_size: u64,
}

impl<R: Read> Read for Checked<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.crc = crc32_update(self.crc, &buf[..n]);
        self.read += n as u64;
        if self.read > self.want_size {
            return Err(bad("an entry is longer than its size"));
        }
        if n == 0 && !buf.is_empty() && (self.read != self.want_size || self.crc != self.want_crc) {
            return Err(bad("an entry's CRC-32 or size does not match"));
        }
        Ok(n)
    }
}

/// The reader of `entry`'s bytes, from the start of its local header.
fn content<'f>(file: &'f mut File, entry: &Entry) -> io::Result<Box<dyn Read + 'f>> {
    if entry.encrypted {
        return Err(bad(format!("entry {:?} is encrypted", entry.name)));
    }
    let mut local = [0u8; 30];
    file.seek(SeekFrom::Start(entry.local_header))?;
    file.read_exact(&mut local)?;
    if u32_at(&local, 0) != LOCAL_SIG {
        return Err(bad(format!("entry {:?}: no local header", entry.name)));
    }
    let skip = u16_at(&local, 26) as i64 + u16_at(&local, 28) as i64;
    file.seek(SeekFrom::Current(skip))?;
    let raw = io::Read::take(file, entry.compressed);
    let plain: Box<dyn Read + 'f> = match entry.method {
        0 => Box::new(raw),
        8 => Box::new(GzipReader::raw(raw)?),
        other => {
            return Err(bad(format!(
                "entry {:?}: compression method {other} is not supported (stored and deflate are)",
                entry.name
            )))
        }
    };
    Ok(Box::new(Checked {
        inner: plain,
        crc: 0,
        read: 0,
        want_crc: entry.crc,
        want_size: entry.size,
    }))
}

/// Unpacks the zip archive `file` into `sink`.
pub fn unpack(file: &mut File, sink: &mut Sink) -> io::Result<()> {
    let entries = directory(file)?;
    for entry in &entries {
        let kind = entry.mode.map(|m| m & 0o170000);
        if entry.name.ends_with('/') || kind == Some(0o040000) {
            sink.dir(&entry.name, entry.mode.unwrap_or(0o755))?;
        } else if kind == Some(0o120000) {
            let mut target = String::new();
            content(file, entry)?
                .take(MAX_LINK + 1)
                .read_to_string(&mut target)?;
            if target.len() as u64 > MAX_LINK {
                return Err(bad(format!(
                    "symlink {:?} has a target longer than {MAX_LINK} bytes (MAX_LINK)",
                    entry.name
                )));
            }
            sink.symlink(&entry.name, &target)?;
        } else {
            let mode = entry.mode.unwrap_or(0o644);
            sink.file(&entry.name, mode, &mut content(file, entry)?)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::unpack::tests::temp_dir;
    use super::super::unpack::UnpackLimits;
    use super::*;
    use std::fs;
    use std::os::unix::fs::PermissionsExt;
    use std::process::Command;

    const LIMITS: UnpackLimits = UnpackLimits {
        file_count: 100,
        size: 1 << 20,
    };

    /// A zip of `(name, data)` entries, stored, made by us: zip(1) will
    /// not write names with `..`.
    fn stored(entries: &[(&str, &[u8])]) -> Vec<u8> {
        let with_modes: Vec<_> = entries.iter().map(|(n, d)| (*n, *d, 0)).collect();
        stored_with_modes(&with_modes)
    }

    /// [`stored`], each entry with a unix mode (0 for none).
    fn stored_with_modes(entries: &[(&str, &[u8], u32)]) -> Vec<u8> {
        let mut out = Vec::new();
        let mut central = Vec::new();
        for (name, data, mode) in entries {
            let offset = out.len() as u32;
            let crc = crc32_update(0, data);
            let mut local = Vec::new();
            local.extend(LOCAL_SIG.to_le_bytes());
            local.extend([20, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
            local.extend(crc.to_le_bytes());
            local.extend((data.len() as u32).to_le_bytes());
            local.extend((data.len() as u32).to_le_bytes());
            local.extend((name.len() as u16).to_le_bytes());
            local.extend([0, 0]);
            local.extend(name.as_bytes());
            out.extend(&local);
            out.extend(*data);
            central.extend(CENTRAL_SIG.to_le_bytes());
            // Made on unix (3), so the external attributes hold a mode.
            central.extend([20, 3, 20, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
            central.extend(crc.to_le_bytes());
            central.extend((data.len() as u32).to_le_bytes());
            central.extend((data.len() as u32).to_le_bytes());
            central.extend((name.len() as u16).to_le_bytes());
            central.extend([0u8; 8]);
            central.extend((mode << 16).to_le_bytes());
            central.extend(offset.to_le_bytes());
            central.extend(name.as_bytes());
        }
        let cd_offset = out.len() as u32;
        out.extend(&central);
        out.extend(EOCD_SIG.to_le_bytes());
        out.extend([0, 0, 0, 0]);
        out.extend((entries.len() as u16).to_le_bytes());
        out.extend((entries.len() as u16).to_le_bytes());
        out.extend((central.len() as u32).to_le_bytes());
        out.extend(cd_offset.to_le_bytes());
        out.extend([0, 0]);
        out
    }

    fn unpack_bytes(name: &str, bytes: &[u8]) -> (std::path::PathBuf, io::Result<()>) {
        let src = temp_dir(&format!("{name}-src"));
        let path = src.join("a.zip");
        fs::write(&path, bytes).unwrap();
        let dest = temp_dir(name);
        let mut sink = Sink::new(&dest, LIMITS).unwrap();
        let result = unpack(&mut File::open(&path).unwrap(), &mut sink);
        fs::remove_dir_all(&src).unwrap();
        (dest, result)
    }

    #[test]
    fn a_zip_made_by_python_unpacks_deflated_and_stored_with_modes() {
        let src = temp_dir("zip-py");
        let zip = src.join("a.zip");
        let script = "import zipfile, sys\nz = zipfile.ZipFile(sys.argv[1], 'w')\ni = zipfile.ZipInfo('bin/run.sh')\ni.external_attr = 0o100755 << 16\ni.create_system = 3\ni.compress_type = zipfile.ZIP_DEFLATED\nz.writestr(i, '#!/bin/sh\\n' * 1000)\nz.writestr('plain.txt', 'stored', compress_type=zipfile.ZIP_STORED)\nl = zipfile.ZipInfo('link')\nl.external_attr = 0o120777 << 16\nl.create_system = 3\nz.writestr(l, 'bin/run.sh')\nz.close()\n";
        let status = Command::new("python3")
            .args(["-c", script])
            .arg(&zip)
            .status()
            .unwrap();
        assert!(status.success());
        let dest = temp_dir("zip-py-dest");
        let mut sink = Sink::new(&dest, LIMITS).unwrap();
        unpack(&mut File::open(&zip).unwrap(), &mut sink).unwrap();
        let run = dest.join("bin/run.sh");
        assert_eq!(
            fs::read_to_string(&run).unwrap(),
            "#!/bin/sh\n".repeat(1000)
        );
        assert_eq!(
            fs::metadata(&run).unwrap().permissions().mode() & 0o777,
            0o755
        );
        assert_eq!(
            fs::read_to_string(dest.join("plain.txt")).unwrap(),
            "stored"
        );
        assert_eq!(
            fs::read_link(dest.join("link")).unwrap().to_str(),
            Some("bin/run.sh")
        );
        fs::remove_dir_all(&src).unwrap();
        fs::remove_dir_all(&dest).unwrap();
    }

    #[test]
    fn zip_slip_names_are_refused() {
        for name in ["../evil", "/tmp/evil", "a/../../evil"] {
            let (dest, result) = unpack_bytes("zip-slip", &stored(&[(name, b"x")]));
            let err = result.unwrap_err();
            assert_eq!(err.kind(), io::ErrorKind::InvalidData, "{name}: {err}");
            assert!(!dest.parent().unwrap().join("evil").exists());
            fs::remove_dir_all(&dest).unwrap();
        }
    }

    #[test]
    fn entries_that_try_to_leave_fail_naming_themselves_and_write_nothing_outside() {
        use super::super::tar::tests::{listing, ESCAPES};
        // The tar cases zip can carry: files and symlinks.
        for (entries, names) in ESCAPES {
            if entries.iter().any(|e| e.1 == b'1') {
                continue;
            }
            let zipped: Vec<(&str, &[u8], u32)> = entries
                .iter()
                .map(|&(name, kind, data, link)| match kind {
                    b'2' => (name, link.as_bytes(), 0o120777),
                    _ => (name, data, 0o100644),
                })
                .collect();
            let outer = temp_dir("zip-escape");
            fs::write(outer.join("secret"), "s").unwrap();
            let zip = outer.join("a.zip");
            fs::write(&zip, stored_with_modes(&zipped)).unwrap();
            let dest = outer.join("dest");
            fs::create_dir(&dest).unwrap();
            let before = listing(&outer);
            let mut sink = Sink::new(&dest, LIMITS).unwrap();
            let err = unpack(&mut File::open(&zip).unwrap(), &mut sink).unwrap_err();
            assert_eq!(err.kind(), io::ErrorKind::InvalidData, "{entries:?}: {err}");
            assert!(err.to_string().contains(names), "{entries:?}: {err}");
            let after: Vec<_> = listing(&outer)
                .into_iter()
                .filter(|(path, _)| !path.starts_with(&format!("{}/", dest.display())))
                .collect();
            assert_eq!(after, before, "{entries:?}");
            fs::remove_dir_all(&outer).unwrap();
        }
    }

    #[test]
    fn a_symlink_target_longer_than_max_link_is_refused() {
        let target = "t/".repeat(MAX_LINK as usize);
        let bytes = stored_with_modes(&[("l", target.as_bytes(), 0o120777)]);
        let (dest, result) = unpack_bytes("zip-link", &bytes);
        let err = result.unwrap_err();
        assert!(err.to_string().contains("\"l\""), "{err}");
        assert!(err.to_string().contains("(MAX_LINK)"), "{err}");
        assert!(fs::symlink_metadata(dest.join("l")).is_err());
        fs::remove_dir_all(&dest).unwrap();
    }

    #[test]
    fn a_deflate_bomb_stops_at_the_size_limit_while_inflating() {
        let src = temp_dir("zip-bomb");
        let zip = src.join("bomb.zip");
        // 256 MiB of zeros, deflated to a few hundred KiB, written as a stream.
        let script = "import zipfile, sys\nz = zipfile.ZipFile(sys.argv[1], 'w', zipfile.ZIP_DEFLATED, compresslevel=9)\nw = z.open('zeros', 'w')\nfor _ in range(256):\n    w.write(bytes(1 << 20))\nw.close()\nz.close()\n";
        let status = Command::new("python3")
            .args(["-c", script])
            .arg(&zip)
            .status()
            .unwrap();
        assert!(status.success());
        let packed = fs::metadata(&zip).unwrap().len();
        let dest = temp_dir("zip-bomb-dest");
        let limits = UnpackLimits {
            file_count: 100,
            size: 1 << 20,
        };
        let mut sink = Sink::new(&dest, limits).unwrap();
        let mut file = File::open(&zip).unwrap();
        let err = unpack(&mut file, &mut sink).unwrap_err();
        assert!(
            err.to_string().contains("decompression_size_limit"),
            "{err}"
        );
        // Inflating stopped at the limit: one 64 KiB buffer of the entry
        // read, of about 260 KiB.
        let read = file.stream_position().unwrap();
        assert!(read < packed / 2, "read {read} of {packed} bytes");
        assert_eq!(fs::read_dir(&dest).unwrap().count(), 0);
        fs::remove_dir_all(&dest).unwrap();
        fs::remove_dir_all(&src).unwrap();
    }

    #[test]
    fn the_file_count_limit_and_a_huge_central_directory_are_refused() {
        let limits = UnpackLimits {
            file_count: 2,
            size: 100,
        };
        let src = temp_dir("zip-count");
        let zip = src.join("a.zip");
        fs::write(&zip, stored(&[("a", b"1"), ("b", b"2"), ("c", b"3")])).unwrap();
        let dest = temp_dir("zip-count-dest");
        let mut sink = Sink::new(&dest, limits).unwrap();
        let err = unpack(&mut File::open(&zip).unwrap(), &mut sink).unwrap_err();
        assert!(
            err.to_string().contains("decompression_file_count_limit"),
            "{err}"
        );
        assert!(!dest.join("c").exists());
        // A sparse file whose end record claims a directory of 96 MiB.
        let huge = src.join("huge.zip");
        let file = File::create(&huge).unwrap();
        let size: u32 = 96 << 20;
        file.set_len(size as u64).unwrap();
        let mut end = Vec::new();
        end.extend(EOCD_SIG.to_le_bytes());
        end.extend([0, 0, 0, 0, 1, 0, 1, 0]);
        end.extend(size.to_le_bytes());
        end.extend(0u32.to_le_bytes());
        end.extend([0, 0]);
        use std::os::unix::fs::FileExt;
        file.write_all_at(&end, size as u64).unwrap();
        let mut sink = Sink::new(&dest, limits).unwrap();
        let err = unpack(&mut File::open(&huge).unwrap(), &mut sink).unwrap_err();
        assert!(err.to_string().contains("(MAX_DIRECTORY)"), "{err}");
        fs::remove_dir_all(&src).unwrap();
        fs::remove_dir_all(&dest).unwrap();
    }

    #[test]
    fn a_damaged_entry_is_refused_and_not_left_behind() {
        let mut bytes = stored(&[("a.txt", b"hello")]);
        // The stored data starts after the 30-byte header and the name.
        bytes[30 + 5] = b'j';
        let (dest, result) = unpack_bytes("zip-crc", &bytes);
        let err = result.unwrap_err();
        assert!(err.to_string().contains("CRC-32"), "{err}");
        assert!(!dest.join("a.txt").exists());
        fs::remove_dir_all(&dest).unwrap();
        let (dest, result) = unpack_bytes("zip-junk", b"not a zip archive at all, really");
        assert!(result
            .unwrap_err()
            .to_string()
            .contains("end of central directory"));
        fs::remove_dir_all(&dest).unwrap();
    }
}
