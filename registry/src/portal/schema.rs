//! Protobuf message types as JSON Schema (2020-12, the dialect of OpenAPI 3.1), following
//! exactly the proto3 JSON mapping the gateway speaks (`portico-grpc-dynamic`'s
//! `transcode.rs`, prost-reflect's serde support; docs/PROTOCOL.md for merchants):
//!
//! | proto | JSON |
//! |---|---|
//! | `int32`, `sint32`, `sfixed32`, `uint32`, `fixed32` | a number, with its bounds |
//! | `int64`, `sint64`, `sfixed64`, `uint64`, `fixed64` | a decimal string (requests may also send a number) |
//! | `float`, `double` | a number, or `"NaN"`, `"Infinity"`, `"-Infinity"` |
//! | `bool`, `string` | as themselves |
//! | `bytes` | standard base64 (requests may also use the URL-safe alphabet) |
//! | an enum | the value's name (requests may also send its number) |
//! | a message | an object keyed by lowerCamelCase JSON names (requests may use proto names too; unknown fields are ignored) |
//! | `repeated` | an array; `map<K, V>`: an object, keys as strings |
//! | `oneof` | at most one of its fields |
//! | well-known types | Timestamp: RFC 3339 string; Duration: `"1.5s"`; FieldMask: `"a,b.c"`; wrappers: the wrapped value; Struct: an object; Value: any JSON; ListValue: an array; Any: an object with `@type`; Empty: `{}` |
//!
//! Answers leave fields with default values out, so no field of a message is `required`.
//! Each message and enum becomes one component schema named by its full name
//! (`#/components/schemas/demo.order.v1.Order`), so recursive types are plain `$ref`s.
//!
//! [`query_parameters`] lists the fields a request may set from its query string, as the
//! gateway accepts them (`transcode.rs`, step 3).

use portico_control::fieldpath;
use portico_grpc_dynamic::transcode::{overlaps, proto_type_name};
use prost_reflect::{FieldDescriptor, Kind, MessageDescriptor};
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;

/// Where component schemas live in the document.
pub const COMPONENTS: &str = "#/components/schemas/";

/// The component schemas of every message and enum reached so far, by full name.
#[derive(Debug, Default)]
pub struct Schemas {
    components: BTreeMap<String, Value>,
}

impl Schemas {
    /// The collected component schemas (full name → schema).
    pub fn into_components(self) -> BTreeMap<String, Value> {
        self.components
    }

    /// A `$ref` to the schema of `md`, collected (with everything it reaches) first.
    pub fn message(&mut self, md: &MessageDescriptor) -> Value {
        let name = md.full_name().to_owned();
        if !self.components.contains_key(&name) {
            // A placeholder first: a recursive type then finds itself and stops.
            self.components.insert(name.clone(), Value::Null);
            let schema = self.message_schema(md);
            self.components.insert(name.clone(), schema);
        }
        json!({ "$ref": format!("{COMPONENTS}{name}") })
    }

    /// The schema of the JSON value of field `fd` (repeated and map fields included).
    pub fn field(&mut self, fd: &FieldDescriptor) -> Value {
        if fd.is_map() {
            if let Kind::Message(entry) = fd.kind() {
                let key = entry.map_entry_key_field().kind();
                let value = self.kind(&entry.map_entry_value_field().kind());
                let mut schema = json!({"type": "object", "additionalProperties": value});
                if let Some(names) = map_key_names(&key) {
                    schema["propertyNames"] = names;
                }
                return schema;
            }
        }
        let one = self.kind(&fd.kind());
        if fd.is_list() {
            json!({"type": "array", "items": one})
        } else {
            one
        }
    }

    /// The schema of one value of `kind`.
    pub fn kind(&mut self, kind: &Kind) -> Value {
        match kind {
            Kind::Message(md) => match well_known(md) {
                Some(schema) => {
                    let name = md.full_name().to_owned();
                    self.components.entry(name.clone()).or_insert(schema);
                    json!({ "$ref": format!("{COMPONENTS}{name}") })
                }
                None => self.message(md),
            },
            Kind::Enum(ed) => {
                if ed.full_name() == "google.protobuf.NullValue" {
                    return json!({"type": "null"});
                }
                let name = ed.full_name().to_owned();
                self.components.entry(name.clone()).or_insert_with(|| {
                    let names: Vec<String> = ed.values().map(|v| v.name().to_owned()).collect();
                    json!({
                        "title": name,
                        "type": "string",
                        "enum": names,
                        "description": format!(
                            "Enum {name}, by value name (a request may also give the number)."
                        ),
                    })
                });
                json!({ "$ref": format!("{COMPONENTS}{name}") })
            }
            scalar => scalar_schema(scalar),
        }
    }

