//! What the hostpath plugin's controller says about its volumes, over real
//! gRPC against a strict plugin: the capabilities it advertises,
//! ControllerGetVolume and ListVolumes with published nodes and volume
//! conditions (abnormal once a volume's data is removed behind the
//! plugin's back), and ListVolumes' paging. One rule a test.

use std::collections::BTreeSet;
use std::fs;

use csi_agent::csi::types::*;
use csi_agent::csi::{Client, Code, Secrets};

use crate::block::{backing_file, devices_showing};
use crate::requests::{attach, block_cap, create_req, detach, mount_cap, use_volume};
use crate::util::{require_root, Plugin, NODE};

const MIB: i64 = 1 << 20;

fn condition(client: &Client, volume: &str) -> VolumeCondition {
    client
        .controller_get_volume(volume)
        .unwrap()
        .condition
        .unwrap()
}

#[test]
fn the_plugin_advertises_what_it_does() {
    let plugin = Plugin::start_strict();
    let client = plugin.client();
    use ControllerCapability as C;
    let controller: BTreeSet<_> = [
        C::CreateDeleteVolume,
        C::PublishUnpublishVolume,
        C::ListVolumes,
        C::GetCapacity,
        C::CreateDeleteSnapshot,
        C::ListSnapshots,
        C::CloneVolume,
        C::PublishReadonly,
        C::ExpandVolume,
        C::ListVolumesPublishedNodes,
        C::VolumeCondition,
        C::GetVolume,
        C::SingleNodeMultiWriter,
    ]
    .into();
    assert_eq!(client.controller_capabilities().unwrap(), controller);
    use NodeCapability as N;
    let node: BTreeSet<_> = [
        N::StageUnstageVolume,
        N::GetVolumeStats,
        N::ExpandVolume,
        N::VolumeCondition,
        N::SingleNodeMultiWriter,
        N::VolumeMountGroup,
    ]
    .into();
    assert_eq!(client.node_capabilities().unwrap(), node);
    let plugin_caps = client.plugin_capabilities().unwrap();
    assert!(plugin_caps.contains(&PluginCapability::OnlineExpansion));
    assert_eq!(plugin.violations(), Vec::<String>::new());
}

#[test]
fn controller_get_volume_describes_the_volume_and_where_it_is_published() {
    let plugin = Plugin::start_strict();
    let client = plugin.client();
    let created = client
        .create_volume(&create_req("v", &mount_cap(), MIB))
        .unwrap();
    let got = client.controller_get_volume("v").unwrap();
    assert_eq!(got.volume, created);
    assert_eq!(got.published_node_ids, Vec::<String>::new());
    assert_eq!(
        got.condition,
        Some(VolumeCondition {
            abnormal: false,
            message: "volume is healthy".into(),
        })
    );
    attach(&client, "v", &mount_cap());
    let got = client.controller_get_volume("v").unwrap();
    assert_eq!(got.published_node_ids, vec![NODE.to_string()]);
    detach(&client, "v").unwrap();
    let got = client.controller_get_volume("v").unwrap();
    assert_eq!(got.published_node_ids, Vec::<String>::new());
    assert_eq!(plugin.violations(), Vec::<String>::new());
}

#[test]
fn controller_get_volume_of_an_unknown_volume_is_not_found() {
    let plugin = Plugin::start_strict();
    let client = plugin.client();
    let err = client.controller_get_volume("ghost").unwrap_err();
    assert_eq!(err.code, Code::NotFound, "{err}");
    client
        .create_volume(&create_req("v", &mount_cap(), MIB))
        .unwrap();
    client.delete_volume("v", &Secrets::new()).unwrap();
    let err = client.controller_get_volume("v").unwrap_err();
    assert_eq!(err.code, Code::NotFound, "deleted: {err}");
    let err = client.controller_get_volume("").unwrap_err();
    assert_eq!(err.code, Code::InvalidArgument, "{err}");
    assert_eq!(plugin.violations(), Vec::<String>::new());
}

#[test]
fn a_volume_whose_directory_was_removed_is_abnormal() {
    let plugin = Plugin::start_strict();
    let client = plugin.client();
    client
        .create_volume(&create_req("v", &mount_cap(), MIB))
        .unwrap();
    assert!(!condition(&client, "v").abnormal);
    fs::remove_dir_all(plugin.dir.join("base/volumes/v")).unwrap();
    let sick = condition(&client, "v");
    assert!(sick.abnormal);
    assert!(sick.message.contains("is missing"), "{}", sick.message);
    let listed = client.list_volumes(0, "").unwrap();
    assert_eq!(listed.entries[0].condition, Some(sick));
    assert_eq!(plugin.violations(), Vec::<String>::new());
}

