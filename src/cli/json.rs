//! The values of `-json` output, written by [`crate::json`].
//!
//! Two kinds of answer reach it. `csi-agent csi` builds JSON values from
//! our own types, so that redaction applies to JSON exactly as to text: a
//! value only reaches the output if the command put it there. The agent's
//! control API answers with protobuf messages that the agent built with
//! secrets already removed; those are printed through protobuf reflection
//! ([`from_message`]), so their `-json` form is derived from the
//! protobuf types rather than written by hand a second time.
//!
//! The output is compact (`Display`) or indented (`Value::pretty`); keys
//! keep the order they were given in.

use std::collections::BTreeMap;

use protobuf::reflect::{
    FieldDescriptor, ReflectFieldRef, ReflectMapRef, ReflectValueRef, RuntimeFieldType, RuntimeType,
};
use protobuf::MessageDyn;

use crate::encode::{base64, Alphabet};
use crate::json::Value as Json;
use crate::order;

/// A protobuf message as an object with one key per field, in
/// declaration order, named as in the `.proto` file (snake_case).
///
/// - Scalars without presence (plain proto3 fields) are always present,
///   defaults included, so every answer of a type has the same keys.
/// - An unset message field, or an unset proto3 `optional` scalar, is
///   `null`.
/// - Members of a oneof are present only when set: at most one of them
///   appears, and which one says which case the oneof holds.
/// - Enums are the value's name, or its number if the name is unknown
///   (a newer peer). 64-bit integers are numbers, not strings.
/// - Finite floats are numbers; NaN and the infinities, which JSON cannot
///   express, are the strings `"NaN"`, `"Infinity"` and `"-Infinity"` (as
///   protobuf's JSON mapping writes them).
/// - `bytes` are standard base64 with padding.
/// - Repeated fields are arrays; maps are objects sorted by key.
pub fn from_message(msg: &dyn MessageDyn) -> Json {
    let fields = msg
        .descriptor_dyn()
        .fields()
        .filter_map(|field| {
            let value = field_value(&field, msg)?;
            Some((field.name().to_owned(), value))
        })
        .collect();
    Json::Object(fields)
}

/// A map of strings as an object, its keys in order.
pub fn string_map(map: &BTreeMap<String, String>) -> Json {
    Json::object(map.iter().map(|(k, v)| (k.as_str(), Json::from(v))))
}

/// One field of `msg`, or `None` when it is an unset oneof member.
fn field_value(field: &FieldDescriptor, msg: &dyn MessageDyn) -> Option<Json> {
    match field.get_reflect(msg) {
        ReflectFieldRef::Optional(optional) => match optional.value() {
            Some(value) => Some(value_json(value)),
            None if field.containing_oneof().is_some() => None,
            None if has_presence(field) => Some(Json::Null),
            // Plain proto3 scalars read as unset when they hold the default.
            None => Some(value_json(field.get_singular_field_or_default(msg))),
        },
        ReflectFieldRef::Repeated(items) => {
            Some(Json::Array(items.into_iter().map(value_json).collect()))
        }
        ReflectFieldRef::Map(map) => Some(map_json(&map)),
    }
}

/// Whether an unset singular field is distinguishable from its default.
fn has_presence(field: &FieldDescriptor) -> bool {
    field.proto().proto3_optional()
        || matches!(
            field.runtime_field_type(),
            RuntimeFieldType::Singular(RuntimeType::Message(_))
        )
}

fn value_json(value: ReflectValueRef<'_>) -> Json {
    match value {
        ReflectValueRef::U32(n) => Json::from(n),
        ReflectValueRef::U64(n) => Json::from(n),
        ReflectValueRef::I32(n) => Json::from(i64::from(n)),
        ReflectValueRef::I64(n) => Json::from(n),
        ReflectValueRef::F32(x) => float_json(f32_to_f64(x)),
        ReflectValueRef::F64(x) => float_json(x),
        ReflectValueRef::Bool(b) => Json::Bool(b),
        ReflectValueRef::String(s) => Json::from(s),
        ReflectValueRef::Bytes(bytes) => Json::String(base64(bytes, Alphabet::Standard)),
        ReflectValueRef::Enum(descriptor, number) => match descriptor.value_by_number(number) {
            Some(value) => Json::from(value.name()),
            None => Json::from(i64::from(number)),
        },
        ReflectValueRef::Message(message) => from_message(&*message),
    }
}

/// Widens an `f32` through its shortest decimal form, so that `0.1f32`
/// prints as `0.1` rather than `0.10000000149011612`.
fn f32_to_f64(x: f32) -> f64 {
    if x.is_finite() {
        format!("{x:?}").parse().unwrap_or(f64::from(x))
    } else {
        f64::from(x)
    }
}

/// A map key, ordered by its typed value: integer keys sort numerically.
#[derive(PartialEq, Eq, PartialOrd, Ord)]
enum MapKey {
    Bool(bool),
    Int(i128),
    Str(String),
}

