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
    let kind = kind_name(&fd.kind());
    if fd.is_map() {
        if let Kind::Message(entry) = fd.kind() {
            return format!(
                "map<{}, {}>.",
                kind_name(&entry.map_entry_key_field().kind()),
                kind_name(&entry.map_entry_value_field().kind())
            );
        }
    }
    if fd.is_list() {
        format!("repeated {kind}.")
    } else {
        format!("{kind}.")
    }
}

/// A proto type's name as a `.proto` file writes it.
pub fn kind_name(kind: &Kind) -> String {
    match kind {
        Kind::Double => "double".into(),
        Kind::Float => "float".into(),
        Kind::Int32 => "int32".into(),
        Kind::Int64 => "int64".into(),
        Kind::Uint32 => "uint32".into(),
        Kind::Uint64 => "uint64".into(),
        Kind::Sint32 => "sint32".into(),
        Kind::Sint64 => "sint64".into(),
        Kind::Fixed32 => "fixed32".into(),
        Kind::Fixed64 => "fixed64".into(),
        Kind::Sfixed32 => "sfixed32".into(),
        Kind::Sfixed64 => "sfixed64".into(),
        Kind::Bool => "bool".into(),
        Kind::String => "string".into(),
        Kind::Bytes => "bytes".into(),
        Kind::Message(md) => md.full_name().to_owned(),
        Kind::Enum(ed) => ed.full_name().to_owned(),
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

/// Whether field paths `a` and `b` are the same field or one contains the other (as the
/// gateway decides which query parameters the path already bound).
fn overlaps(a: &str, b: &str) -> bool {
    let within = |outer: &str, inner: &str| {
        inner.len() > outer.len()
            && inner.starts_with(outer)
            && inner.as_bytes().get(outer.len()) == Some(&b'.')
    };
    a == b || within(a, b) || within(b, a)
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
