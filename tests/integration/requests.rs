//! The requests of a volume's lifecycle, for the tests that drive a plugin
//! by hand as a CO would (strict mode, block volumes): each builder takes
//! the capability, so file-system and block volumes share them.

use std::path::{Path, PathBuf};

use csi_agent::csi::types::*;
use csi_agent::csi::{AccessMode, AttachmentMode, Capability, Client, Secrets};

use crate::util::{TestDir, NODE};

pub fn mount_cap() -> Capability {
    Capability::new(AccessMode::SingleNodeWriter, AttachmentMode::FileSystem)
}

pub fn block_cap() -> Capability {
    Capability::new(AccessMode::SingleNodeWriter, AttachmentMode::BlockDevice)
}

pub fn create_req(name: &str, cap: &Capability, bytes: i64) -> CreateVolume {
    CreateVolume {
        name: name.into(),
        capacity: CapacityRange {
            required_bytes: bytes,
            limit_bytes: 0,
        },
        capabilities: vec![cap.clone()],
        ..CreateVolume::default()
    }
}

/// CreateVolume of `name` with the contents of `source`.
pub fn create_from(
    name: &str,
    cap: &Capability,
    bytes: i64,
    source: ContentSource,
) -> CreateVolume {
    CreateVolume {
        content_source: Some(source),
        ..create_req(name, cap, bytes)
    }
}

pub fn snapshot_req(name: &str, source_volume_id: &str) -> CreateSnapshot {
    CreateSnapshot {
        name: name.into(),
        source_volume_id: source_volume_id.into(),
        ..CreateSnapshot::default()
    }
}

/// ControllerPublishVolume to [`NODE`]; its publish context.
pub fn attach(client: &Client, volume: &str, cap: &Capability) -> StringMap {
    client
        .controller_publish(&ControllerPublish {
            volume_id: volume.into(),
            node_id: NODE.into(),
            capability: cap.clone(),
            read_only: false,
            secrets: Secrets::new(),
            volume_context: StringMap::new(),
        })
        .unwrap()
}

pub fn detach(client: &Client, volume: &str) -> Result<(), csi_agent::csi::Error> {
    client.controller_unpublish(volume, NODE, &Secrets::new())
}

pub fn stage_req(volume: &str, staging: &Path, ctx: &StringMap, cap: &Capability) -> NodeStage {
    NodeStage {
        volume_id: volume.into(),
        publish_context: ctx.clone(),
        staging_target_path: staging.to_path_buf(),
        capability: cap.clone(),
        secrets: Secrets::new(),
        volume_context: StringMap::new(),
    }
}

pub fn publish_req(
    volume: &str,
    staging: &Path,
    target: &Path,
    ctx: &StringMap,
    cap: &Capability,
    read_only: bool,
) -> NodePublish {
    NodePublish {
        volume_id: volume.into(),
        publish_context: ctx.clone(),
        staging_target_path: Some(staging.to_path_buf()),
        target_path: target.to_path_buf(),
        capability: cap.clone(),
        read_only,
        secrets: Secrets::new(),
        volume_context: StringMap::new(),
    }
}

/// Where [`use_volume`] staged and published a volume.
pub struct InUse {
    pub publish_context: StringMap,
    pub staging: PathBuf,
    pub target: PathBuf,
}

/// Attaches, stages and publishes (read-write) `volume` as a CO would, at
/// `staging/<volume>` and `per-alloc/<volume>/target` under `dir`.
pub fn use_volume(client: &Client, dir: &TestDir, volume: &str, cap: &Capability) -> InUse {
    let ctx = attach(client, volume, cap);
    let staging = dir.mkdir(&format!("staging/{volume}"));
    client
        .node_stage(&stage_req(volume, &staging, &ctx, cap))
        .unwrap();
    let target = dir.mkdir(&format!("per-alloc/{volume}")).join("target");
    client
        .node_publish(&publish_req(volume, &staging, &target, &ctx, cap, false))
        .unwrap();
    InUse {
        publish_context: ctx,
        staging,
        target,
    }
}
