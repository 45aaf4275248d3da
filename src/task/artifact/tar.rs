//! tar archives (POSIX ustar, with GNU's long names and pax's `path` and
//! `linkpath` records) unpacked into a [`Sink`]: regular files with their
//! mode bits (an executable stays executable), dirs and symlinks; other
//! entries (hard links, devices, fifos) are skipped with a warning, as
//! go-getter skips them, and a hard link that names something outside the
//! destination is refused.

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
pub fn unpack(reader: &mut dyn Read, sink: &mut Sink) -> io::Result<()> {
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
            b'1' => {
                sink.hard_link(&name, &link)?;
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

    pub(crate) fn archive(entries: &[Entry]) -> Vec<u8> {
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
            let mut sink = Sink::new(&dest, LIMITS).unwrap();
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
            let mut sink = Sink::new(&dest, LIMITS).unwrap();
            let err = unpack(&mut &archive(&entries)[..], &mut sink).unwrap_err();
            assert_eq!(err.kind(), io::ErrorKind::InvalidData, "{entries:?}: {err}");
            fs::remove_dir_all(&dest).unwrap();
        }
    }

    /// Every path under `dir`, with what it is and holds.
    pub(crate) fn listing(dir: &std::path::Path) -> Vec<(String, String)> {
        let mut out = Vec::new();
        let mut todo = vec![dir.to_path_buf()];
        while let Some(d) = todo.pop() {
            for entry in fs::read_dir(&d).unwrap() {
                let path = entry.unwrap().path();
                let meta = fs::symlink_metadata(&path).unwrap();
                let what = if meta.is_dir() {
                    todo.push(path.clone());
                    "dir".to_string()
                } else if meta.file_type().is_symlink() {
                    format!("-> {}", fs::read_link(&path).unwrap().display())
                } else {
                    format!("{:?}", fs::read(&path).unwrap())
                };
                out.push((path.display().to_string(), what));
            }
        }
        out.sort();
        out
    }

    /// An entry of [`archive`]: name, type, data, link target.
    pub(crate) type Entry<'a> = (&'a str, u8, &'a [u8], &'a str);

    /// Archives that try to write outside their destination, each with
    /// the entry its error must name.
    pub(crate) const ESCAPES: &[(&[Entry], &str)] = &[
        // `b -> a/..` is `..` once `a -> .`: the text of it stays inside.
        (
            &[
                ("a", b'2', b"", "."),
                ("b", b'2', b"", "a/.."),
                ("b/escape", b'0', b"x", ""),
            ],
            "\"b\"",
        ),
        (&[("l", b'2', b"", "/tmp")], "\"l\""),
        (&[("d/l", b'2', b"", "../../outside")], "\"d/l\""),
        (&[("../escape", b'0', b"x", "")], "\"../escape\""),
        (&[("d/../../escape", b'0', b"x", "")], "\"d/../../escape\""),
        (&[("/tmp/escape", b'0', b"x", "")], "\"/tmp/escape\""),
        (&[("h", b'1', b"", "../secret")], "\"h\""),
        (&[("h", b'1', b"", "/etc/passwd")], "\"h\""),
        // A link to a file outside, then a file of the same name.
        (
            &[
                ("secret", b'2', b"", "../secret"),
                ("secret", b'0', b"x", ""),
            ],
            "\"secret\"",
        ),
    ];

    #[test]
    fn entries_that_try_to_leave_fail_naming_themselves_and_write_nothing_outside() {
        for (entries, names) in ESCAPES {
            let outer = temp_dir("tar-escape");
            fs::write(outer.join("secret"), "s").unwrap();
            let dest = outer.join("dest");
            fs::create_dir(&dest).unwrap();
            let before = listing(&outer);
            let mut sink = Sink::new(&dest, LIMITS).unwrap();
            let err = unpack(&mut &archive(entries)[..], &mut sink).unwrap_err();
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
    fn absurd_header_sizes_are_refused_without_reading_them() {
        let limits = UnpackLimits {
            file_count: 100,
            size: 1000,
        };
        let dest = temp_dir("tar-absurd");
        // An octal size of 64 GiB over a few bytes: the size limit stops it.
        let mut big = header("big", b'0', 0, "");
        big[124..135].copy_from_slice(b"77777777777");
        big[148..156].copy_from_slice(b"        ");
        let sum: u32 = big.iter().map(|&b| b as u32).sum();
        big[148..155].copy_from_slice(format!("{sum:06o}\0").as_bytes());
        big.extend([7u8; 4096]);
        let mut sink = Sink::new(&dest, limits).unwrap();
        let err = unpack(&mut &big[..], &mut sink).unwrap_err();
        assert!(
            err.to_string().contains("decompression_size_limit"),
            "{err}"
        );
        assert!(!dest.join("big").exists());
        // GNU's base-256 beyond 64 bits.
        let mut huge = header("huge", b'0', 0, "");
        huge[124] = 0x80;
        huge[125..136].fill(0xff);
        huge[148..156].copy_from_slice(b"        ");
        let sum: u32 = huge.iter().map(|&b| b as u32).sum();
        huge[148..155].copy_from_slice(format!("{sum:06o}\0").as_bytes());
        let err = unpack(&mut &huge[..], &mut sink).unwrap_err();
        assert!(err.to_string().contains("overflows"), "{err}");
        // A long name of 1 GiB.
        let mut long = header("././@LongLink", b'L', 1 << 30, "");
        long.extend([b'n'; 512]);
        let err = unpack(&mut &long[..], &mut sink).unwrap_err();
        assert!(
            err.to_string()
                .contains("a metadata entry of 1073741824 bytes"),
            "{err}"
        );
        fs::remove_dir_all(&dest).unwrap();
    }

    #[test]
    fn a_gzip_bomb_stops_at_the_size_limit_while_inflating() {
        // 256 MiB of zeros in one entry, gzipped to a few hundred KiB.
        let src = temp_dir("tar-bomb");
        let bomb = src.join("bomb.tar.gz");
        let script = "import tarfile, sys\nt = tarfile.open(sys.argv[1], 'w:gz', compresslevel=9)\ni = tarfile.TarInfo('zeros')\ni.size = 256 << 20\nt.addfile(i, open('/dev/zero', 'rb'))\nt.close()\n";
        let status = Command::new("python3")
            .args(["-c", script])
            .arg(&bomb)
            .status()
            .unwrap();
        assert!(status.success());
        let packed = fs::metadata(&bomb).unwrap().len();
        let dest = temp_dir("tar-bomb-dest");
        let limits = UnpackLimits {
            file_count: 100,
            size: 1 << 20,
        };
        let mut sink = Sink::new(&dest, limits).unwrap();
        let mut file = fs::File::open(&bomb).unwrap();
        let err = unpack(
            &mut super::super::gzip::GzipReader::new(&mut file).unwrap(),
            &mut sink,
        )
        .unwrap_err();
        assert!(
            err.to_string().contains("decompression_size_limit"),
            "{err}"
        );
        // Inflating stopped at the limit: one 64 KiB buffer of the input
        // read, of about 260 KiB.
        use std::io::Seek;
        let read = file.stream_position().unwrap();
        assert!(read < packed / 2, "read {read} of {packed} bytes");
        assert_eq!(listing(&dest), vec![]);
        fs::remove_dir_all(&dest).unwrap();
        fs::remove_dir_all(&src).unwrap();
    }

    #[test]
    fn a_bad_checksum_or_a_cut_archive_is_an_error() {
        let mut packed = archive(&[("a", b'0', b"hello", "")]);
        let dest = temp_dir("tar-bad");
        let mut sink = Sink::new(&dest, LIMITS).unwrap();
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
        let mut sink = Sink::new(&dest, limits).unwrap();
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