    fn message_schema(&mut self, md: &MessageDescriptor) -> Value {
        let mut properties = Map::new();
        for fd in md.fields() {
            let mut schema = self.field(&fd);
            let what = type_words(&fd);
            let description = if fd.json_name() == fd.name() {
                what
            } else {
                format!("{what} Proto field `{}`.", fd.name())
            };
            if let Some(obj) = schema.as_object_mut() {
                obj.insert("description".into(), Value::String(description));
            }
            properties.insert(fd.json_name().to_owned(), schema);
        }
        let mut schema = json!({
            "title": md.full_name(),
            "type": "object",
            "description": format!(
                "Message {} in proto3 JSON: fields by their lowerCamelCase JSON names (a request \
                 may use the proto names too; unknown fields are ignored); answers leave out \
                 fields that hold their default value.",
                md.full_name()
            ),
            "properties": properties,
        });
        // Real oneofs (not the synthetic ones of proto3 `optional`): at most one member set.
        let mut exclusive = Vec::new();
        let mut oneofs = Vec::new();
        for oneof in md.oneofs().filter(|o| !o.is_synthetic()) {
            let names: Vec<String> = oneof.fields().map(|f| f.json_name().to_owned()).collect();
            for (i, a) in names.iter().enumerate() {
                for b in &names[i + 1..] {
                    exclusive.push(json!({"required": [a, b]}));
                }
            }
            oneofs.push(json!({"name": oneof.name(), "fields": names}));
        }
        if !oneofs.is_empty() {
            schema["x-oneofs"] = Value::Array(oneofs);
        }
        if !exclusive.is_empty() {
            schema["not"] = json!({ "anyOf": exclusive });
        }
        schema
    }
}

/// `propertyNames` of a map whose keys are not strings.
fn map_key_names(key: &Kind) -> Option<Value> {
    match key {
        Kind::Bool => Some(json!({"enum": ["true", "false"]})),
        Kind::Int32
        | Kind::Sint32
        | Kind::Sfixed32
        | Kind::Int64
        | Kind::Sint64
        | Kind::Sfixed64 => Some(json!({"pattern": "^-?[0-9]+$"})),
        Kind::Uint32 | Kind::Fixed32 | Kind::Uint64 | Kind::Fixed64 => {
            Some(json!({"pattern": "^[0-9]+$"}))
        }
        _ => None,
    }
}

/// The proto type of a field in words, for its description.
fn type_words(fd: &FieldDescriptor) -> String {
    let kind = proto_type_name(&fd.kind());
    if fd.is_map() {
        if let Kind::Message(entry) = fd.kind() {
            return format!(
                "map<{}, {}>.",
                proto_type_name(&entry.map_entry_key_field().kind()),
                proto_type_name(&entry.map_entry_value_field().kind())
            );
        }
    }
    if fd.is_list() {
        format!("repeated {kind}.")
    } else {
        format!("{kind}.")
    }
}

const INT64_PATTERN: &str = "^-?[0-9]+$";
const UINT64_PATTERN: &str = "^[0-9]+$";
/// A proto3 JSON Duration: seconds with up to nine fractional digits and `s`.
pub const DURATION_PATTERN: &str = "^-?[0-9]+(\\.[0-9]{1,9})?s$";

/// The JSON schema of a scalar kind (not a message or enum).
fn scalar_schema(kind: &Kind) -> Value {
    match kind {
        Kind::Double | Kind::Float => json!({
            "anyOf": [
                {"type": "number"},
                {"type": "string", "enum": ["NaN", "Infinity", "-Infinity"]}
            ],
            "format": if matches!(kind, Kind::Float) { "float" } else { "double" },
        }),
        Kind::Int32 | Kind::Sint32 | Kind::Sfixed32 => json!({
            "type": "integer", "format": "int32",
            "minimum": i32::MIN, "maximum": i32::MAX,
        }),
        Kind::Uint32 | Kind::Fixed32 => json!({
            "type": "integer", "format": "uint32", "minimum": 0, "maximum": u32::MAX,
        }),
        Kind::Int64 | Kind::Sint64 | Kind::Sfixed64 => json!({
            "type": "string", "format": "int64", "pattern": INT64_PATTERN,
        }),
        Kind::Uint64 | Kind::Fixed64 => json!({
            "type": "string", "format": "uint64", "pattern": UINT64_PATTERN,
        }),
        Kind::Bool => json!({"type": "boolean"}),
        Kind::String => json!({"type": "string"}),
        Kind::Bytes => json!({
            "type": "string", "format": "byte", "contentEncoding": "base64",
        }),
        Kind::Message(_) | Kind::Enum(_) => json!({}),
    }
}