impl MapKey {
    fn new(key: ReflectValueRef<'_>) -> MapKey {
        match key {
            ReflectValueRef::Bool(b) => MapKey::Bool(b),
            ReflectValueRef::I32(n) => MapKey::Int(n.into()),
            ReflectValueRef::I64(n) => MapKey::Int(n.into()),
            ReflectValueRef::U32(n) => MapKey::Int(n.into()),
            ReflectValueRef::U64(n) => MapKey::Int(n.into()),
            ReflectValueRef::String(s) => MapKey::Str(s.to_owned()),
            // protoc accepts only integral, bool and string map keys.
            other => MapKey::Str(format!("{other:?}")),
        }
    }

    fn into_string(self) -> String {
        match self {
            MapKey::Bool(b) => b.to_string(),
            MapKey::Int(n) => n.to_string(),
            MapKey::Str(s) => s,
        }
    }
}

fn map_json(map: &ReflectMapRef<'_>) -> Json {
    let mut entries: Vec<(MapKey, Json)> = map
        .into_iter()
        .map(|(key, value)| (MapKey::new(key), value_json(value)))
        .collect();
    order::sort_by(&mut entries, |a, b| a.0.cmp(&b.0));
    Json::Object(
        entries
            .into_iter()
            .map(|(key, value)| (key.into_string(), value))
            .collect(),
    )
}

