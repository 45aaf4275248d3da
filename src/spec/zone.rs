//! Time zones for `periodic { time_zone }`: the IANA zone files of the host
//! (`/usr/share/zoneinfo/<name>`, TZif as RFC 8536 defines it), read by a
//! small bounded parser of our own, and the UTC offset they give an
//! instant.
//!
//! Only the transitions a file lists are used. Debian's and most
//! distributions' files are "fat": they list every transition through
//! 2037, and after the last one its offset holds. A "slim" file, whose
//! transitions end early and whose footer rule gives the rest, is refused
//! by name rather than read wrong.

use std::fmt;
use std::io::Read;
use std::path::{Path, PathBuf};

/// Where the zone files are.
pub const ZONEINFO: &str = "/usr/share/zoneinfo";

/// The largest zone file read, in bytes: the biggest fat file is under
/// 4 KiB.
pub const MAX_ZONE_FILE: usize = 64 * 1024;

/// 2037-01-01T00:00:00Z: a file with daylight-saving rules whose
/// transitions end before this is slim.
const FAT_UNTIL: i64 = 2_114_380_800;

/// A zone: its offsets from UTC, in seconds, from each transition on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Zone {
    pub name: String,
    /// The offset before the first transition.
    initial: i32,
    /// (transition time, offset from then on), in time order.
    transitions: Vec<(i64, i32)>,
}

/// Why a zone cannot be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ZoneError {
    pub name: String,
    pub reason: String,
}

impl fmt::Display for ZoneError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "time zone {:?}: {}", self.name, self.reason)
    }
}

impl std::error::Error for ZoneError {}

impl Zone {
    /// UTC, Nomad's default.
    pub fn utc() -> Zone {
        Zone {
            name: "UTC".into(),
            initial: 0,
            transitions: Vec::new(),
        }
    }

    /// The zone named `name` as Go's `time.LoadLocation` names them: `UTC`
    /// (or empty), `Local` (the host's `/etc/localtime`), or an IANA name
    /// under [`ZONEINFO`].
    pub fn load(name: &str) -> Result<Zone, ZoneError> {
        Zone::load_from(name, Path::new(ZONEINFO))
    }

    fn load_from(name: &str, dir: &Path) -> Result<Zone, ZoneError> {
        let fail = |reason: String| ZoneError {
            name: name.to_string(),
            reason,
        };
        if name.is_empty() || name == "UTC" {
            return Ok(Zone::utc());
        }
        let path = if name == "Local" {
            PathBuf::from("/etc/localtime")
        } else {
            let valid = name.len() <= 64
                && name.split('/').all(|part| {
                    !part.is_empty()
                        && part != "."
                        && part != ".."
                        && part
                            .bytes()
                            .all(|b| b.is_ascii_alphanumeric() || b"_+-".contains(&b))
                });
            if !valid {
                return Err(fail("not a zone name (like Europe/Berlin)".into()));
            }
            dir.join(name)
        };
        let mut bytes = Vec::new();
        std::fs::File::open(&path)
            .and_then(|file| file.take(MAX_ZONE_FILE as u64 + 1).read_to_end(&mut bytes))
            .map_err(|e| fail(format!("cannot read {}: {e}", path.display())))?;
        if bytes.len() > MAX_ZONE_FILE {
            return Err(fail(format!(
                "{} is over {MAX_ZONE_FILE} bytes (MAX_ZONE_FILE)",
                path.display()
            )));
        }
        let mut zone = parse(&bytes).map_err(|e| fail(format!("{}: {e}", path.display())))?;
        zone.name = name.to_string();
        Ok(zone)
    }

    /// The offset from UTC at instant `utc` (seconds since the epoch).
    pub fn offset_at(&self, utc: i64) -> i64 {
        let after = self.transitions.partition_point(|(at, _)| *at <= utc);
        let offset = match after {
            0 => self.initial,
            n => self.transitions[n - 1].1,
        };
        i64::from(offset)
    }

    /// Every offset the zone has had.
    pub fn offsets(&self) -> Vec<i64> {
        let mut all: Vec<i64> = std::iter::once(self.initial)
            .chain(self.transitions.iter().map(|(_, o)| *o))
            .map(i64::from)
            .collect();
        order::sort(&mut all);
        all.dedup();
        all
    }

    pub fn is_utc(&self) -> bool {
        self.initial == 0 && self.transitions.is_empty()
    }
}

