//! Checking what a plugin confirmed against what we asked for.
//!
//! `ValidateVolumeCapabilities` answers with a `confirmed` message only when
//! every requested capability is supported. An unset `confirmed` is not an
//! error in CSI (the plugin's `message` says why); a set one must match the
//! request field by field, because a plugin built against an older spec may
//! confirm a capability whose newer fields it never read. Errors name the
//! field that differs; mount flags are compared but never printed.

use std::fmt;

use super::model::{AttachmentMode, Capability};

/// The plugin's answer to `ValidateVolumeCapabilities`, in our types.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Validation {
    /// `confirmed` was set, with these capabilities.
    Confirmed(Vec<Capability>),
    /// `confirmed` was unset; the plugin's message says why.
    NotConfirmed { message: String },
}

/// How a confirmed capability differs from the requested one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Mismatch {
    AccessMode {
        requested: String,
        got: String,
    },
    AttachmentMode {
        requested: AttachmentMode,
        validated: AttachmentMode,
    },
    FsType {
        requested: String,
        got: String,
    },
    /// The flags differ; deliberately carries no flags.
    MountFlags,
    /// `confirmed` was set but held no capability at all.
    NothingConfirmed,
    /// The plugin left `confirmed` unset.
    NotConfirmed {
        message: String,
    },
}

impl fmt::Display for Mismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Mismatch::AccessMode { requested, got } => {
                write!(f, "requested access mode {requested}, got {got}")
            }
            Mismatch::AttachmentMode {
                requested,
                validated,
            } => {
                write!(f, "{validated} was validated but {requested} was requested")
            }
            Mismatch::FsType { requested, got } => {
                let got = if got.is_empty() { "none" } else { got };
                write!(f, "requested filesystem type {requested}, got {got}")
            }
            Mismatch::MountFlags => {
                f.write_str("requested mount flags did not match the confirmed ones")
            }
            Mismatch::NothingConfirmed => f.write_str("plugin confirmed no capability"),
            Mismatch::NotConfirmed { message } if message.is_empty() => {
                f.write_str("plugin did not confirm the capabilities")
            }
            Mismatch::NotConfirmed { message } => {
                write!(f, "plugin did not confirm the capabilities: {message}")
            }
        }
    }
}

impl std::error::Error for Mismatch {}

/// Compares one confirmed capability with one requested, field by field, in
/// the order a user would fix them: attachment, access mode, fs type, flags.
pub fn compare(requested: &Capability, got: &Capability) -> Result<(), Mismatch> {
    if requested.attachment_mode != got.attachment_mode {
        return Err(Mismatch::AttachmentMode {
            requested: requested.attachment_mode,
            validated: got.attachment_mode,
        });
    }
    if requested.access_mode != got.access_mode {
        return Err(Mismatch::AccessMode {
            requested: requested.access_mode.to_string(),
            got: got.access_mode.to_string(),
        });
    }
    if requested.attachment_mode == AttachmentMode::FileSystem {
        let (want, have) = (&requested.mount_options, &got.mount_options);
        // An empty requested fs type means "the plugin's default", which the
        // plugin may name in its answer.
        if !want.fs_type.is_empty() && want.fs_type != have.fs_type {
            return Err(Mismatch::FsType {
                requested: want.fs_type.clone(),
                got: have.fs_type.clone(),
            });
        }
        if !want.mount_flags.is_subset_of(&have.mount_flags) {
            return Err(Mismatch::MountFlags);
        }
    }
    Ok(())
}

