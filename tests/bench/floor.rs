//! The floor: what a claim costs with no agent at all. A bare CSI client in
//! the benchmark's own process sends the RPCs the agent would send, in the
//! same order, bind-mounts the published volume where the agent would,
//! and makes one small record durable the way the agent's journal does
//! (one write and one `fdatasync`). A crash-safe claim cannot cost less:
//! the RPCs and the mount are the work, and without one durable record a
//! crash would forget what was attached and mounted.

use std::fs;
use std::path::{Path, PathBuf};

use csi_agent::csi::types::{ControllerPublish, CreateVolume, NodePublish, NodeStage, StringMap};
use csi_agent::csi::{AccessMode, AttachmentMode, Capability, Client, Secrets};
use csi_agent::mount::{Mounter, SysMounter, UnmountMode};
use csi_agent::state::journal::Journal;

use crate::rig::NODE;

/// Where one claim's mounts go.
#[derive(Clone, Debug)]
pub struct ClaimPaths {
    /// NodeStage's target; exists before the claim.
    pub staging: PathBuf,
    /// NodePublish's target; its parent exists before the claim.
    pub publish: PathBuf,
    /// The host bind mount, if any; exists before the claim.
    pub target: Option<PathBuf>,
}

impl ClaimPaths {
    /// Paths under `root` for `volume` and `alloc`, with the directories
    /// the CO must create made now, outside any measurement.
    pub fn prepare(root: &Path, volume: &str, alloc: &str, target: bool) -> ClaimPaths {
        let staging = root.join("staging").join(volume);
        let publish_parent = root.join("per-alloc").join(alloc);
        fs::create_dir_all(&staging).expect("create the floor's staging dir");
        fs::create_dir_all(&publish_parent).expect("create the floor's publish dir");
        let target = target.then(|| {
            let t = root.join("targets").join(alloc);
            fs::create_dir_all(&t).expect("create the floor's target");
            t
        });
        ClaimPaths {
            staging,
            publish: publish_parent.join(volume),
            target,
        }
    }
}

/// The capability every benchmark volume has and every claim uses.
pub fn capability() -> Capability {
    Capability::new(AccessMode::SingleNodeWriter, AttachmentMode::FileSystem)
}

/// Creates a volume with the plugin directly; its ID.
pub fn create_volume(client: &Client, name: &str) -> String {
    client
        .create_volume(&CreateVolume {
            name: name.to_string(),
            capacity: Default::default(),
            capabilities: vec![capability()],
            parameters: StringMap::new(),
            secrets: Secrets::new(),
            accessibility: None,
            content_source: None,
        })
        .expect("CreateVolume for the floor")
        .volume_id
}

/// A bare client and the durable record of its claims.
pub struct Floor {
    journal: Journal,
}

impl Floor {
    /// A floor whose records go to the journal file `path`.
    pub fn new(path: &Path) -> Floor {
        let (journal, _) = Journal::open(path, 0).expect("open the floor's journal");
        Floor { journal }
    }

    /// Makes one small record durable: one write, one fdatasync.
    pub fn record(&mut self, what: &str) {
        self.journal
            .append_batch(&[what.as_bytes()])
            .expect("append to the floor's journal");
    }

    /// ControllerPublish → NodeStage → NodePublish → the host bind mount
    /// (with a target) → one durable record.
    pub fn claim(&mut self, client: &Client, volume: &str, paths: &ClaimPaths) {
        claim_rpcs(client, volume, paths);
        if let Some(target) = &paths.target {
            SysMounter
                .bind(&paths.publish, target, true)
                .expect("bind-mount the floor's target");
        }
        self.record(volume);
    }

    /// Unmounts the host target → NodeUnpublish → NodeUnstage →
    /// ControllerUnpublish → one durable record.
    pub fn release(&mut self, client: &Client, volume: &str, paths: &ClaimPaths) {
        if let Some(target) = &paths.target {
            SysMounter
                .unmount(target, UnmountMode::Normal)
                .expect("unmount the floor's target");
        }
        release_rpcs(client, volume, paths);
        self.record(volume);
    }
}

/// The three RPCs of a claim, as the agent sends them.
pub fn claim_rpcs(client: &Client, volume: &str, paths: &ClaimPaths) {
    let publish_context = client
        .controller_publish(&ControllerPublish {
            volume_id: volume.to_string(),
            node_id: NODE.to_string(),
            capability: capability(),
            read_only: false,
            secrets: Secrets::new(),
            volume_context: StringMap::new(),
        })
        .expect("ControllerPublishVolume");
    client
        .node_stage(&NodeStage {
            volume_id: volume.to_string(),
            publish_context: publish_context.clone(),
            staging_target_path: paths.staging.clone(),
            capability: capability(),
            secrets: Secrets::new(),
            volume_context: StringMap::new(),
        })
        .expect("NodeStageVolume");
    client
        .node_publish(&NodePublish {
            volume_id: volume.to_string(),
            publish_context,
            staging_target_path: Some(paths.staging.clone()),
            target_path: paths.publish.clone(),
            capability: capability(),
            read_only: false,
            secrets: Secrets::new(),
            volume_context: StringMap::new(),
        })
        .expect("NodePublishVolume");
}

/// The three RPCs of a release, in the spec's order.
pub fn release_rpcs(client: &Client, volume: &str, paths: &ClaimPaths) {
    client
        .node_unpublish(volume, &paths.publish)
        .expect("NodeUnpublishVolume");
    client
        .node_unstage(volume, &paths.staging)
        .expect("NodeUnstageVolume");
    client
        .controller_unpublish(volume, NODE, &Secrets::new())
        .expect("ControllerUnpublishVolume");
}
