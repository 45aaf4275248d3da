//! The values of `-json` output, written by [`json`].
//!
//! Two kinds of answer reach it. `csi-agent csi` builds JSON values from
//! our own types, so that redaction applies to JSON exactly as to text: a
//! value only reaches the output if the command put it there. The agent's
//! control API answers with protobuf messages that the agent built with
//! secrets already removed; those are printed by [`from_message`], through
//! impls of [`ToJson`] that build.rs generates from `proto/agent.proto`
//! (`proto/json_gen.rs`), so their `-json` form is derived from the
//! protobuf types rather than written by hand a second time. (protobuf's
//! own reflection did this before, at the cost of its whole runtime of
//! descriptors: 0.9 MB of the static binary.)
//!
//! The output is compact (`Display`) or indented (`Value::pretty`); keys
//! keep the order they were given in.

use std::collections::BTreeMap;

use encode::{base64, Alphabet};
use json::Value as Json;

/// A message of the control API as JSON; the impls are generated.
pub trait ToJson {
    fn to_json(&self) -> Json;
}

/// The names of an enum of the control API's values; the impls are
/// generated.
pub trait JsonEnum {
    /// The name of the value numbered `number`, if the enum has one.
    fn name(number: i32) -> Option<&'static str>;
}

/// The impls build.rs generates from `proto/agent.proto`; generated code,
/// linted as the generated protobuf modules are (`crate::proto`).
#[allow(clippy::all)]
mod generated {
    use super::{bytes, enumeration, float, map, JsonEnum, MapKey, ToJson};
    use crate::proto::agent;
    use json::Value as Json;

    include!(concat!(env!("OUT_DIR"), "/proto/agent_json.rs"));
}

/// A control API message as an object with one key per field, in
/// declaration order, named as in the `.proto` file (snake_case).
///
/// - Scalars are always present, defaults included (proto3 keeps no
///   presence for them), so every answer of a type has the same keys.
/// - An unset message field is `null`.
/// - Enums are the value's name, or its number if the name is unknown
///   (a newer peer). 64-bit integers are numbers, not strings.
/// - Finite floats are numbers; NaN and the infinities, which JSON cannot
///   express, are the strings `"NaN"`, `"Infinity"` and `"-Infinity"` (as
///   protobuf's JSON mapping writes them).
/// - `bytes` are standard base64 with padding.
/// - Repeated fields are arrays; maps are objects sorted by key.
///
/// `agent.proto` has no oneof, proto3 `optional` or nested type; the
/// generator refuses them, so that their form is decided when one comes.
pub fn from_message(msg: &impl ToJson) -> Json {
    msg.to_json()
}

/// A map of strings as an object, its keys in order.
pub fn string_map(map: &BTreeMap<String, String>) -> Json {
    Json::object(map.iter().map(|(k, v)| (k.as_str(), Json::from(v))))
}

/// An enum field's value: its name, or its number when the enum has no
/// name for it.
fn enumeration<E: JsonEnum>(number: i32) -> Json {
    match E::name(number) {
        Some(name) => Json::from(name),
        None => Json::from(i64::from(number)),
    }
}

fn bytes(bytes: &[u8]) -> Json {
    Json::String(base64(bytes, Alphabet::Standard))
}

/// A float as a JSON number in Rust's shortest round-trip form (`Debug`,
/// which unlike `Display` switches to an exponent, `1e300`, `1e-7`, for
/// large and small values), or the name of a value JSON has no number for.
fn float(x: f64) -> Json {
    if x.is_nan() {
        Json::from("NaN")
    } else if x.is_infinite() {
        Json::from(if x > 0.0 { "Infinity" } else { "-Infinity" })
    } else {
        Json::Number(format!("{x:?}"))
    }
}

/// A map key, ordered by its typed value: integer keys sort numerically.
#[derive(PartialEq, Eq, PartialOrd, Ord)]
enum MapKey {
    Bool(bool),
    Int(i128),
    Str(String),
}

impl From<&String> for MapKey {
    fn from(key: &String) -> MapKey {
        MapKey::Str(key.clone())
    }
}

impl From<&bool> for MapKey {
    fn from(key: &bool) -> MapKey {
        MapKey::Bool(*key)
    }
}

macro_rules! int_map_keys {
    ($($int:ty),*) => {$(
        impl From<&$int> for MapKey {
            fn from(key: &$int) -> MapKey {
                MapKey::Int(i128::from(*key))
            }
        }
    )*};
}
int_map_keys!(i32, i64, u32, u64);

impl MapKey {
    fn into_string(self) -> String {
        match self {
            MapKey::Bool(b) => b.to_string(),
            MapKey::Int(n) => n.to_string(),
            MapKey::Str(s) => s,
        }
    }
}