/// Checks a `ValidateVolumeCapabilities` answer per the spec: an unset
/// `confirmed` fails with the plugin's message (the caller logs it); a set one
/// must contain a match for every requested capability.
pub fn check_validation(requested: &[Capability], answer: &Validation) -> Result<(), Mismatch> {
    let confirmed = match answer {
        Validation::NotConfirmed { message } => {
            return Err(Mismatch::NotConfirmed {
                message: message.clone(),
            })
        }
        Validation::Confirmed(confirmed) => confirmed,
    };
    if confirmed.is_empty() {
        return Err(Mismatch::NothingConfirmed);
    }
    for (i, want) in requested.iter().enumerate() {
        if confirmed.iter().any(|got| compare(want, got).is_ok()) {
            continue;
        }
        // Report against the confirmed capability in the same position,
        // which is what a well-behaved plugin echoes back.
        let got = confirmed.get(i).unwrap_or(&confirmed[0]);
        compare(want, got)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::csi::model::{AccessMode, MountFlags, MountOptions};

    fn fs(mode: AccessMode, fs_type: &str, flags: &[&str]) -> Capability {
        Capability::new(mode, AttachmentMode::FileSystem).with_mount_options(MountOptions {
            fs_type: fs_type.into(),
            mount_flags: MountFlags::new(flags.iter().map(|f| f.to_string()).collect()),
            volume_mount_group: String::new(),
        })
    }

    #[test]
    fn identical_capabilities_match() {
        let cap = fs(AccessMode::SingleNodeWriter, "ext4", &["noatime"]);
        assert_eq!(compare(&cap, &cap.clone()), Ok(()));
    }

    #[test]
    fn access_mode_difference_names_both_modes() {
        let err = compare(
            &fs(AccessMode::SingleNodeWriter, "", &[]),
            &fs(AccessMode::MultiNodeReaderOnly, "", &[]),
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "requested access mode single-node-writer, got multi-node-reader-only"
        );
    }

    #[test]
    fn fs_type_difference_names_both_types() {
        let err = compare(
            &fs(AccessMode::SingleNodeWriter, "ext4", &[]),
            &fs(AccessMode::SingleNodeWriter, "xfs", &[]),
        )
        .unwrap_err();
        assert_eq!(err.to_string(), "requested filesystem type ext4, got xfs");
    }

    #[test]
    fn unset_requested_fs_type_accepts_the_plugins_default() {
        let ok = compare(
            &fs(AccessMode::SingleNodeWriter, "", &[]),
            &fs(AccessMode::SingleNodeWriter, "ext4", &[]),
        );
        assert_eq!(ok, Ok(()));
    }

    #[test]
    fn attachment_difference_says_what_was_validated() {
        let block = Capability::new(AccessMode::SingleNodeWriter, AttachmentMode::BlockDevice);
        let err = compare(&fs(AccessMode::SingleNodeWriter, "", &[]), &block).unwrap_err();
        assert_eq!(
            err.to_string(),
            "block-device was validated but file-system was requested"
        );
    }

    #[test]
    fn missing_mount_flag_fails_without_printing_flags() {
        let err = compare(
            &fs(AccessMode::SingleNodeWriter, "", &["password=hunter2"]),
            &fs(AccessMode::SingleNodeWriter, "", &["noatime"]),
        )
        .unwrap_err();
        assert_eq!(err, Mismatch::MountFlags);
        let shown = format!("{err} {err:?}");
        assert!(
            !shown.contains("hunter2") && !shown.contains("noatime"),
            "{shown}"
        );
    }

    #[test]
    fn extra_confirmed_flags_are_accepted() {
        let ok = compare(
            &fs(AccessMode::SingleNodeWriter, "", &["ro"]),
            &fs(AccessMode::SingleNodeWriter, "", &["ro", "noatime"]),
        );
        assert_eq!(ok, Ok(()));
    }

    #[test]
    fn unset_confirmed_fails_with_the_plugins_message() {
        let answer = Validation::NotConfirmed {
            message: "block is not supported".into(),
        };
        let err =
            check_validation(&[fs(AccessMode::SingleNodeWriter, "", &[])], &answer).unwrap_err();
        assert_eq!(
            err.to_string(),
            "plugin did not confirm the capabilities: block is not supported"
        );
    }

    #[test]
    fn empty_confirmed_list_is_a_mismatch() {
        let err = check_validation(
            &[fs(AccessMode::SingleNodeWriter, "", &[])],
            &Validation::Confirmed(vec![]),
        )
        .unwrap_err();
        assert_eq!(err, Mismatch::NothingConfirmed);
    }

    #[test]
    fn every_requested_capability_must_be_confirmed_in_any_order() {
        let a = fs(AccessMode::SingleNodeWriter, "ext4", &[]);
        let b = fs(AccessMode::MultiNodeReaderOnly, "ext4", &[]);
        let answer = Validation::Confirmed(vec![b.clone(), a.clone()]);
        assert_eq!(check_validation(&[a.clone(), b.clone()], &answer), Ok(()));

        let partial = Validation::Confirmed(vec![a.clone()]);
        let err = check_validation(&[a, b], &partial).unwrap_err();
        assert_eq!(
            err.to_string(),
            "requested access mode multi-node-reader-only, got single-node-writer"
        );
    }

    #[test]
    fn older_plugin_confirming_a_different_fs_type_is_caught() {
        let requested = fs(AccessMode::SingleNodeWriter, "ext4", &[]);
        let answer = Validation::Confirmed(vec![fs(AccessMode::SingleNodeWriter, "xfs", &[])]);
        let err = check_validation(&[requested], &answer).unwrap_err();
        assert_eq!(err.to_string(), "requested filesystem type ext4, got xfs");
    }
}
