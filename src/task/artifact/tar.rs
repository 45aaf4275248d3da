//! tar archives (POSIX ustar, with GNU's long names and pax's `path` and
//! `linkpath` records) unpacked into a [`Sink`]: regular files with their
//! mode bits (an executable stays executable), dirs and symlinks; other
//! entries (hard links, devices, fifos) are skipped with a warning, as
//! go-getter skips them.

use std::io::{self, Read};

use super::unpack::Sink;

const BLOCK: usize = 512;

/// The longest long name or pax header read.
const MAX_META: u64 = 64 * 1024;

fn bad(message: impl Into<String>) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("tar: {}", message.into()),
    )
}

/// A header field's text, up to its first NUL.
fn text(field: &[u8]) -> String {
    let end = field.iter().position(|&b| b == 0).unwrap_or(field.len());
    String::from_utf8_lossy(&field[..end]).into_owned()
}

/// A numeric field: octal text, or GNU's base-256 with the high bit set.
fn number(field: &[u8]) -> io::Result<u64> {
    if field.first().is_some_and(|b| b & 0x80 != 0) {
        let mut value: u64 = (field[0] & 0x7f) as u64;
        for &b in &field[1..] {
            value = value
                .checked_mul(256)
                .and_then(|v| v.checked_add(b as u64))
                .ok_or_else(|| bad("a number overflows"))?;
        }
        return Ok(value);
    }
    let digits = text(field);
    let digits = digits.trim_matches([' ', '\0']);
    if digits.is_empty() {
        return Ok(0);
    }
    u64::from_str_radix(digits, 8).map_err(|_| bad(format!("bad number {digits:?}")))
}

/// Reads exactly one block; `false` at a clean end of input.
fn read_block(reader: &mut dyn Read, block: &mut [u8; BLOCK]) -> io::Result<bool> {
    let mut filled = 0;
    while filled < BLOCK {
        let n = reader.read(&mut block[filled..])?;
        if n == 0 {
            if filled == 0 {
                return Ok(false);
            }
            return Err(bad("the archive ends inside a header"));
        }
        filled += n;
    }
    Ok(true)
}

/// Skips the padding after `size` bytes of data.
fn skip_padding(reader: &mut dyn Read, size: u64) -> io::Result<()> {
    let pad = (BLOCK as u64 - size % BLOCK as u64) % BLOCK as u64;
    skip(reader, pad)
}

fn skip(reader: &mut dyn Read, n: u64) -> io::Result<()> {
    let skipped = io::copy(&mut reader.take(n), &mut io::sink())?;
    if skipped != n {
        return Err(bad("the archive is cut short"));
    }
    Ok(())
}

/// Reads a long name or pax body.
fn read_meta(reader: &mut dyn Read, size: u64) -> io::Result<Vec<u8>> {
    if size > MAX_META {
        return Err(bad(format!("a metadata entry of {size} bytes")));
    }
    let mut data = Vec::with_capacity(size as usize);
    reader.take(size).read_to_end(&mut data)?;
    if data.len() as u64 != size {
        return Err(bad("the archive is cut short"));
    }
    skip_padding(reader, size)?;
    Ok(data)
}

/// The `path` and `linkpath` of a pax extended header.
fn pax(data: &[u8]) -> io::Result<(Option<String>, Option<String>)> {
    let (mut path, mut link) = (None, None);
    let mut rest = data;
    while !rest.is_empty() {
        let space = rest
            .iter()
            .position(|&b| b == b' ')
            .ok_or_else(|| bad("bad pax record"))?;
        let len: usize = std::str::from_utf8(&rest[..space])
            .ok()
            .and_then(|n| n.parse().ok())
            .filter(|&n| n > space && n <= rest.len())
            .ok_or_else(|| bad("bad pax record length"))?;
        let record = &rest[space + 1..len];
        let record = record.strip_suffix(b"\n").unwrap_or(record);
        if let Some(eq) = record.iter().position(|&b| b == b'=') {
            let value = String::from_utf8_lossy(&record[eq + 1..]).into_owned();
            match &record[..eq] {
                b"path" => path = Some(value),
                b"linkpath" => link = Some(value),
                _ => {}
            }
        }
        rest = &rest[len..];
    }
    Ok((path, link))
}