/// The schema of a well-known `google.protobuf` type in its special JSON form; `None` for
/// an ordinary message.
fn well_known(md: &MessageDescriptor) -> Option<Value> {
    let name = md.full_name();
    let described = |mut schema: Value, text: &str| {
        schema["title"] = json!(name);
        schema["description"] = json!(text);
        schema
    };
    Some(match name {
        "google.protobuf.Timestamp" => described(
            json!({"type": "string", "format": "date-time"}),
            "An RFC 3339 time in UTC, e.g. \"2026-01-02T03:04:05Z\" (fractional seconds optional).",
        ),
        "google.protobuf.Duration" => described(
            json!({"type": "string", "pattern": DURATION_PATTERN}),
            "Seconds with up to nine fractional digits and the suffix s, e.g. \"1.5s\".",
        ),
        "google.protobuf.FieldMask" => described(
            json!({"type": "string"}),
            "Field paths in lowerCamelCase, separated by commas, e.g. \"item,shop.name\".",
        ),
        "google.protobuf.Struct" => described(json!({"type": "object"}), "Any JSON object."),
        "google.protobuf.Value" => described(json!({}), "Any JSON value."),
        "google.protobuf.ListValue" => described(json!({"type": "array"}), "Any JSON array."),
        "google.protobuf.Empty" => described(json!({"type": "object"}), "An empty object, {}."),
        "google.protobuf.Any" => described(
            json!({
                "type": "object",
                "required": ["@type"],
                "properties": {"@type": {"type": "string"}},
            }),
            "A message of any type: \"@type\" (type.googleapis.com/<full name>) and its fields \
             (or \"value\" for a well-known type).",
        ),
        "google.protobuf.DoubleValue" | "google.protobuf.FloatValue" => {
            described(scalar_schema(&Kind::Double), "A wrapped number.")
        }
        "google.protobuf.Int64Value" => described(
            scalar_schema(&Kind::Int64),
            "A wrapped int64, as a decimal string.",
        ),
        "google.protobuf.UInt64Value" => described(
            scalar_schema(&Kind::Uint64),
            "A wrapped uint64, as a decimal string.",
        ),
        "google.protobuf.Int32Value" => described(scalar_schema(&Kind::Int32), "A wrapped int32."),
        "google.protobuf.UInt32Value" => {
            described(scalar_schema(&Kind::Uint32), "A wrapped uint32.")
        }
        "google.protobuf.BoolValue" => described(scalar_schema(&Kind::Bool), "A wrapped bool."),
        "google.protobuf.StringValue" => {
            described(scalar_schema(&Kind::String), "A wrapped string.")
        }
        "google.protobuf.BytesValue" => {
            described(scalar_schema(&Kind::Bytes), "Wrapped bytes, base64.")
        }
        _ => return None,
    })
}

/// One query parameter a request may send.
#[derive(Debug, Clone, PartialEq)]
pub struct QueryParam {
    /// The dotted path by JSON names (`filter.minTotalCents`); proto names work too.
    pub name: String,
    /// The proto path (`filter.min_total_cents`).
    pub proto_path: String,
    /// The schema of the parameter's value as text (an array for a repeated field, an
    /// object for a map, sent as `name[key]=value`).
    pub schema: Value,
    /// `form` (repeated by repetition) or `deepObject` (a map).
    pub style: &'static str,
    /// What the field is, for the description.
    pub description: String,
}

/// The deepest nesting of message fields walked for query parameters.
const MAX_QUERY_DEPTH: usize = 6;