/// A float as a JSON number in Rust's shortest round-trip form (`Debug`,
/// which unlike `Display` switches to an exponent, `1e300`, `1e-7`, for
/// large and small values), or the name of a value JSON has no number for.
fn float_json(x: f64) -> Json {
    if x.is_nan() {
        Json::from("NaN")
    } else if x.is_infinite() {
        Json::from(if x > 0.0 { "Infinity" } else { "-Infinity" })
    } else {
        Json::Number(format!("{x:?}"))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use protobuf::well_known_types::wrappers::{BytesValue, DoubleValue, FloatValue, UInt64Value};
    use protobuf::{EnumOrUnknown, MessageField};

    use super::*;
    use crate::csi::proto::csi as pb;
    use pb::volume_capability::{access_mode::Mode, AccessMode, MountVolume};

    fn compact(msg: &dyn MessageDyn) -> String {
        from_message(msg).to_string()
    }

    fn mount_capability(mode: Mode) -> pb::VolumeCapability {
        let mut cap = pb::VolumeCapability::new();
        let mut mount = MountVolume::new();
        mount.fs_type = "ext4".into();
        mount.mount_flags = vec!["noatime".into(), "ro".into()];
        cap.set_mount(mount);
        let mut access = AccessMode::new();
        access.mode = EnumOrUnknown::new(mode);
        cap.access_mode = MessageField::some(access);
        cap
    }

    #[test]
    fn message_scalars_are_present_with_defaults_and_unset_messages_are_null() {
        assert_eq!(
            compact(&pb::NodeGetInfoResponse::new()),
            r#"{"node_id":"","max_volumes_per_node":0,"accessible_topology":null}"#
        );
    }

    #[test]
    fn message_set_nested_message_is_an_object_with_its_map_sorted() {
        let mut topology = pb::Topology::new();
        topology.segments = HashMap::from([
            ("zone".to_owned(), "b".to_owned()),
            ("rack".to_owned(), "a".to_owned()),
            ("region".to_owned(), "c".to_owned()),
        ]);
        let mut info = pb::NodeGetInfoResponse::new();
        info.node_id = "n1".into();
        info.max_volumes_per_node = 16;
        info.accessible_topology = MessageField::some(topology);
        assert_eq!(
            compact(&info),
            r#"{"node_id":"n1","max_volumes_per_node":16,"accessible_topology":{"segments":{"rack":"a","region":"c","zone":"b"}}}"#
        );
    }

    #[test]
    fn message_set_oneof_member_appears_and_the_others_are_omitted() {
        assert_eq!(
            compact(&mount_capability(Mode::SINGLE_NODE_WRITER)),
            r#"{"mount":{"fs_type":"ext4","mount_flags":["noatime","ro"],"volume_mount_group":""},"access_mode":{"mode":"SINGLE_NODE_WRITER"}}"#
        );
        let mut cap = pb::VolumeCapability::new();
        cap.set_block(pb::volume_capability::BlockVolume::new());
        assert_eq!(compact(&cap), r#"{"block":{},"access_mode":null}"#);
    }

    #[test]
    fn message_unset_oneof_has_no_member_keys() {
        assert_eq!(
            compact(&pb::VolumeCapability::new()),
            r#"{"access_mode":null}"#
        );
        assert_eq!(compact(&pb::PluginCapability::new()), "{}");
    }

    #[test]
    fn message_enums_are_names_and_unknown_numbers_are_ints() {
        let mut service = pb::plugin_capability::Service::new();
        service.type_ =
            EnumOrUnknown::new(pb::plugin_capability::service::Type::CONTROLLER_SERVICE);
        let mut cap = pb::PluginCapability::new();
        cap.set_service(service);
        assert_eq!(
            compact(&cap),
            r#"{"service":{"type":"CONTROLLER_SERVICE"}}"#
        );

        // The default value is named too: scalars are never omitted.
        let mut access = AccessMode::new();
        assert_eq!(compact(&access), r#"{"mode":"UNKNOWN"}"#);
        access.mode = EnumOrUnknown::from_i32(99);
        assert_eq!(compact(&access), r#"{"mode":99}"#);
    }

    #[test]
    fn message_repeated_and_maps_keep_element_order_and_sort_keys() {
        let mut request = pb::CreateVolumeRequest::new();
        request.name = "pvc-1".into();
        request.volume_capabilities = vec![
            mount_capability(Mode::MULTI_NODE_READER_ONLY),
            pb::VolumeCapability::new(),
        ];
        request.parameters = HashMap::from([
            ("b".to_owned(), "2".to_owned()),
            ("a".to_owned(), "1".to_owned()),
            ("c".to_owned(), "3".to_owned()),
        ]);
        assert_eq!(
            compact(&request),
            concat!(
                r#"{"name":"pvc-1","capacity_range":null,"volume_capabilities":["#,
                r#"{"mount":{"fs_type":"ext4","mount_flags":["noatime","ro"],"volume_mount_group":""},"#,
                r#""access_mode":{"mode":"MULTI_NODE_READER_ONLY"}},{"access_mode":null}],"#,
                r#""parameters":{"a":"1","b":"2","c":"3"},"secrets":{},"#,
                r#""volume_content_source":null,"accessibility_requirements":null,"#,
                r#""mutable_parameters":{}}"#
            )
        );
    }

    #[test]
    fn message_strings_are_escaped() {
        let mut info = pb::NodeGetInfoResponse::new();
        info.node_id = "a\"b\\c\n\t\u{1f}é".into();
        assert_eq!(
            compact(&info),
            r#"{"node_id":"a\"b\\c\n\t\u001fé","max_volumes_per_node":0,"accessible_topology":null}"#
        );
    }

    #[test]
    fn message_bytes_are_padded_standard_base64() {
        // The padding and the alphabet's last two digits; the encoder's own
        // tests have the rest.
        let cases: [(&[u8], &str); 2] = [(b"f", "Zg=="), (&[0xfb, 0xff, 0xbf], "+/+/")];
        for (bytes, expected) in cases {
            let mut msg = BytesValue::new();
            msg.value = bytes.to_vec();
            assert_eq!(compact(&msg), format!(r#"{{"value":"{expected}"}}"#));
        }
    }

    #[test]
    fn message_floats_are_json_numbers_or_named_strings() {
        let cases = [
            (0.0, "0.0"),
            (0.1, "0.1"),
            (-2.5, "-2.5"),
            (1e300, "1e300"),
            (1e-7, "1e-7"),
            (f64::NAN, r#""NaN""#),
            (f64::INFINITY, r#""Infinity""#),
            (f64::NEG_INFINITY, r#""-Infinity""#),
        ];
        for (value, expected) in cases {
            let mut msg = DoubleValue::new();
            msg.value = value;
            assert_eq!(compact(&msg), format!(r#"{{"value":{expected}}}"#));
        }

        let mut msg = FloatValue::new();
        msg.value = 0.1;
        assert_eq!(compact(&msg), r#"{"value":0.1}"#);
        msg.value = f32::NEG_INFINITY;
        assert_eq!(compact(&msg), r#"{"value":"-Infinity"}"#);
    }

    #[test]
    fn message_u64_above_i64_max_stays_exact() {
        let mut msg = UInt64Value::new();
        msg.value = 7;
        assert_eq!(
            from_message(&msg),
            Json::object([("value", Json::from(7i64))])
        );
        msg.value = u64::MAX;
        assert_eq!(
            from_message(&msg),
            Json::object([("value", Json::from(u64::MAX))])
        );
        assert_eq!(compact(&msg), r#"{"value":18446744073709551615}"#);
    }

    #[test]
    fn pretty_indents_by_two_spaces_without_trailing_newline() {
        let mut info = pb::NodeGetInfoResponse::new();
        info.node_id = "n1".into();
        let mut topology = pb::Topology::new();
        topology.segments = HashMap::from([
            ("zone".to_owned(), "b".to_owned()),
            ("rack".to_owned(), "a".to_owned()),
        ]);
        info.accessible_topology = MessageField::some(topology);
        assert_eq!(
            from_message(&info).pretty(),
            concat!(
                "{\n",
                "  \"node_id\": \"n1\",\n",
                "  \"max_volumes_per_node\": 0,\n",
                "  \"accessible_topology\": {\n",
                "    \"segments\": {\n",
                "      \"rack\": \"a\",\n",
                "      \"zone\": \"b\"\n",
                "    }\n",
                "  }\n",
                "}"
            )
        );
    }
}
