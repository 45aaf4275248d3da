//! No input may panic a decoder: random bytes, and our fixtures (HCL and
//! JSON, each decoded in its own syntax) cut, spliced and mutated.
//! Deterministic, so a failure reproduces; the `fuzz/` target explores the
//! native syntax further (`make fuzz`).

use csi_agent::spec::SpecFile;

use super::{file_for, FILE, FIXTURES, JSON_FILE};

/// A xorshift generator: small, deterministic, and good enough to pick
/// bytes and positions.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// Bytes that matter to HCL, so that random input reaches past the lexer.
const HCL_BYTES: &[u8] = b"{}[]=\"\n #/*$%<-.,:0123456789abcdefghijklmnopqrstuvwxyz_\\";

/// Decodes `src` as the file `file` and checks that every error points
/// inside it.
fn check(src: &str, file: &str) {
    if let Err(invalid) = SpecFile::decode(src, file) {
        let lines = src.split('\n').count();
        for err in &invalid.errors {
            assert!(
                err.pos.line >= 1 && err.pos.line <= lines && err.pos.col >= 1,
                "{err} points outside {src:?}"
            );
            assert!(!err.message.is_empty());
        }
    }
}

#[test]
fn random_bytes_never_panic() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for round in 0..3000 {
        let len = rng.below(200);
        let bytes: Vec<u8> = (0..len)
            .map(|_| {
                if round % 2 == 0 {
                    (rng.next() & 0xff) as u8
                } else {
                    HCL_BYTES[rng.below(HCL_BYTES.len())]
                }
            })
            .collect();
        let text = String::from_utf8_lossy(&bytes);
        check(&text, FILE);
        check(&text, JSON_FILE);
    }
}

#[test]
fn mutated_fixtures_never_panic() {
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    for (name, fixture) in FIXTURES {
        for _ in 0..400 {
            let mut bytes = fixture.as_bytes().to_vec();
            for _ in 0..1 + rng.below(4) {
                let at = rng.below(bytes.len());
                match rng.below(4) {
                    0 => {
                        bytes.remove(at);
                    }
                    1 => bytes.insert(at, HCL_BYTES[rng.below(HCL_BYTES.len())]),
                    2 => bytes[at] = (rng.next() & 0xff) as u8,
                    _ => {
                        let end = (at + rng.below(40)).min(bytes.len());
                        let chunk = bytes[at..end].to_vec();
                        let to = rng.below(bytes.len());
                        bytes.splice(to..to, chunk);
                    }
                }
            }
            check(&String::from_utf8_lossy(&bytes), file_for(name));
        }
    }
}

#[test]
fn fixtures_with_lines_dropped_or_repeated_never_panic() {
    let mut rng = Rng(0xdead_beef_cafe_f00d);
    for (name, fixture) in FIXTURES {
        let lines: Vec<&str> = fixture.lines().collect();
        for _ in 0..200 {
            let mut mutated = lines.clone();
            let at = rng.below(mutated.len());
            if rng.below(2) == 0 {
                mutated.remove(at);
            } else {
                let line = mutated[rng.below(mutated.len())];
                mutated.insert(at, line);
            }
            check(&mutated.join("\n"), file_for(name));
        }
    }
}

#[test]
fn every_prefix_of_every_fixture_decodes_or_fails_cleanly() {
    for (name, fixture) in FIXTURES {
        for (at, _) in fixture.char_indices() {
            check(&fixture[..at], file_for(name));
        }
    }
}