/// The query parameters of a binding of `input`: every field reachable through singular,
/// non-well-known message fields, except those bound by the path (`bound`: proto paths of
/// the template variables) or under the body field (`body_field`: its proto name). Fields
/// the gateway cannot take from text (messages, repeated messages, Struct, Value, ListValue,
/// Any, Empty) are left out. A binding whose body is `*` takes no query parameters: call
/// with `body_star` and get none.
pub fn query_parameters(
    input: &MessageDescriptor,
    bound: &[String],
    body_field: Option<&str>,
    body_star: bool,
) -> Vec<QueryParam> {
    let mut out = Vec::new();
    if !body_star {
        let mut stack = vec![input.full_name().to_owned()];
        walk_query(input, "", "", bound, body_field, &mut stack, &mut out);
    }
    out
}

fn walk_query(
    msg: &MessageDescriptor,
    json_prefix: &str,
    proto_prefix: &str,
    bound: &[String],
    body_field: Option<&str>,
    stack: &mut Vec<String>,
    out: &mut Vec<QueryParam>,
) {
    for fd in msg.fields() {
        let join = |prefix: &str, name: &str| {
            if prefix.is_empty() {
                name.to_owned()
            } else {
                format!("{prefix}.{name}")
            }
        };
        let name = join(json_prefix, fd.json_name());
        let proto_path = join(proto_prefix, fd.name());
        if proto_prefix.is_empty() && body_field == Some(fd.name()) {
            continue;
        }
        if let Kind::Message(md) = fd.kind() {
            if !fd.is_list() && !fd.is_map() && !fieldpath::is_well_known(&md) {
                // A message is walked into (a parent of a bound field included: its other
                // fields are free); its fields are the parameters.
                let full = md.full_name().to_owned();
                if stack.len() < MAX_QUERY_DEPTH && !stack.contains(&full) {
                    stack.push(full);
                    walk_query(&md, &name, &proto_path, bound, body_field, stack, out);
                    stack.pop();
                }
                continue;
            }
        }
        if bound.iter().any(|b| overlaps(b, &proto_path)) {
            continue; // Bound by the path.
        }
        let what = type_words(&fd);
        if fd.is_map() {
            let Kind::Message(entry) = fd.kind() else {
                continue;
            };
            let Some(value) = text_schema(&entry.map_entry_value_field().kind()) else {
                continue;
            };
            out.push(QueryParam {
                description: format!("{what} Each entry as `{name}[key]=value`."),
                name,
                proto_path,
                schema: json!({"type": "object", "additionalProperties": value}),
                style: "deepObject",
            });
            continue;
        }
        if fd.is_list() {
            let Some(item) = text_schema(&fd.kind()) else {
                continue;
            };
            out.push(QueryParam {
                description: format!("{what} Repeat the parameter for each value."),
                name,
                proto_path,
                schema: json!({"type": "array", "items": item}),
                style: "form",
            });
            continue;
        }
        let Some(schema) = text_schema(&fd.kind()) else {
            continue;
        };
        out.push(QueryParam {
            description: what,
            name,
            proto_path,
            schema,
            style: "form",
        });
    }
}

/// The schema of one value of `kind` given as text (a query parameter or path variable),
/// as the gateway parses it; `None` when it cannot be given as text.
pub fn text_schema(kind: &Kind) -> Option<Value> {
    Some(match kind {
        Kind::Int32 | Kind::Sint32 | Kind::Sfixed32 => json!({
            "type": "integer", "format": "int32", "minimum": i32::MIN, "maximum": i32::MAX,
        }),
        Kind::Uint32 | Kind::Fixed32 => json!({
            "type": "integer", "format": "uint32", "minimum": 0, "maximum": u32::MAX,
        }),
        Kind::Int64 | Kind::Sint64 | Kind::Sfixed64 => {
            json!({"type": "integer", "format": "int64"})
        }
        Kind::Uint64 | Kind::Fixed64 => {
            json!({"type": "integer", "format": "uint64", "minimum": 0})
        }
        Kind::Double | Kind::Float => json!({"type": "number"}),
        Kind::Bool => json!({"type": "boolean"}),
        Kind::String => json!({"type": "string"}),
        Kind::Bytes => json!({"type": "string", "format": "byte", "contentEncoding": "base64"}),
        Kind::Enum(ed) => {
            let names: Vec<String> = ed.values().map(|v| v.name().to_owned()).collect();
            json!({"type": "string", "enum": names})
        }
        Kind::Message(md) => match md.full_name() {
            "google.protobuf.Timestamp" => json!({"type": "string", "format": "date-time"}),
            "google.protobuf.Duration" => json!({"type": "string", "pattern": DURATION_PATTERN}),
            "google.protobuf.FieldMask" => json!({"type": "string"}),
            "google.protobuf.BoolValue" => json!({"type": "boolean"}),
            "google.protobuf.StringValue" => json!({"type": "string"}),
            "google.protobuf.BytesValue" => {
                json!({"type": "string", "format": "byte", "contentEncoding": "base64"})
            }
            "google.protobuf.DoubleValue" | "google.protobuf.FloatValue" => {
                json!({"type": "number"})
            }
            "google.protobuf.Int32Value" => json!({"type": "integer", "format": "int32"}),
            "google.protobuf.UInt32Value" => {
                json!({"type": "integer", "format": "uint32", "minimum": 0})
            }
            "google.protobuf.Int64Value" => json!({"type": "integer", "format": "int64"}),
            "google.protobuf.UInt64Value" => {
                json!({"type": "integer", "format": "uint64", "minimum": 0})
            }
            _ => return None,
        },
    })
}

