//! P5, the static binary's size: the file `make static` produces, or the
//! one `CSI_AGENT_STATIC_BIN` names. The benchmark does not build it (a
//! musl build of gRPC's C++ core takes a long while); it reads the file's
//! size and checks from its ELF headers that it is what the row claims to
//! measure: statically linked (no program interpreter) and stripped (no symbol table).

use std::fs;
use std::path::{Path, PathBuf};

/// The environment variable that names the static binary.
pub const ENV: &str = "CSI_AGENT_STATIC_BIN";

/// Where `make static` puts the binary.
const MUSL_BIN: &str = "x86_64-unknown-linux-musl/static/csi-agent";

pub enum SizeResult {
    NotBuilt(PathBuf),
    Built {
        path: PathBuf,
        bytes: u64,
        is_static: bool,
        stripped: bool,
    },
}

/// The static binary: `$CSI_AGENT_STATIC_BIN`, else under
/// `$CARGO_TARGET_DIR` (or this crate's `target/`).
pub fn path() -> PathBuf {
    if let Some(path) = std::env::var_os(ENV).filter(|p| !p.is_empty()) {
        return PathBuf::from(path);
    }
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target"));
    target.join(MUSL_BIN)
}

pub fn run() -> SizeResult {
    let path = path();
    let Ok(bytes) = fs::read(&path) else {
        return SizeResult::NotBuilt(path);
    };
    let elf = Elf::parse(&bytes);
    SizeResult::Built {
        bytes: bytes.len() as u64,
        is_static: elf.as_ref().is_some_and(|e| !e.interpreter),
        stripped: elf.as_ref().is_some_and(|e| !e.symbols),
        path,
    }
}

/// What the ELF headers of a 64-bit little-endian binary say.
struct Elf {
    /// A PT_INTERP program header: the kernel starts a dynamic loader
    /// first. A static binary (static-pie included) has none.
    interpreter: bool,
    /// A SHT_SYMTAB section: not stripped.
    symbols: bool,
}

impl Elf {
    fn parse(b: &[u8]) -> Option<Elf> {
        if b.get(..4)? != b"\x7fELF" || *b.get(4)? != 2 || *b.get(5)? != 1 {
            return None;
        }
        let u16_at = |o: usize| Some(u16::from_le_bytes(b.get(o..o + 2)?.try_into().ok()?));
        let u32_at = |o: usize| Some(u32::from_le_bytes(b.get(o..o + 4)?.try_into().ok()?));
        let u64_at = |o: usize| Some(u64::from_le_bytes(b.get(o..o + 8)?.try_into().ok()?));
        let phoff = u64_at(0x20)? as usize;
        let shoff = u64_at(0x28)? as usize;
        let phentsize = u16_at(0x36)? as usize;
        let phnum = u16_at(0x38)? as usize;
        let shentsize = u16_at(0x3a)? as usize;
        let shnum = u16_at(0x3c)? as usize;
        let program_types: Vec<u32> = (0..phnum)
            .map(|i| u32_at(phoff + i * phentsize))
            .collect::<Option<_>>()?;
        let section_types: Vec<u32> = (0..shnum)
            .map(|i| u32_at(shoff + i * shentsize + 4))
            .collect::<Option<_>>()?;
        const PT_INTERP: u32 = 3;
        const SHT_SYMTAB: u32 = 2;
        Some(Elf {
            interpreter: program_types.contains(&PT_INTERP),
            symbols: section_types.contains(&SHT_SYMTAB),
        })
    }
}
