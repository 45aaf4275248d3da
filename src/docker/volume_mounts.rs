//! Which containers mount which named volumes: `GET /containers/json?all=1`
//! read into [`ContainerVolumes`], for the volume plugin's reconciler.
//!
//! A container's listed mounts name a volume by its `Name` and `Driver`
//! (the volume plugin's name), never by the mount ID the engine sent the
//! plugin, so the volume name is what the reconciler can match on. Bind
//! mounts and tmpfs mounts are left out. Podman's compat API answers the
//! same path with the same shape.

use super::{Engine, Error};
use json::Value;

/// A container, its state and the named volumes it mounts.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ContainerVolumes {
    pub id: String,
    /// The engine's state: `created`, `running`, `paused`, `restarting`,
    /// `removing`, `exited` or `dead` (dockerd); Podman's compat API also
    /// says `stopped`, `configured` or `initialized`.
    pub state: String,
    pub volumes: Vec<VolumeMount>,
}

/// One mount of a named volume.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VolumeMount {
    /// The volume's name as the engine knows it.
    pub name: String,
    /// The volume driver serving it (`local`, or a plugin's name).
    pub driver: String,
}

impl ContainerVolumes {
    /// From one item of `GET /containers/json`.
    fn from_summary(value: &Value) -> Result<ContainerVolumes, Error> {
        let id = value.get("Id").and_then(Value::as_str).unwrap_or("");
        if id.is_empty() {
            return Err(Error::Protocol(
                "a listed container without an Id".to_string(),
            ));
        }
        let text =
            |v: &Value, key: &str| v.get(key).and_then(Value::as_str).unwrap_or("").to_string();
        let mounts = value.get("Mounts").and_then(Value::as_array).unwrap_or(&[]);
        let volumes = mounts
            .iter()
            .filter(|m| m.get("Type").and_then(Value::as_str) == Some("volume"))
            .map(|m| VolumeMount {
                name: text(m, "Name"),
                driver: text(m, "Driver"),
            })
            .filter(|m| !m.name.is_empty())
            .collect();
        Ok(ContainerVolumes {
            id: id.to_string(),
            state: text(value, "State"),
            volumes,
        })
    }
}

impl Engine {
    /// `GET /containers/json?all=1`: every container the engine has,
    /// running or not, with the named volumes it mounts.
    pub fn volume_mounts(&self) -> Result<Vec<ContainerVolumes>, Error> {
        let answer = self.get_json("/containers/json?all=1")?;
        let items = answer.as_array().ok_or_else(|| {
            Error::Protocol("GET /containers/json did not answer a list".to_string())
        })?;
        items.iter().map(ContainerVolumes::from_summary).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn named_volumes_are_kept_and_binds_left_out() {
        let value = json::parse(
            r#"{"Id":"abc","Names":["/web"],"State":"running","Mounts":[
                {"Type":"volume","Name":"data","Source":"/x","Destination":"/data",
                 "Driver":"csi","Mode":"z","RW":true,"Propagation":""},
                {"Type":"bind","Source":"/etc","Destination":"/host-etc","RW":false},
                {"Type":"tmpfs","Destination":"/run"},
                {"Type":"volume","Name":"cache","Driver":"local"}]}"#,
        )
        .unwrap();
        let container = ContainerVolumes::from_summary(&value).unwrap();
        assert_eq!(container.id, "abc");
        assert_eq!(container.state, "running");
        let volume = |name: &str, driver: &str| VolumeMount {
            name: name.into(),
            driver: driver.into(),
        };
        assert_eq!(
            container.volumes,
            [volume("data", "csi"), volume("cache", "local")]
        );
    }

    #[test]
    fn a_container_without_mounts_or_id() {
        let value = json::parse(r#"{"Id":"abc","State":"exited","Mounts":null}"#).unwrap();
        let container = ContainerVolumes::from_summary(&value).unwrap();
        assert!(container.volumes.is_empty());
        let err = ContainerVolumes::from_summary(&json::parse("{}").unwrap()).unwrap_err();
        assert!(err.to_string().contains("without an Id"), "{err}");
    }
}
