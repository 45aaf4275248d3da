//! A pull's progress, summed over its layers from the engine's progress
//! messages: each layer's `Downloading` message carries the bytes it has
//! and the layer's size (`progressDetail`); `Download complete`, `Pull
//! complete` and `Already exists` end a layer.

use std::collections::BTreeMap;

use json::Value;

/// The most layers a pull's progress follows: the engine names layers by
/// the IDs it sends, and one that sends more is not followed further (its
/// later layers count for nothing).
pub const MAX_PULL_LAYERS: usize = 1000;

/// How far a pull is: bytes of its layers downloaded, of their sizes as
/// the engine knows them so far (a layer's size is known once its download
/// starts).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PullProgress {
    pub done: u64,
    pub total: u64,
    /// Layers seen, and how many of them are downloaded (or were there).
    pub layers: usize,
    pub layers_done: usize,
}

/// The layers of one pull.
#[derive(Default)]
pub(super) struct Tally {
    /// By layer ID: bytes downloaded, size (0 while unknown), done.
    layers: BTreeMap<String, (u64, u64, bool)>,
}

impl Tally {
    /// Takes in one progress message; whether the progress changed.
    pub(super) fn take(&mut self, message: &Value) -> bool {
        let (Some(status), Some(id)) = (
            message.get("status").and_then(Value::as_str),
            message.get("id").and_then(Value::as_str),
        ) else {
            return false;
        };
        let detail = |key: &str| {
            message
                .get("progressDetail")
                .and_then(|d| d.get(key))
                .and_then(Value::as_u64)
        };
        let layer_status = matches!(
            status,
            "Pulling fs layer"
                | "Waiting"
                | "Downloading"
                | "Verifying Checksum"
                | "Download complete"
                | "Pull complete"
                | "Already exists"
        );
        if !layer_status {
            return false;
        }
        if !self.layers.contains_key(id) && self.layers.len() == MAX_PULL_LAYERS {
            return false;
        }
        let new = !self.layers.contains_key(id);
        let layer = self.layers.entry(id.to_string()).or_default();
        let before = *layer;
        match status {
            "Downloading" => {
                if let (Some(current), Some(total)) = (detail("current"), detail("total")) {
                    layer.1 = total;
                    layer.0 = current.min(total);
                }
            }
            "Download complete" | "Pull complete" | "Already exists" => {
                layer.0 = layer.1;
                layer.2 = true;
            }
            _ => {}
        }
        new || *layer != before
    }

    pub(super) fn progress(&self) -> PullProgress {
        let mut progress = PullProgress {
            layers: self.layers.len(),
            ..PullProgress::default()
        };
        for (done, total, complete) in self.layers.values() {
            progress.done += done;
            progress.total += total;
            progress.layers_done += usize::from(*complete);
        }
        progress
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn take(tally: &mut Tally, text: &str) -> bool {
        tally.take(&json::parse(text).unwrap())
    }

    #[test]
    fn layers_are_summed_and_completed() {
        let mut tally = Tally::default();
        assert!(!take(
            &mut tally,
            r#"{"status":"Pulling from library/busybox","id":"1.36"}"#
        ));
        assert!(take(
            &mut tally,
            r#"{"status":"Pulling fs layer","progressDetail":{},"id":"a"}"#
        ));
        take(
            &mut tally,
            r#"{"status":"Pulling fs layer","progressDetail":{},"id":"b"}"#,
        );
        assert!(take(
            &mut tally,
            r#"{"status":"Downloading","progressDetail":{"current":100,"total":1000},"id":"a"}"#
        ));
        take(
            &mut tally,
            r#"{"status":"Downloading","progressDetail":{"current":50,"total":500},"id":"b"}"#,
        );
        assert_eq!(
            tally.progress(),
            PullProgress {
                done: 150,
                total: 1500,
                layers: 2,
                layers_done: 0
            }
        );
        take(
            &mut tally,
            r#"{"status":"Download complete","progressDetail":{},"id":"a"}"#,
        );
        // Extracting is not downloading.
        assert!(!take(
            &mut tally,
            r#"{"status":"Extracting","progressDetail":{"current":1,"total":1000},"id":"a"}"#
        ));
        let progress = tally.progress();
        assert_eq!((progress.done, progress.layers_done), (1050, 1));
        assert!(!take(&mut tally, r#"{"status":"Digest: sha256:00"}"#));
    }

    #[test]
    fn layers_past_the_bound_are_not_followed() {
        let mut tally = Tally::default();
        for i in 0..MAX_PULL_LAYERS + 5 {
            take(
                &mut tally,
                &format!(
                    r#"{{"status":"Downloading","progressDetail":{{"current":1,"total":2}},"id":"l{i}"}}"#
                ),
            );
        }
        assert_eq!(tally.progress().layers, MAX_PULL_LAYERS);
        assert_eq!(tally.progress().total, 2 * MAX_PULL_LAYERS as u64);
    }
}
