//! The requests of a volume's lifecycle, for the tests that drive a plugin
//! by hand as a CO would (strict mode, block volumes): each builder takes
//! the capability, so file-system and block volumes share them.

use std::path::Path;

use csi_agent::csi::types::*;
use csi_agent::csi::{AccessMode, AttachmentMode, Capability, Client, Secrets};

use crate::util::NODE;

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