/// Unpacks the tar stream `reader` into `sink`.
pub fn unpack(reader: &mut dyn Read, sink: &mut Sink<'_>) -> io::Result<()> {
    let mut block = [0u8; BLOCK];
    let mut long_name: Option<String> = None;
    let mut long_link: Option<String> = None;
    loop {
        if !read_block(reader, &mut block)? || block.iter().all(|&b| b == 0) {
            return Ok(());
        }
        let stored = number(&block[148..156])?;
        let sum: u64 = block
            .iter()
            .enumerate()
            .map(|(i, &b)| {
                if (148..156).contains(&i) {
                    b' ' as u64
                } else {
                    b as u64
                }
            })
            .sum();
        if sum != stored {
            return Err(bad("a header's checksum does not match"));
        }
        let size = number(&block[124..136])?;
        let kind = block[156];
        let mode = number(&block[100..108])? as u32;
        let mut name = text(&block[0..100]);
        if &block[257..262] == b"ustar" && block[345] != 0 {
            name = format!("{}/{name}", text(&block[345..500]));
        }
        let mut link = text(&block[157..257]);
        match kind {
            b'L' => {
                long_name = Some(text(&read_meta(reader, size)?));
                continue;
            }
            b'K' => {
                long_link = Some(text(&read_meta(reader, size)?));
                continue;
            }
            b'x' => {
                let (path, linkpath) = pax(&read_meta(reader, size)?)?;
                long_name = path.or(long_name);
                long_link = linkpath.or(long_link);
                continue;
            }
            b'g' => {
                read_meta(reader, size)?;
                continue;
            }
            _ => {}
        }
        if let Some(n) = long_name.take() {
            name = n;
        }
        if let Some(l) = long_link.take() {
            link = l;
        }
        match kind {
            b'0' | b'\0' | b'7' => {
                let mut data = reader.take(size);
                sink.file(&name, mode, &mut data)?;
                if data.limit() != 0 {
                    return Err(bad("the archive is cut short"));
                }
                skip_padding(reader, size)?;
            }
            b'5' => {
                sink.dir(&name, mode)?;
                skip(
                    reader,
                    size + (BLOCK as u64 - size % BLOCK as u64) % BLOCK as u64,
                )?;
            }
            b'2' => {
                sink.symlink(&name, &link)?;
                skip(
                    reader,
                    size + (BLOCK as u64 - size % BLOCK as u64) % BLOCK as u64,
                )?;
            }
            other => {
                log::warn!(
                    "Artifact: skipping tar entry {name:?} of type {:?}",
                    other as char
                );
                skip(
                    reader,
                    size + (BLOCK as u64 - size % BLOCK as u64) % BLOCK as u64,
                )?;
            }
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
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

    /// A header block of our own, for entries tar(1) will not make.
    pub(crate) fn header(name: &str, kind: u8, size: usize, link: &str) -> Vec<u8> {
        let mut h = vec![0u8; BLOCK];
        h[..name.len()].copy_from_slice(name.as_bytes());
        h[100..107].copy_from_slice(b"0000644");
        h[124..135].copy_from_slice(format!("{size:011o}").as_bytes());
        h[156] = kind;
        h[157..157 + link.len()].copy_from_slice(link.as_bytes());
        h[257..263].copy_from_slice(b"ustar\0");
        h[148..156].copy_from_slice(b"        ");
        let sum: u32 = h.iter().map(|&b| b as u32).sum();
        h[148..155].copy_from_slice(format!("{sum:06o}\0").as_bytes());
        h
    }

    pub(crate) fn archive(entries: &[(&str, u8, &[u8], &str)]) -> Vec<u8> {
        let mut out = Vec::new();
        for (name, kind, data, link) in entries {
            out.extend(header(name, *kind, data.len(), link));
            out.extend(*data);
            out.resize(out.len().div_ceil(BLOCK) * BLOCK, 0);
        }
        out.extend([0u8; 2 * BLOCK]);
        out
    }

    #[test]
    fn tar_made_by_tar_unpacks_with_modes_long_names_and_links() {
        let src = temp_dir("tar-src");
        let long = "d/".to_string() + &"n".repeat(150);
        fs::create_dir_all(src.join("d")).unwrap();
        fs::write(src.join("run.sh"), "#!/bin/sh\n").unwrap();
        fs::set_permissions(src.join("run.sh"), fs::Permissions::from_mode(0o755)).unwrap();
        fs::write(src.join(&long), "long").unwrap();
        std::os::unix::fs::symlink("../run.sh", src.join("d/link")).unwrap();
        let packed = src.with_extension("tar");
        for format in ["gnu", "pax"] {
            let status = Command::new("tar")
                .args([&format!("--format={format}"), "-cf"])
                .arg(&packed)
                .arg("-C")
                .arg(&src)
                .args(["run.sh", "d"])
                .status()
                .unwrap();
            assert!(status.success());
            let dest = temp_dir("tar-dest");
            let mut sink = Sink::new(&dest, LIMITS);
            unpack(&mut fs::File::open(&packed).unwrap(), &mut sink).unwrap();
            let mode = fs::metadata(dest.join("run.sh"))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o755, "{format}");
            assert_eq!(fs::read_to_string(dest.join(&long)).unwrap(), "long");
            assert_eq!(
                fs::read_link(dest.join("d/link")).unwrap().to_str(),
                Some("../run.sh")
            );
            fs::remove_dir_all(&dest).unwrap();
        }
        fs::remove_file(&packed).unwrap();
        fs::remove_dir_all(&src).unwrap();
    }

    #[test]
    fn escaping_entries_are_refused() {
        for entries in [
            vec![("../evil", b'0', &b"x"[..], "")],
            vec![("/tmp/evil", b'0', &b"x"[..], "")],
            vec![("l", b'2', &b""[..], "../..")],
            vec![("l", b'2', &b""[..], "/etc")],
        ] {
            let dest = temp_dir("tar-evil");
            let mut sink = Sink::new(&dest, LIMITS);
            let err = unpack(&mut &archive(&entries)[..], &mut sink).unwrap_err();
            assert_eq!(err.kind(), io::ErrorKind::InvalidData, "{entries:?}: {err}");
            fs::remove_dir_all(&dest).unwrap();
        }
    }

    #[test]
    fn a_bad_checksum_or_a_cut_archive_is_an_error() {
        let mut packed = archive(&[("a", b'0', b"hello", "")]);
        let dest = temp_dir("tar-bad");
        let mut sink = Sink::new(&dest, LIMITS);
        assert!(unpack(&mut &packed[..BLOCK + 3], &mut sink).is_err());
        packed[0] = b'b';
        let err = unpack(&mut &packed[..], &mut sink).unwrap_err();
        assert!(err.to_string().contains("checksum"), "{err}");
        fs::remove_dir_all(&dest).unwrap();
    }

    #[test]
    fn the_file_count_limit_holds() {
        let dest = temp_dir("tar-count");
        let limits = UnpackLimits {
            file_count: 2,
            size: 100,
        };
        let mut sink = Sink::new(&dest, limits);
        let packed = archive(&[
            ("a", b'0', b"1", ""),
            ("b", b'0', b"2", ""),
            ("c", b'0', b"3", ""),
        ]);
        let err = unpack(&mut &packed[..], &mut sink).unwrap_err();
        assert!(
            err.to_string().contains("decompression_file_count_limit"),
            "{err}"
        );
        assert!(!dest.join("c").exists());
        fs::remove_dir_all(&dest).unwrap();
    }
}
