//! What names a record of the hostpath plugin's state: a volume (with its
//! stagings and publishes) or a snapshot. The state splits its lines into
//! records by it ([`super::state`]); each record is kept and locked in a
//! file of its own, named by it ([`super::records`]).

use encode::percent_except;

/// A record: a volume (with its stagings and publishes) or a snapshot.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Key {
    Volume(String),
    Snapshot(String),
}

impl Key {
    /// The record's file name: `volume-` or `snapshot-` and the ID with
    /// every byte but `[A-Za-z0-9_-]` as `%XX`; an ID whose name would be
    /// longer than a file name may be is named by its hash.
    pub fn file_name(&self) -> String {
        let (kind, id) = match self {
            Key::Volume(id) => ("volume", id),
            Key::Snapshot(id) => ("snapshot", id),
        };
        let escaped = percent_except(id, |b| {
            b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-')
        });
        let name = format!("{kind}-{escaped}");
        if name.len() <= 200 {
            return name;
        }
        const OFFSET: u128 = 0x6c62272e07bb014262b821756295c58d;
        const PRIME: u128 = 0x0000000001000000000000000000013b;
        let hash = id.bytes().fold(OFFSET, |hash, byte| {
            (hash ^ u128::from(byte)).wrapping_mul(PRIME)
        });
        format!("{kind}-%h{hash:032x}")
    }
}