/// A map's entries as an object sorted by key.
fn map(entries: impl Iterator<Item = (MapKey, Json)>) -> Json {
    let mut entries: Vec<(MapKey, Json)> = entries.collect();
    order::sort_by(&mut entries, |a, b| a.0.cmp(&b.0));
    Json::Object(
        entries
            .into_iter()
            .map(|(key, value)| (key.into_string(), value))
            .collect(),
    )
}

/// build.rs's generator, for the tests of what it refuses.
#[cfg(test)]
#[path = "../../proto/json_gen.rs"]
mod json_gen;

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use protobuf::{EnumOrUnknown, MessageField};

    use super::*;
    use crate::proto::agent;

    fn compact(msg: &impl ToJson) -> String {
        from_message(msg).to_string()
    }

    fn usage() -> agent::TaskUsage {
        let mut usage = agent::TaskUsage::new();
        usage.task = "web".into();
        let mut memory = agent::MemoryUsage::new();
        memory.rss = 4096;
        memory.measured = vec!["RSS".into(), "Usage".into()];
        usage.memory = MessageField::some(memory);
        usage
    }

    #[test]
    fn message_scalars_are_present_with_defaults_and_unset_messages_are_null() {
        assert_eq!(
            compact(&agent::TaskUsage::new()),
            r#"{"task":"","source":"","note":"","memory":null,"cpu":null}"#
        );
        assert_eq!(
            compact(&agent::AllocFsEntry::new()),
            r#"{"name":"","size":0,"mode":0,"modified_unix":0,"is_dir":false,"link_target":""}"#
        );
    }

    #[test]
    fn message_set_nested_message_is_an_object_with_its_repeated_field_in_order() {
        assert_eq!(
            compact(&usage()),
            concat!(
                r#"{"task":"web","source":"","note":"","memory":{"rss":4096,"cache":0,"swap":0,"#,
                r#""usage":0,"max_usage":0,"measured":["RSS","Usage"]},"cpu":null}"#
            )
        );
    }

    #[test]
    fn message_enums_are_names_and_unknown_numbers_are_ints() {
        let mut event = agent::HealthEvent::new();
        event.new_health = EnumOrUnknown::new(agent::Health::HEALTHY);
        let json = from_message(&event);
        // The default value is named too: scalars are never omitted.
        assert_eq!(
            json.get("old_health"),
            Some(&Json::from("HEALTH_UNSPECIFIED"))
        );
        assert_eq!(json.get("new_health"), Some(&Json::from("HEALTHY")));
        event.new_health = EnumOrUnknown::from_i32(99);
        assert_eq!(
            from_message(&event).get("new_health"),
            Some(&Json::from(99i64))
        );
    }

    #[test]
    fn message_repeated_messages_keep_their_order_and_maps_sort_their_keys() {
        let mut fingerprint = agent::Fingerprint::new();
        fingerprint.manifest = HashMap::from([
            ("b".to_owned(), "2".to_owned()),
            ("a".to_owned(), "1".to_owned()),
            ("c".to_owned(), "3".to_owned()),
        ]);
        let json = from_message(&fingerprint);
        assert_eq!(
            json.get("manifest").map(|m| m.to_string()),
            Some(r#"{"a":"1","b":"2","c":"3"}"#.to_owned())
        );
        assert_eq!(
            json.get("topology").map(|m| m.to_string()),
            Some("{}".to_owned())
        );

        let mut response = agent::AllocStatsResponse::new();
        let mut other = usage();
        other.task = "sidecar".into();
        response.tasks = vec![usage(), other];
        let tasks = from_message(&response);
        let names: Vec<String> = match tasks.get("tasks") {
            Some(Json::Array(items)) => items
                .iter()
                .map(|t| t.get("task").unwrap().to_string())
                .collect(),
            other => panic!("tasks: {other:?}"),
        };
        assert_eq!(names, [r#""web""#, r#""sidecar""#]);
    }

    #[test]
    fn map_keys_sort_by_their_typed_value() {
        let json = map([
            (MapKey::from(&10u32), Json::from("ten")),
            (MapKey::from(&9u32), Json::from("nine")),
            (MapKey::from(&-1i64), Json::from("minus one")),
        ]
        .into_iter());
        assert_eq!(
            json.to_string(),
            r#"{"-1":"minus one","9":"nine","10":"ten"}"#
        );
        let json = map([
            (MapKey::from(&true), Json::Null),
            (MapKey::from(&false), Json::Null),
        ]
        .into_iter());
        assert_eq!(json.to_string(), r#"{"false":null,"true":null}"#);
    }

    #[test]
    fn message_strings_are_escaped() {
        let mut entry = agent::AllocFsEntry::new();
        entry.name = "a\"b\\c\n\t\u{1f}é".into();
        assert_eq!(
            from_message(&entry).get("name").map(|n| n.to_string()),
            Some(r#""a\"b\\c\n\t\u001fé""#.to_owned())
        );
    }

    #[test]
    fn message_bytes_are_padded_standard_base64() {
        // The padding and the alphabet's last two digits; the encoder's own
        // tests have the rest.
        let cases: [(&[u8], &str); 2] = [(b"f", "Zg=="), (&[0xfb, 0xff, 0xbf], "+/+/")];
        for (data, expected) in cases {
            let mut msg = agent::AllocFsResponse::new();
            msg.data = data.to_vec();
            assert_eq!(
                compact(&msg),
                format!(r#"{{"entry":null,"entries":[],"data":"{expected}","eof":false}}"#)
            );
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
            let mut cpu = agent::CpuUsage::new();
            cpu.percent = value;
            assert_eq!(
                from_message(&cpu).get("percent").map(|p| p.to_string()),
                Some(expected.to_owned())
            );
        }
    }

    #[test]
    fn message_u64_above_i64_max_stays_exact() {
        let mut entry = agent::AllocFsEntry::new();
        entry.size = u64::MAX;
        assert_eq!(
            from_message(&entry).get("size"),
            Some(&Json::from(u64::MAX))
        );
        assert!(compact(&entry).contains(r#""size":18446744073709551615"#));
    }

    #[test]
    fn pretty_indents_by_two_spaces_without_trailing_newline() {
        let mut usage = agent::TaskUsage::new();
        usage.task = "web".into();
        assert_eq!(
            from_message(&usage).pretty(),
            concat!(
                "{\n",
                "  \"task\": \"web\",\n",
                "  \"source\": \"\",\n",
                "  \"note\": \"\",\n",
                "  \"memory\": null,\n",
                "  \"cpu\": null\n",
                "}"
            )
        );
    }

    /// The generator (build.rs runs it on agent.proto) refuses what it
    /// does not support, naming the message and field.
    mod generator {
        use protobuf::descriptor::field_descriptor_proto::{Label, Type};
        use protobuf::descriptor::{
            DescriptorProto, FieldDescriptorProto, FileDescriptorProto, OneofDescriptorProto,
        };

        use super::super::json_gen;

        fn field(name: &str, type_: Type) -> FieldDescriptorProto {
            let mut field = FieldDescriptorProto::new();
            field.set_name(name.into());
            field.set_number(1);
            field.set_label(Label::LABEL_OPTIONAL);
            field.set_type(type_);
            field
        }

        fn file_with(message: DescriptorProto) -> FileDescriptorProto {
            let mut file = FileDescriptorProto::new();
            file.set_name("agent.proto".into());
            file.set_package("csi_agent.v1".into());
            file.message_type.push(message);
            file
        }

        fn message(name: &str, fields: Vec<FieldDescriptorProto>) -> DescriptorProto {
            let mut message = DescriptorProto::new();
            message.set_name(name.into());
            message.field = fields;
            message
        }

        #[test]
        fn writes_each_field_by_its_rust_name_and_its_proto_name() {
            let code = json_gen::generate(&file_with(message(
                "Task",
                vec![
                    field("type", Type::TYPE_STRING),
                    field("size", Type::TYPE_UINT64),
                ],
            )))
            .unwrap();
            assert!(
                code.contains(r#"("type".to_owned(), Json::from(&self.type_))"#),
                "{code}"
            );
            assert!(
                code.contains(r#"("size".to_owned(), Json::from(*&self.size))"#),
                "{code}"
            );
        }

        #[test]
        fn refuses_a_oneof_an_optional_a_float_and_a_foreign_type() {
            let mut with_oneof = message("Choice", vec![]);
            let mut oneof = OneofDescriptorProto::new();
            oneof.set_name("kind".into());
            with_oneof.oneof_decl.push(oneof);
            assert_eq!(
                json_gen::generate(&file_with(with_oneof)),
                Err("message Choice: oneof kind is not supported".into())
            );

            let mut optional = field("limit", Type::TYPE_UINT64);
            optional.set_proto3_optional(true);
            assert_eq!(
                json_gen::generate(&file_with(message("Task", vec![optional]))),
                Err("message Task, field limit: proto3 optional is not supported".into())
            );

            assert_eq!(
                json_gen::generate(&file_with(message(
                    "Task",
                    vec![field("cpu", Type::TYPE_FLOAT)]
                ))),
                Err("message Task, field cpu: float is not supported (double is)".into())
            );

            let mut foreign = field("at", Type::TYPE_MESSAGE);
            foreign.set_type_name(".google.protobuf.Timestamp".into());
            assert_eq!(
                json_gen::generate(&file_with(message("Task", vec![foreign]))),
                Err("message Task, field at: type .google.protobuf.Timestamp is not a top-level type of this file".into())
            );

            let mut file = file_with(message("Task", vec![]));
            file.dependency
                .push("google/protobuf/timestamp.proto".into());
            assert!(json_gen::generate(&file)
                .unwrap_err()
                .contains("imports google/protobuf/timestamp.proto"));
        }
    }
}