#[cfg(test)]
mod tests {
    //! The schemas against the gateway's own transcoder: an example made from a message's
    //! schema is accepted by `MethodPlan::request` as the gateway runs it, and what
    //! `MethodPlan::response` writes for a fully populated message validates against it.
    use super::*;
    use crate::portal::example::example;
    use portico_grpc_dynamic::{BindingSpec, MethodPlan};
    use prost_reflect::DescriptorPool;

    const PROTO: &str = r#"
syntax = "proto3";
package t.v1;
import "google/protobuf/any.proto";
import "google/protobuf/duration.proto";
import "google/protobuf/empty.proto";
import "google/protobuf/field_mask.proto";
import "google/protobuf/struct.proto";
import "google/protobuf/timestamp.proto";
import "google/protobuf/wrappers.proto";

enum Color { COLOR_UNSPECIFIED = 0; COLOR_RED = 1; }
message Inner { string name = 1; int64 count = 2; Color color = 3; }
message All {
  int32 i32 = 1; int64 i64 = 2; uint64 u64 = 3; sint64 s64 = 4; fixed64 f64 = 5;
  uint32 u32 = 6; double d = 7; float f = 8; bool b = 9; string s = 10; bytes raw = 11;
  Color color = 12; Inner inner = 13; repeated Inner inners = 14; repeated int64 many = 15;
  map<int32, string> by_number = 16; map<string, Inner> by_name = 17;
  oneof choice { string text = 18; Inner nested = 19; }
  google.protobuf.Timestamp at = 20; google.protobuf.Duration took = 21;
  google.protobuf.FieldMask mask = 22; google.protobuf.Struct meta = 23;
  google.protobuf.Value any_value = 24; google.protobuf.ListValue list = 25;
  google.protobuf.Any anything = 26; google.protobuf.Empty nothing = 27;
  google.protobuf.Int64Value wrapped64 = 28; google.protobuf.UInt32Value wrapped_u32 = 29;
  google.protobuf.BytesValue wrapped_bytes = 30; google.protobuf.DoubleValue wrapped_d = 31;
  All recursive = 32; repeated Color colors = 33; map<uint64, Color> by_big = 34;
}
service S { rpc Call(All) returns (All); }
"#;

    fn pool() -> DescriptorPool {
        let files = BTreeMap::from([("t.proto".to_owned(), PROTO.to_owned())]);
        let bytes = crate::protos::compile_sources(&files).unwrap();
        DescriptorPool::decode(bytes.as_slice()).unwrap()
    }