#[test]
fn a_block_volume_whose_backing_file_was_removed_is_abnormal() {
    let plugin = Plugin::start_strict();
    let client = plugin.client();
    client
        .create_volume(&create_req("b", &block_cap(), MIB))
        .unwrap();
    assert!(!condition(&client, "b").abnormal);
    fs::remove_file(backing_file(&plugin, "b")).unwrap();
    let sick = condition(&client, "b");
    assert!(sick.abnormal);
    assert!(
        sick.message.contains("backing file") && sick.message.contains("is missing"),
        "{}",
        sick.message
    );
    assert_eq!(plugin.violations(), Vec::<String>::new());
}

#[test]
fn a_staged_block_volume_whose_device_was_detached_is_abnormal() {
    if !require_root() {
        return;
    }
    let plugin = Plugin::start_strict();
    let client = plugin.client();
    client
        .create_volume(&create_req("b", &block_cap(), MIB))
        .unwrap();
    use_volume(&client, &plugin.dir, "b", &block_cap());
    assert!(!condition(&client, "b").abnormal);
    // Detached behind the plugin's back (a bind mount of the device node
    // does not hold the device open).
    let device = devices_showing(&backing_file(&plugin, "b")).remove(0);
    let number = device.trim_start_matches("loop").parse().unwrap();
    csi_agent::sys::loop_dev::detach(&csi_agent::sys::loop_dev::LoopDevice {
        number,
        read_only: false,
    })
    .unwrap();
    let sick = condition(&client, "b");
    assert!(sick.abnormal);
    assert!(
        sick.message.contains("no loop device shows it"),
        "{}",
        sick.message
    );
    assert_eq!(plugin.violations(), Vec::<String>::new());
}

#[test]
fn list_volumes_pages_with_published_nodes_and_conditions() {
    let plugin = Plugin::start_strict();
    let client = plugin.client();
    for volume in ["v3", "v0", "v4", "v1", "v2"] {
        client
            .create_volume(&create_req(volume, &mount_cap(), MIB))
            .unwrap();
    }
    attach(&client, "v2", &mount_cap());
    fs::remove_dir_all(plugin.dir.join("base/volumes/v3")).unwrap();
    let mut seen = Vec::new();
    let mut token = String::new();
    let mut pages = 0;
    loop {
        let page = client.list_volumes(2, &token).unwrap();
        pages += 1;
        assert!(page.entries.len() <= 2);
        seen.extend(page.entries);
        if page.next_token.is_empty() {
            break;
        }
        token = page.next_token;
    }
    assert_eq!(pages, 3);
    let ids: Vec<&str> = seen.iter().map(|e| e.volume.volume_id.as_str()).collect();
    assert_eq!(
        ids,
        ["v0", "v1", "v2", "v3", "v4"],
        "every volume once, in order"
    );
    for entry in &seen {
        let id = entry.volume.volume_id.as_str();
        let published = if id == "v2" {
            vec![NODE.to_string()]
        } else {
            vec![]
        };
        assert_eq!(entry.published_node_ids, published, "{id}");
        let abnormal = entry.condition.as_ref().map(|c| c.abnormal);
        assert_eq!(abnormal, Some(id == "v3"), "{id}");
        assert_eq!(entry.volume.capacity_bytes, MIB);
    }
    assert_eq!(client.list_volumes(0, "").unwrap().entries, seen);
    detach(&client, "v2").unwrap();
    assert_eq!(plugin.violations(), Vec::<String>::new());
}

#[test]
fn list_volumes_with_an_invalid_starting_token_is_aborted() {
    let plugin = Plugin::start_strict();
    let client = plugin.client();
    client
        .create_volume(&create_req("v", &mount_cap(), MIB))
        .unwrap();
    for token in ["bogus", "-1", "2"] {
        let err = client.list_volumes(1, token).unwrap_err();
        assert_eq!(err.code, Code::Aborted, "{token}: {err}");
    }
    let last = client.list_volumes(1, "1").unwrap();
    assert_eq!((last.entries.len(), last.next_token), (0, String::new()));
    let err = client.list_volumes(-1, "").unwrap_err();
    assert_eq!(err.code, Code::InvalidArgument, "{err}");
    assert_eq!(plugin.violations(), Vec::<String>::new());
}
