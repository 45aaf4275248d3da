//! A state written by the first releases, which staged once per *usage*
//! (`staging/<volume>/<usage>`), loads into the one-staging-per-volume
//! model: claims are kept, an old staging is unstaged only once no
//! publish goes through it, a new claim reuses an old staging that can
//! serve it (so the volume keeps one staging path), and once the old
//! stagings are gone the volume is staged at `staging/<volume>`.
//!
//! The old state is made the way the first releases made it: the plugin
//! really staged and published at the old paths, and the snapshot and a
//! journal record hold the records in the old shape (no layout number, no
//! staging named by claims), written with the state store itself.

use std::fs;
use std::path::Path;

use csi_agent::csi::types::{ControllerPublish, NodePublish, NodeStage, StringMap};
use csi_agent::csi::{AccessMode, AttachmentMode, Capability};
use csi_agent::proto::state as pb;
use csi_agent::state::Store;
use protobuf::{Message, MessageField};

use crate::harness::{healthy, WAIT};
use crate::util::{mount_state, require_root, Plugin, NODE};
use crate::volume_util::*;

const MNMW: &str = "multi-node-multi-writer";

fn capability() -> Capability {
    Capability::new(AccessMode::MultiNodeMultiWriter, AttachmentMode::FileSystem)
}

fn pb_capability() -> MessageField<pb::Capability> {
    MessageField::some(pb::Capability {
        access_mode: AccessMode::MultiNodeMultiWriter.number(),
        attachment_mode: 2,
        ..Default::default()
    })
}

/// A claim record as the first releases wrote it.
fn old_claim(alloc: &str, usage: &str, read_only: bool) -> pb::VolumeClaim {
    pb::VolumeClaim {
        alloc_id: alloc.into(),
        read_only,
        wanted: true,
        usage: usage.into(),
        capability: pb_capability(),
        published: pb::Step::DONE.into(),
        ..Default::default()
    }
}

fn calls_of(rig: &Rig, method: &str) -> Vec<String> {
    rig.plugin
        .calls()
        .into_iter()
        .filter(|c| c.starts_with(method))
        .collect()
}

#[test]
fn a_per_usage_state_keeps_its_claims_and_moves_to_one_staging_per_volume() {
    if !require_root() {
        return;
    }
    // Lenient: the old layout broke the spec's one-staging rule, which the
    // strict plugin would refuse while the test sets it up.
    let plugin = Plugin::start_lenient_with(&[("RUST_LOG", "csi_agent=debug")], &[]);
    let mut rig = Rig::around(plugin, PluginType::Monolith, None);
    let external = rig.create("vol", MNMW).external_id;
    assert_eq!(rig.agent.sigterm(), 0);

    // What the first releases did for a writer w1 and a reader r1.
    let csi = rig.plugin.csi_client();
    let context = csi
        .controller_publish(&ControllerPublish {
            volume_id: external.clone(),
            node_id: NODE.into(),
            capability: capability(),
            read_only: false,
            secrets: Default::default(),
            volume_context: Default::default(),
        })
        .unwrap();
    let (rw, ro) = (rw_usage(MNMW), ro_usage(MNMW));
    let staging_dir = rig.staging_path("vol");
    let old_staging = |usage: &str| staging_dir.join(usage);
    for (alloc, usage, read_only) in [("w1", &rw, false), ("r1", &ro, true)] {
        let staging = old_staging(usage);
        fs::create_dir_all(&staging).unwrap();
        csi.node_stage(&NodeStage {
            volume_id: external.clone(),
            publish_context: context.clone(),
            staging_target_path: staging.clone(),
            capability: capability(),
            secrets: Default::default(),
            volume_context: Default::default(),
        })
        .unwrap();
        let target = rig.publish_path("vol", alloc, usage);
        fs::create_dir_all(target.parent().unwrap()).unwrap();
        csi.node_publish(&NodePublish {
            volume_id: external.clone(),
            publish_context: context.clone(),
            staging_target_path: Some(staging),
            target_path: target,
            capability: capability(),
            read_only,
            secrets: Default::default(),
            volume_context: Default::default(),
        })
        .unwrap();
    }
    write_old_state(&rig.agent.data_dir, &context, &rw, &ro);

    rig.agent.restart();
    rig.agent.wait_for(PLUGIN, healthy, WAIT);
    let v = volume(&rig.agent, "vol");
    assert!(taken(&v, "w1") && taken(&v, "r1"), "{v:#?}");
    let mut paths: Vec<&str> = v.stagings.iter().map(|s| s.path.as_str()).collect();
    paths.sort();
    let expected = [old_staging(&ro), old_staging(&rw)];
    assert_eq!(
        paths,
        expected
            .iter()
            .map(|p| p.to_str().unwrap())
            .collect::<Vec<_>>()
    );
    assert!(v.stagings.iter().all(|s| s.state == "staged"), "{v:#?}");

    // w1 goes: its old staging has no publish left and is unstaged; the
    // reader's stays.
    released(&rig.agent, "vol", "w1");
    assert_eq!(mount_state(&old_staging(&rw)), None);
    assert_eq!(mount_state(&old_staging(&ro)), Some(false));
    assert!(calls_of(&rig, "NodeUnstageVolume")[0].contains(&rw));

    // A new writer publishes through the old staging that is still there
    // (staged with a writable capability): still one staging path.
    let stages_before = calls_of(&rig, "NodeStageVolume").len();
    claimed(&rig.agent, &claim_req("vol", "w2"));
    assert_eq!(calls_of(&rig, "NodeStageVolume").len(), stages_before);
    assert_eq!(volume(&rig.agent, "vol").stagings.len(), 1);

    released(&rig.agent, "vol", "r1");
    released(&rig.agent, "vol", "w2");
    assert_eq!(mount_state(&old_staging(&ro)), None);

    // From now on: the volume's one staging.
    claimed(&rig.agent, &claim_req("vol", "w3"));
    assert_eq!(mount_state(&rig.staging_path("vol")), Some(false));
    released(&rig.agent, "vol", "w3");
    rig.assert_nothing_left();
}

/// Rewrites the agent's state as the first releases would have left it:
/// the snapshot with w1's claim, a journal record adding r1's.
fn write_old_state(data_dir: &Path, context: &StringMap, rw: &str, ro: &str) {
    let (mut store, loaded) = Store::open(data_dir).unwrap();
    assert!(
        loaded.journal.is_empty(),
        "a stopped agent leaves a snapshot"
    );
    let mut state = loaded.state;
    let volume = state.volumes.iter_mut().find(|v| v.id == "vol").unwrap();
    volume.attachment = pb::Step::DONE.into();
    volume.publish_context = context.clone().into_iter().collect();
    volume.stagings = [rw, ro]
        .iter()
        .map(|usage| pb::Staging {
            usage: usage.to_string(),
            step: pb::Step::DONE.into(),
            capability: pb_capability(),
            read_only: false,
            ..Default::default()
        })
        .collect();
    volume.claims = vec![old_claim("w1", rw, false)];
    volume.staging_layout = 0;
    let mut record = volume.clone();
    store.save(&state).unwrap();
    record.claims.push(old_claim("r1", ro, true));
    let bytes = pb::JournalRecord {
        change: Some(pb::journal_record::Change::Volume(record)),
        ..Default::default()
    }
    .write_to_bytes()
    .unwrap();
    store.append(&[bytes]).unwrap();
}