/// Reads a TZif file: its 64-bit data when the version has them, else the
/// 32-bit block.
fn parse(bytes: &[u8]) -> Result<Zone, String> {
    let first = Header::read(bytes)?;
    let (version, first_block) = (first.version, first.block_len(4));
    let (header, data, time_size) = if version >= b'2' {
        let second_at = 44 + first_block;
        let rest = bytes
            .get(second_at..)
            .ok_or("the file ends inside its first block")?;
        let header = Header::read(rest)?;
        (header, &rest[44..], 8)
    } else {
        (first, &bytes[44..], 4)
    };
    let need = header.block_len(time_size);
    let data = data.get(..need).ok_or("the file ends inside its data")?;
    let times_end = header.times * time_size;
    let kinds_end = times_end + header.times;
    let mut types = Vec::with_capacity(header.types);
    for i in 0..header.types {
        let at = kinds_end + 6 * i;
        let offset = i32::from_be_bytes([data[at], data[at + 1], data[at + 2], data[at + 3]]);
        types.push(offset);
    }
    if types.is_empty() {
        return Err("no local time types".into());
    }
    let mut transitions = Vec::with_capacity(header.times);
    for i in 0..header.times {
        let raw = &data[i * time_size..(i + 1) * time_size];
        let at = if time_size == 8 {
            i64::from_be_bytes(raw.try_into().unwrap_or([0; 8]))
        } else {
            i64::from(i32::from_be_bytes(raw.try_into().unwrap_or([0; 4])))
        };
        let kind = usize::from(data[times_end + i]);
        let offset = *types
            .get(kind)
            .ok_or_else(|| format!("transition {i} names type {kind} of {}", types.len()))?;
        if transitions.last().is_some_and(|(last, _)| *last >= at) {
            return Err("transitions out of order".into());
        }
        transitions.push((at, offset));
    }
    let footer = if version >= b'2' {
        let end = 44 + first_block + 44 + need;
        String::from_utf8_lossy(bytes.get(end..).unwrap_or_default()).into_owned()
    } else {
        String::new()
    };
    let last = transitions.last().map_or(i64::MIN, |(at, _)| *at);
    if footer.contains(',') && last < FAT_UNTIL {
        return Err(format!(
            "a slim zone file: its transitions end in {} and a rule gives the rest, which csi-agent does not read; install the full (fat) zone files",
            crate::units::format_utc(last).get(..4).unwrap_or("?")
        ));
    }
    Ok(Zone {
        name: String::new(),
        initial: types[0],
        transitions,
    })
}

/// The counts of a TZif header.
struct Header {
    version: u8,
    ut_indicators: usize,
    std_indicators: usize,
    leaps: usize,
    times: usize,
    types: usize,
    chars: usize,
}

impl Header {
    fn read(bytes: &[u8]) -> Result<Header, String> {
        let head = bytes.get(..44).ok_or("shorter than a TZif header")?;
        if &head[..4] != b"TZif" {
            return Err("not a TZif file".into());
        }
        let count = |i: usize| {
            let at = 20 + 4 * i;
            u32::from_be_bytes([head[at], head[at + 1], head[at + 2], head[at + 3]]) as usize
        };
        Ok(Header {
            version: head[4],
            ut_indicators: count(0),
            std_indicators: count(1),
            leaps: count(2),
            times: count(3),
            types: count(4),
            chars: count(5),
        })
    }

    /// The length of the data block after the header, with times (and
    /// leap-second times) of `time_size` bytes.
    fn block_len(&self, time_size: usize) -> usize {
        self.times * time_size
            + self.times
            + self.types * 6
            + self.chars
            + self.leaps * (time_size + 4)
            + self.std_indicators
            + self.ut_indicators
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn berlin_has_summer_and_winter_time() {
        let zone = Zone::load("Europe/Berlin").unwrap();
        // 2026-01-15T12:00:00Z and 2026-07-15T12:00:00Z.
        assert_eq!(zone.offset_at(1_768_478_400), 3600);
        assert_eq!(zone.offset_at(1_784_116_800), 7200);
        // Summer time began 2026-03-29T01:00:00Z.
        assert_eq!(zone.offset_at(1_774_746_000 - 1), 3600);
        assert_eq!(zone.offset_at(1_774_746_000), 7200);
        assert_eq!(zone.offsets(), [3208, 3600, 7200, 10800]);
    }

    #[test]
    fn utc_and_bad_names() {
        assert!(Zone::load("UTC").unwrap().is_utc());
        assert!(Zone::load("").unwrap().is_utc());
        assert!(Zone::load("Etc/UTC").unwrap().is_utc());
        for name in ["../etc/passwd", "Europe/../../x", "a//b", "/etc/x"] {
            let err = Zone::load(name).unwrap_err().to_string();
            assert!(err.contains("not a zone name"), "{name}: {err}");
        }
        let err = Zone::load("Mars/Olympus").unwrap_err().to_string();
        assert!(
            err.contains("cannot read /usr/share/zoneinfo/Mars/Olympus"),
            "{err}"
        );
    }

    #[test]
    fn what_is_not_a_zone_file_is_refused() {
        let dir = std::env::temp_dir().join(format!("csi-agent-zone-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("Junk"), b"not a zone").unwrap();
        std::fs::write(dir.join("Big"), vec![b'T'; MAX_ZONE_FILE + 1]).unwrap();
        let mut short = std::fs::read("/usr/share/zoneinfo/Europe/Berlin").unwrap();
        short.truncate(100);
        std::fs::write(dir.join("Short"), short).unwrap();
        let load = |name: &str| Zone::load_from(name, &dir).unwrap_err().to_string();
        assert!(load("Junk").contains("shorter than a TZif header"));
        assert!(load("Big").contains("MAX_ZONE_FILE"));
        assert!(load("Short").contains("the file ends inside"));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
