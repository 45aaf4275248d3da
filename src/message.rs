//! Protobuf messages to and from bytes, with the code that is the same for
//! every message type compiled once: `Message::write_to_bytes` and
//! `Message::parse_from_bytes` are generic, and each of the agent's many
//! message types had its own copy of them in the static binary. Only the
//! calls into the message's own generated code go through a vtable.

use protobuf::{CodedInputStream, CodedOutputStream, Message};

/// A message as [`encode`] and [`decode`] reach it.
pub trait Wire {
    /// `Message::compute_size`, which also caches the nested sizes that
    /// [`Wire::write`] needs.
    fn size(&self) -> u64;
    /// `Message::write_to_with_cached_sizes`.
    fn write(&self, out: &mut CodedOutputStream) -> protobuf::Result<()>;
    /// `Message::merge_from`.
    fn merge(&mut self, input: &mut CodedInputStream) -> protobuf::Result<()>;
}

impl<M: Message> Wire for M {
    fn size(&self) -> u64 {
        self.compute_size()
    }

    fn write(&self, out: &mut CodedOutputStream) -> protobuf::Result<()> {
        self.write_to_with_cached_sizes(out)
    }

    fn merge(&mut self, input: &mut CodedInputStream) -> protobuf::Result<()> {
        self.merge_from(input)
    }
}

/// `message`'s bytes, as `Message::write_to_bytes` makes them, but for
/// its check that required fields are set: every message of the agent
/// is proto3, which has none.
pub fn encode(message: &dyn Wire) -> protobuf::Result<Vec<u8>> {
    let size = message.size();
    let mut bytes = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
    let mut out = CodedOutputStream::vec(&mut bytes);
    message.write(&mut out)?;
    out.flush()?;
    drop(out);
    Ok(bytes)
}

/// A message of type `M` from `bytes`, as `Message::parse_from_bytes`
/// reads it (but for the required fields' check, as [`encode`]).
pub fn decode<M: Message>(bytes: &[u8]) -> protobuf::Result<M> {
    let mut message = M::new();
    merge_all(&mut message, bytes)?;
    Ok(message)
}

/// Merges all of `bytes` into `message`.
fn merge_all(message: &mut dyn Wire, bytes: &[u8]) -> protobuf::Result<()> {
    let mut input = CodedInputStream::from_bytes(bytes);
    message.merge(&mut input)?;
    input.check_eof()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::csi as pb;

    #[test]
    fn bytes_are_those_of_the_generic_methods_both_ways() {
        let mut req = pb::NodeStageVolumeRequest::new();
        req.volume_id = "v1".into();
        req.staging_target_path = "/staging/v1".into();
        req.publish_context.insert("k".into(), "v".into());
        let mut cap = pb::VolumeCapability::new();
        cap.mut_mount().fs_type = "ext4".into();
        req.volume_capability = Some(cap).into();
        let bytes = encode(&req).unwrap();
        assert_eq!(bytes, req.write_to_bytes().unwrap());
        assert_eq!(decode::<pb::NodeStageVolumeRequest>(&bytes).unwrap(), req);
        // A truncated message is refused, as parse_from_bytes refuses it.
        let cut = &bytes[..bytes.len() - 1];
        assert!(pb::NodeStageVolumeRequest::parse_from_bytes(cut).is_err());
        assert!(decode::<pb::NodeStageVolumeRequest>(cut).is_err());
        assert_eq!(
            encode(&pb::NodeStageVolumeResponse::new()).unwrap(),
            Vec::<u8>::new()
        );
    }
}