    fn validator(root: &Value, name: &str) -> jsonschema::Validator {
        let rooted = json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "$ref": format!("{COMPONENTS}{name}"),
            "components": root["components"],
        });
        jsonschema::options()
            .should_validate_formats(true)
            .build(&rooted)
            .unwrap()
    }

    #[test]
    fn schemas_match_the_gateways_proto3_json() {
        let pool = pool();
        let all = pool.get_message_by_name("t.v1.All").unwrap();
        let mut schemas = Schemas::default();
        let top = schemas.message(&all);
        let root = json!({"components": {"schemas": schemas.into_components()}});
        let props = &root["components"]["schemas"]["t.v1.All"]["properties"];
        assert_eq!(props["i64"]["type"], "string");
        assert_eq!(props["u64"]["format"], "uint64");
        assert_eq!(props["raw"]["contentEncoding"], "base64");
        assert_eq!(props["color"]["$ref"], "#/components/schemas/t.v1.Color");
        assert_eq!(
            root["components"]["schemas"]["t.v1.Color"]["enum"],
            json!(["COLOR_UNSPECIFIED", "COLOR_RED"])
        );
        assert_eq!(
            props["at"]["$ref"],
            "#/components/schemas/google.protobuf.Timestamp"
        );
        assert_eq!(
            root["components"]["schemas"]["google.protobuf.Timestamp"]["format"],
            "date-time"
        );
        assert_eq!(props["byNumber"]["type"], "object");
        assert_eq!(props["many"]["items"]["type"], "string");
        assert_eq!(props["recursive"]["$ref"], "#/components/schemas/t.v1.All");

        // An example from the schema is a request the gateway accepts.
        let ex = example(&top, &root, None).unwrap();
        let service = pool.get_service_by_name("t.v1.S").unwrap();
        let method = service.methods().next().unwrap();
        let plan = MethodPlan::new(
            &method,
            &[BindingSpec {
                body: Some("*".into()),
                response_body: None,
            }],
        )
        .unwrap();
        let body = serde_json::to_vec(&ex).unwrap();
        let msg = plan
            .request(Some(0), &[], None, &body)
            .unwrap_or_else(|e| panic!("the gateway refuses the example {ex}: {e}"));

        // A fully populated answer, as the gateway writes it, fits the schema.
        let full = json!({
            "i32": -5, "i64": "-9007199254740993", "u64": "18446744073709551615", "s64": "-1",
            "f64": "7", "u32": 4294967295u32, "d": "NaN", "f": 1.5, "b": true, "s": "x",
            "raw": "AAEC/w==", "color": "COLOR_RED", "inner": {"name": "n", "count": "3", "color": 1},
            "inners": [{"name": "a"}], "many": ["1", "2"], "byNumber": {"7": "seven"},
            "byName": {"k": {"count": "1"}}, "nested": {"name": "one-of"},
            "at": "2026-01-02T03:04:05.123Z", "took": "-1.5s", "mask": "a,inner.name",
            "meta": {"k": [1, "two", null]}, "anyValue": [true], "list": [1, {}],
            "anything": {"@type": "type.googleapis.com/t.v1.Inner", "name": "in-any"},
            "nothing": {}, "wrapped64": "12", "wrappedU32": 3, "wrappedBytes": "AQ==",
            "wrappedD": -0.5, "recursive": {"i32": 1, "recursive": {"s": "deep"}},
            "colors": ["COLOR_RED", "COLOR_UNSPECIFIED"], "byBig": {"18446744073709551615": "COLOR_RED"}
        });
        let parsed = plan
            .request(Some(0), &[], None, &serde_json::to_vec(&full).unwrap())
            .unwrap_or_else(|e| panic!("the gateway refuses {full}: {e}"));
        let written: Value =
            serde_json::from_slice(&plan.response(Some(0), &parsed).unwrap()).unwrap();
        let v = validator(&root, "t.v1.All");
        let errors: Vec<String> = v
            .iter_errors(&written)
            .map(|e| format!("{e} at {}", e.instance_path()))
            .collect();
        assert!(
            errors.is_empty(),
            "{written} does not fit the schema: {errors:?}"
        );
        let written_ex: Value =
            serde_json::from_slice(&plan.response(Some(0), &msg).unwrap()).unwrap();
        assert!(v.is_valid(&written_ex), "{written_ex}");
        // Two members of a oneof, an unknown enum name: refused by the schema. The gateway
        // refuses the first; the second it drops, as it drops unknown fields (proto3 JSON's
        // "ignore unknown"), so the schema names what has an effect.
        let mut two = full.clone();
        two["text"] = json!("also");
        assert!(!v.is_valid(&two), "two oneof members pass the schema");
        assert!(plan
            .request(Some(0), &[], None, &serde_json::to_vec(&two).unwrap())
            .is_err());
        let mut bad_enum = written.clone();
        bad_enum["color"] = json!("COLOR_BLUE");
        assert!(!v.is_valid(&bad_enum));
        let dropped = plan
            .request(Some(0), &[], None, &serde_json::to_vec(&bad_enum).unwrap())
            .unwrap();
        let back: Value =
            serde_json::from_slice(&plan.response(Some(0), &dropped).unwrap()).unwrap();
        assert!(back.get("color").is_none(), "{back}");
    }
}
