//! The gateway's proto3 JSON held to protobuf's reference mapping: Python's
//! `google.protobuf.json_format` (protobuf pinned in `ops/lib.sh`), over generated messages
//! of types with every field shape (docs/ARCHITECTURE.md, "The invoke tier").
//!
//! - **Replies**: the JSON the gateway answers for a reply's bytes (the one-pass
//!   [`ReplyWriter`] where it takes the reply on, and the reference path it falls back to,
//!   each checked) equals `json_format.MessageToJson` of the same bytes, with the gateway's
//!   options, which are `MessageToJson`'s defaults: lowerCamelCase (`json_name`) field names,
//!   unpopulated fields left out, enums by name (by number when unnamed), 64-bit integers as
//!   strings, bytes in standard base64. They are compared as JSON values, numbers by value:
//!   the text of a number may legitimately differ (Python writes `1e+20` and `5.0` where
//!   serde_json writes `1e20` and `5.0`, and a `float` field is written as its shortest
//!   float32 text by both), but the value, the sign of a zero included, may not.
//! - **Requests**: the protobuf the gateway sends for a JSON body (the one-pass
//!   [`RequestEncoder`] and the reference path, each checked) decodes in Python to the
//!   message `json_format.Parse` makes of the same JSON (unknown fields ignored, as the
//!   gateway does), compared by their deterministic serializations. The bodies are the
//!   generated messages' JSON, rewritten into the other forms proto3 JSON accepts: original
//!   field names, numbers as strings and 64-bit integers as numbers, integers in exponent
//!   form, `"NaN"`/`"Infinity"`, enums by number, URL-safe and unpadded base64, `null`
//!   fields, Timestamps with an offset and Durations with 9 fractional digits, unknown fields;
//!   and some written by hand. Where Python refuses a body, the gateway must refuse it too.
//!
//! The types are compiled here (protox, no protoc) into a `FileDescriptorSet` that Python
//! loads into its descriptor pool; one Python process per test answers every message over
//! stdin/stdout (`tests/json_reference.py`).
//!
//! The differences that remain (prost-reflect's reader and writer, json_format's own
//! leniency and one crash) are in [`KNOWN_DIFFERENCES`], each with why.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use base64::prelude::{Engine as _, BASE64_STANDARD, BASE64_URL_SAFE_NO_PAD};
use portico_grpc_dynamic::{MethodPlan, ReplyWriter, RequestEncoder};
use prost::Message as _;
use prost_reflect::{
    DescriptorPool, DynamicMessage, FieldDescriptor, Kind, MapKey, MessageDescriptor, Value,
};
use serde_json::{json, Value as Json};
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Whether a reported difference (its one-line description) is a known one.
type IsThisOne = fn(&str) -> bool;

/// The differences from `json_format` that stay, each with why: (why, whether a reported
/// difference is this one). Keep it short and honest.
const KNOWN_DIFFERENCES: &[(&str, IsThisOne)] = &[
    (
        "requests: -0.0 in a field without presence (or a wrapper's value) is not sent: \
         prost-reflect's encoder, the reference path's, compares it equal to the default 0.0 \
         and leaves it out (json_format compares bits); the one-pass encoder does the same, \
         to send what the reference sends",
        |d| d.contains("python -0.0, ours missing") || d.contains("python -0.0, ours 0.0"),
    ),
    (
        "requests: \"nan\" is read as NaN (Rust's float syntax); json_format takes only \"NaN\"",
        |d| d.contains("Couldn't parse float \\\"nan\\\""),
    ),
    (
        "requests: an empty object {} as an Any is refused (prost-reflect wants \"@type\"); \
         json_format reads it as an empty Any",
        |d| d.contains("expected '@type' field"),
    ),
    (
        "requests: json_format takes a string, or a top-level array, where a message is \
         expected, as an empty message; the gateway answers 400",
        |d| d.contains("expected a JSON object") || d.contains("must be a JSON object"),
    ),
    (
        "requests: json_format fails (AttributeError) on null for a repeated \
         google.protobuf.Value field; proto3 JSON's null is the default, an empty list",
        |d| d.contains("no attribute 'null_value'"),
    ),
];

const SEED: u64 = 0x2929_0004_c0ff_ee11;
const REPLIES: usize = 700;
const REQUESTS: usize = 700;

// ---------------------------------------------------------------------------------------
// The types.

/// (proto type, field-name suffix) of every scalar type, and the enum.
const SCALARS: &[(&str, &str)] = &[
    ("double", "double"),
    ("float", "float"),
    ("int32", "int32"),
    ("int64", "int64"),
    ("uint32", "uint32"),
    ("uint64", "uint64"),
    ("sint32", "sint32"),
    ("sint64", "sint64"),
    ("fixed32", "fixed32"),
    ("fixed64", "fixed64"),
    ("sfixed32", "sfixed32"),
    ("sfixed64", "sfixed64"),
    ("bool", "bool"),
    ("string", "string"),
    ("bytes", "bytes"),
    ("Colour", "enum"),
];

/// Every map key type.
const MAP_KEYS: &[&str] = &[
    "int32", "int64", "uint32", "uint64", "sint32", "sint64", "fixed32", "fixed64", "sfixed32",
    "sfixed64", "bool", "string",
];

/// Message-typed map values and repeated elements.
const MESSAGES: &[(&str, &str)] = &[
    ("Scalars", "message"),
    ("google.protobuf.Timestamp", "timestamp"),
    ("google.protobuf.Duration", "duration"),
    ("google.protobuf.FieldMask", "field_mask"),
    ("google.protobuf.Struct", "struct"),
    ("google.protobuf.Value", "value"),
    ("google.protobuf.ListValue", "list_value"),
    ("google.protobuf.Any", "any"),
    ("google.protobuf.Empty", "empty"),
    ("google.protobuf.DoubleValue", "w_double"),
    ("google.protobuf.FloatValue", "w_float"),
    ("google.protobuf.Int64Value", "w_int64"),
    ("google.protobuf.UInt64Value", "w_uint64"),
    ("google.protobuf.Int32Value", "w_int32"),
    ("google.protobuf.UInt32Value", "w_uint32"),
    ("google.protobuf.BoolValue", "w_bool"),
    ("google.protobuf.StringValue", "w_string"),
    ("google.protobuf.BytesValue", "w_bytes"),
];

fn proto_source() -> String {
    let mut s = String::from(
        r#"syntax = "proto3";
package conformance.json;
import "google/protobuf/any.proto";
import "google/protobuf/duration.proto";
import "google/protobuf/empty.proto";
import "google/protobuf/field_mask.proto";
import "google/protobuf/struct.proto";
import "google/protobuf/timestamp.proto";
import "google/protobuf/wrappers.proto";

enum Colour {
  option allow_alias = true;
  COLOUR_UNSPECIFIED = 0;
  RED = 1;
  CRIMSON = 1;
  GREEN = 2;
  BLUE = -3;
}
"#,
    );
    let mut message = |name: &str, fields: Vec<String>| {
        s.push_str(&format!("message {name} {{\n"));
        for f in fields {
            s.push_str(&format!("  {f}\n"));
        }
        s.push_str("}\n");
    };
    let numbered = |n: usize| n + 1;
    message(
        "Scalars",
        SCALARS
            .iter()
            .enumerate()
            .map(|(i, (t, n))| format!("{t} f_{n} = {};", numbered(i)))
            .collect(),
    );
    message(
        "Optionals",
        SCALARS
            .iter()
            .enumerate()
            .map(|(i, (t, n))| format!("optional {t} o_{n} = {};", numbered(i)))
            .collect(),
    );
    let mut repeated: Vec<String> = SCALARS
        .iter()
        .enumerate()
        .map(|(i, (t, n))| format!("repeated {t} r_{n} = {};", numbered(i)))
        .collect();
    repeated.extend([
        "repeated int32 unpacked_int32 = 20 [packed = false];".to_owned(),
        "repeated double unpacked_double = 21 [packed = false];".to_owned(),
        "repeated Colour unpacked_enum = 22 [packed = false];".to_owned(),
        "repeated sint64 unpacked_sint64 = 23 [packed = false];".to_owned(),
    ]);
    repeated.extend(
        MESSAGES
            .iter()
            .enumerate()
            .map(|(i, (t, n))| format!("repeated {t} r_{n} = {};", 30 + i)),
    );
    message("Repeateds", repeated);
    let mut maps: Vec<String> = MAP_KEYS
        .iter()
        .enumerate()
        .map(|(i, k)| format!("map<{k}, string> k_{k} = {};", numbered(i)))
        .collect();
    maps.extend(
        SCALARS
            .iter()
            .enumerate()
            .map(|(i, (t, n))| format!("map<string, {t}> v_{n} = {};", 20 + i)),
    );
    maps.extend(
        MESSAGES
            .iter()
            .enumerate()
            .map(|(i, (t, n))| format!("map<string, {t}> v_{n} = {};", 40 + i)),
    );
    maps.push("map<int64, Scalars> by_long = 70;".to_owned());
    maps.push("map<bool, google.protobuf.Value> by_flag = 71;".to_owned());
    message("Maps", maps);
    let mut oneof: Vec<String> = vec!["oneof choice {".to_owned()];
    oneof.extend(
        SCALARS
            .iter()
            .enumerate()
            .map(|(i, (t, n))| format!("  {t} c_{n} = {};", numbered(i))),
    );
    oneof.extend(
        MESSAGES
            .iter()
            .enumerate()
            .map(|(i, (t, n))| format!("  {t} c_{n} = {};", 20 + i)),
    );
    oneof.push("  google.protobuf.NullValue c_null = 50;".to_owned());
    oneof.push("}".to_owned());
    oneof.push("oneof other { int32 d_int32 = 60; Scalars d_message = 61; }".to_owned());
    message("Oneofs", oneof);
    let mut wkts: Vec<String> = MESSAGES
        .iter()
        .enumerate()
        .skip(1)
        .map(|(i, (t, n))| format!("{t} {n} = {};", numbered(i)))
        .collect();
    wkts.push("google.protobuf.NullValue null_value = 30;".to_owned());
    wkts.push("optional google.protobuf.NullValue maybe_null = 31;".to_owned());
    message("Wkts", wkts);
    message(
        "Names",
        [
            "int32 a_1b = 1;",
            "int32 _leading = 2;",
            "int32 trailing_ = 3;",
            "int32 UpperCase = 4;",
            "int32 with_json_name = 5 [json_name = \"renamed\"];",
            "int32 two__underscores = 6;",
            "int32 x = 7;",
            "string the_URL = 8;",
        ]
        .map(str::to_owned)
        .to_vec(),
    );
    message(
        "Root",
        [
            "Scalars scalars = 1;",
            "Optionals optionals = 2;",
            "Repeateds repeateds = 3;",
            "Maps maps = 4;",
            "Oneofs oneofs = 5;",
            "Wkts wkts = 6;",
            "Names names = 7;",
            "Root next = 8;",
            "repeated Root children = 9;",
            "int32 highest = 536870911;",
        ]
        .map(str::to_owned)
        .to_vec(),
    );
    s.push_str("service Conformance { rpc Call(Root) returns (Root); }\n");
    s
}

/// The compiled types: the pool and the `FileDescriptorSet` (imports included) for Python.
fn types() -> (DescriptorPool, Vec<u8>) {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("json_conformance");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("conformance.proto"), proto_source()).unwrap();
    let mut compiler = protox::Compiler::new([&dir]).unwrap();
    compiler.include_imports(true);
    compiler.open_files(["conformance.proto"]).unwrap();
    let fds: prost_types::FileDescriptorSet = compiler.file_descriptor_set();
    let bytes = fds.encode_to_vec();
    // For a look at a failure by hand (`json_reference.py` loads it the same way).
    std::fs::write(dir.join("conformance.pb"), &bytes).unwrap();
    (DescriptorPool::decode(bytes.as_slice()).unwrap(), bytes)
}

// ---------------------------------------------------------------------------------------
// Python.

fn python() -> PathBuf {
    portico_testkit::grpcio_python(&["google.protobuf.json_format"])
}

/// Sends every request line to one `json_reference.py` and answers its replies, in order
/// (a thread writes while this one reads, so neither pipe fills up).
fn ask_python(fds: &[u8], requests: Vec<Json>) -> Vec<Json> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/json_reference.py");
    let mut child = Command::new(python())
        .arg(script)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let fds = json!({"fds": BASE64_STANDARD.encode(fds)});
    let n = requests.len() + 1;
    let writer = std::thread::spawn(move || {
        let mut w = std::io::BufWriter::new(&mut stdin);
        for r in std::iter::once(fds).chain(requests) {
            serde_json::to_writer(&mut w, &r).unwrap();
            w.write_all(b"\n").unwrap();
        }
        w.flush().unwrap();
    });
    let mut answers = Vec::with_capacity(n);
    for line in BufReader::new(child.stdout.take().unwrap()).lines() {
        answers.push(serde_json::from_str::<Json>(&line.unwrap()).unwrap());
    }
    writer.join().unwrap();
    assert!(child.wait().unwrap().success(), "json_reference.py failed");
    assert_eq!(answers.len(), n, "json_reference.py answered too few lines");
    assert_eq!(answers[0], json!({"ok": true}));
    answers.remove(0);
    answers
}

// ---------------------------------------------------------------------------------------
// Generated messages.

/// A small deterministic generator (xorshift64*).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
    fn pick<T: Clone>(&mut self, items: &[T]) -> T {
        items[self.below(items.len() as u64) as usize].clone()
    }
}

fn random_int(rng: &mut Rng) -> i64 {
    if rng.chance(25) {
        return rng.next() as i64 >> rng.below(64);
    }
    rng.pick(&[
        0,
        1,
        -1,
        127,
        128,
        -129,
        300,
        1000,
        i64::from(i32::MIN),
        i64::from(i32::MAX),
        i64::from(u32::MAX),
        1 << 53,
        (1 << 53) + 1,
        -(1 << 53) - 1,
        i64::MIN,
        i64::MAX,
        -1_000_000_000_000,
    ])
}

fn random_f64(rng: &mut Rng) -> f64 {
    if rng.chance(20) {
        return f64::from_bits(rng.next());
    }
    rng.pick(&[
        0.0,
        -0.0,
        0.5,
        0.1,
        -2.5,
        1e20,
        1e21,
        1e-7,
        1e-300,
        5e-324,
        f64::MAX,
        f64::MIN,
        f64::MIN_POSITIVE,
        9007199254740993.0,
        123456789.125,
        1.0 / 3.0,
        f64::NAN,
        f64::INFINITY,
        f64::NEG_INFINITY,
        100.0,
    ])
}

fn random_f32(rng: &mut Rng) -> f32 {
    if rng.chance(20) {
        return f32::from_bits(rng.next() as u32);
    }
    rng.pick(&[
        0.0,
        -0.0,
        0.1,
        -2.5,
        1e20,
        1e-7,
        3.4028235e38,
        -3.4028235e38,
        f32::MIN_POSITIVE,
        1e-45,
        16777217.0,
        1.0 / 3.0,
        f32::NAN,
        f32::INFINITY,
        f32::NEG_INFINITY,
        100.0,
    ])
}

fn random_string(rng: &mut Rng) -> String {
    rng.pick(&[
        "",
        "a",
        "h\u{e9}llo w\u{f6}rld",
        "\"quoted\" \\ back / slash",
        "\u{0}\u{1}\u{1f}\u{7f}\n\t\r",
        "\u{1F600}\u{2028}\u{2029}\u{feff}",
        "</script><!--",
        "\u{4e2d}\u{6587}",
        "x".repeat(40).as_str(),
    ])
    .to_owned()
}

fn random_scalar(rng: &mut Rng, kind: &Kind) -> Value {
    let int = random_int(rng);
    match kind {
        Kind::Double => Value::F64(random_f64(rng)),
        Kind::Float => Value::F32(random_f32(rng)),
        Kind::Int32 | Kind::Sint32 | Kind::Sfixed32 => Value::I32(int as i32),
        Kind::Int64 | Kind::Sint64 | Kind::Sfixed64 => Value::I64(int),
        Kind::Uint32 | Kind::Fixed32 => Value::U32(int as u32),
        Kind::Uint64 | Kind::Fixed64 => {
            Value::U64(if rng.chance(10) { u64::MAX } else { int as u64 })
        }
        Kind::Bool => Value::Bool(rng.chance(50)),
        Kind::String => Value::String(random_string(rng)),
        Kind::Bytes => Value::Bytes(
            (0..rng.below(9))
                .map(|_| rng.next() as u8)
                .collect::<Vec<u8>>()
                .into(),
        ),
        // Unnamed numbers too: proto3 enums are open.
        Kind::Enum(_) => Value::EnumNumber(rng.pick(&[0, 1, 2, -3, 99, -100])),
        Kind::Message(_) => unreachable!(),
    }
}

fn random_json(rng: &mut Rng, depth: u32) -> Json {
    match rng.below(if depth > 2 { 4 } else { 6 }) {
        0 => Json::Null,
        1 => {
            let f = random_f64(rng);
            if f.is_finite() {
                json!(f)
            } else {
                json!(0.25)
            }
        }
        2 => json!(random_string(rng)),
        3 => json!(rng.chance(50)),
        4 => Json::Array(
            (0..rng.below(4))
                .map(|_| random_json(rng, depth + 1))
                .collect(),
        ),
        _ => Json::Object(
            (0..rng.below(4))
                .map(|_| {
                    (
                        rng.pick(&["a", "b", "", "\u{fc}ber", "with space", "@type"])
                            .to_owned(),
                        random_json(rng, depth + 1),
                    )
                })
                .collect(),
        ),
    }
}

fn field(md: &MessageDescriptor, name: &str) -> FieldDescriptor {
    md.get_field_by_name(name).unwrap()
}

/// A well-known type's message, or `None` for the others.
fn random_wkt(rng: &mut Rng, md: &MessageDescriptor, depth: u32) -> Option<DynamicMessage> {
    let mut m = DynamicMessage::new(md.clone());
    let set = |m: &mut DynamicMessage, name: &str, v: Value| m.set_field(&field(md, name), v);
    match md.full_name() {
        "google.protobuf.Timestamp" => {
            // 0001-01-01T00:00:00Z to 9999-12-31T23:59:59Z (rarely beyond: both refuse).
            let (min, max) = (-62_135_596_800i64, 253_402_300_799i64);
            let seconds = if rng.chance(2) {
                max + 1
            } else if rng.chance(50) {
                rng.pick(&[0, min, max, 1_700_000_000, -1])
            } else {
                min + (rng.next() % (max - min) as u64) as i64
            };
            set(&mut m, "seconds", Value::I64(seconds));
            set(&mut m, "nanos", Value::I32(random_nanos(rng)));
        }
        "google.protobuf.Duration" => {
            let max = 315_576_000_000i64;
            let random = (rng.next() % max as u64) as i64;
            let seconds = rng.pick(&[0, 1, -1, max, -max, 3600, random, -random]);
            let nanos = random_nanos(rng);
            let negative = seconds < 0 || (seconds == 0 && rng.chance(50));
            set(&mut m, "seconds", Value::I64(seconds));
            set(
                &mut m,
                "nanos",
                Value::I32(if negative { -nanos } else { nanos }),
            );
        }
        "google.protobuf.FieldMask" => {
            let paths = (0..rng.below(4))
                .map(|_| {
                    Value::String(
                        rng.pick(&["a", "foo_bar", "foo_bar.baz_qux", "f_int32", "x.y.z"])
                            .to_owned(),
                    )
                })
                .collect();
            set(&mut m, "paths", Value::List(paths));
        }
        "google.protobuf.Struct" => {
            let mut obj = serde_json::Map::new();
            for _ in 0..rng.below(4) {
                obj.insert(random_string(rng), random_json(rng, 1));
            }
            m = DynamicMessage::deserialize(md.clone(), Json::Object(obj)).unwrap();
        }
        "google.protobuf.Value" => {
            if rng.chance(3) {
                // Not representable in JSON: both sides refuse it.
                set(&mut m, "number_value", Value::F64(f64::NAN));
            } else {
                m = DynamicMessage::deserialize(md.clone(), random_json(rng, 0)).unwrap();
            }
        }
        "google.protobuf.ListValue" => {
            let list = (0..rng.below(4)).map(|_| random_json(rng, 1)).collect();
            m = DynamicMessage::deserialize(md.clone(), Json::Array(list)).unwrap();
        }
        "google.protobuf.Any" => {
            let pool = md.parent_pool();
            let inner = rng.pick(&[
                "conformance.json.Scalars",
                "conformance.json.Oneofs",
                "google.protobuf.Duration",
                "google.protobuf.Timestamp",
                "google.protobuf.Value",
                "google.protobuf.Struct",
                "google.protobuf.Empty",
                "google.protobuf.Int64Value",
                "google.protobuf.DoubleValue",
                "google.protobuf.FieldMask",
            ]);
            let inner_md = pool.get_message_by_name(inner).unwrap();
            let value = random_message(rng, &inner_md, depth + 1).encode_to_vec();
            set(
                &mut m,
                "type_url",
                Value::String(format!("type.googleapis.com/{inner}")),
            );
            set(&mut m, "value", Value::Bytes(value.into()));
        }
        "google.protobuf.Empty" => {}
        name if name.starts_with("google.protobuf.") && name.ends_with("Value") => {
            let fd = field(md, "value");
            if rng.chance(85) {
                set(&mut m, "value", random_scalar(rng, &fd.kind()));
            }
        }
        _ => return None,
    }
    Some(m)
}

fn random_nanos(rng: &mut Rng) -> i32 {
    let n = (rng.next() % 1_000_000_000) as i32;
    match rng.below(5) {
        0 => 0,
        1 => n / 1_000_000 * 1_000_000,
        2 => n / 1000 * 1000,
        3 => 999_999_999,
        _ => n,
    }
}

fn random_value(rng: &mut Rng, kind: &Kind, depth: u32) -> Value {
    match kind {
        Kind::Message(md) => Value::Message(random_message(rng, md, depth + 1)),
        other => random_scalar(rng, other),
    }
}

fn random_message(rng: &mut Rng, md: &MessageDescriptor, depth: u32) -> DynamicMessage {
    if let Some(m) = random_wkt(rng, md, depth) {
        return m;
    }
    let mut m = DynamicMessage::new(md.clone());
    let root = md.name() == "Root";
    for fd in md.fields() {
        let percent = match fd.name() {
            "next" | "children" => 40u64.saturating_sub(u64::from(depth) * 20),
            _ if root => 55,
            _ => 25,
        };
        if !rng.chance(percent) {
            continue;
        }
        let value = if fd.is_map() {
            let Kind::Message(entry) = fd.kind() else {
                unreachable!()
            };
            let (kf, vf) = (entry.map_entry_key_field(), entry.map_entry_value_field());
            let mut map = HashMap::new();
            for _ in 0..rng.below(4) {
                let key = match random_scalar(rng, &kf.kind()) {
                    Value::Bool(v) => MapKey::Bool(v),
                    Value::I32(v) => MapKey::I32(v),
                    Value::I64(v) => MapKey::I64(v),
                    Value::U32(v) => MapKey::U32(v),
                    Value::U64(v) => MapKey::U64(v),
                    Value::String(v) => MapKey::String(v),
                    other => unreachable!("{other:?}"),
                };
                map.insert(key, random_value(rng, &vf.kind(), depth));
            }
            Value::Map(map)
        } else if fd.is_list() {
            Value::List(
                (0..rng.below(4))
                    .map(|_| random_value(rng, &fd.kind(), depth))
                    .collect(),
            )
        } else {
            random_value(rng, &fd.kind(), depth)
        };
        m.set_field(&fd, value);
    }
    m
}

// ---------------------------------------------------------------------------------------
// Comparison.

/// Whether two JSON values are the same, numbers by value (module docs).
fn same_json(a: &Json, b: &Json) -> bool {
    match (a, b) {
        (Json::Number(x), Json::Number(y)) => {
            if let (Some(x), Some(y)) = (x.as_i64(), y.as_i64()) {
                return x == y;
            }
            if let (Some(x), Some(y)) = (x.as_u64(), y.as_u64()) {
                return x == y;
            }
            match (x.as_f64(), y.as_f64()) {
                (Some(x), Some(y)) => x.to_bits() == y.to_bits() || (x == y && x != 0.0),
                _ => false,
            }
        }
        (Json::Array(x), Json::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(x, y)| same_json(x, y))
        }
        (Json::Object(x), Json::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| same_json(v, w)))
        }
        _ => a == b,
    }
}

/// What a JSON value is, for comparing numbers: a `float` (compared as float32: Python
/// writes `1.4013e-45` where serde_json writes `1e-45`, the same float32), a message (its
/// fields known), or anything else (numbers compared as doubles).
#[derive(Clone)]
enum Shape {
    Float,
    Message(MessageDescriptor),
    Other,
}

fn shape_of(kind: &Kind) -> Shape {
    match kind {
        Kind::Float => Shape::Float,
        Kind::Message(md) => match md.full_name() {
            "google.protobuf.FloatValue" => Shape::Float,
            "google.protobuf.Struct" | "google.protobuf.Value" | "google.protobuf.ListValue" => {
                Shape::Other
            }
            _ => Shape::Message(md.clone()),
        },
        _ => Shape::Other,
    }
}

/// The shape of the member `key` of a JSON object of shape `shape`.
fn member_shape(shape: &Shape, key: &str, obj: &serde_json::Map<String, Json>) -> Shape {
    let Shape::Message(md) = shape else {
        return Shape::Other;
    };
    if md.full_name() == "google.protobuf.Any" {
        let url = obj.get("@type").and_then(Json::as_str).unwrap_or("");
        let Some(inner) = md
            .parent_pool()
            .get_message_by_name(url.rsplit('/').next().unwrap_or(""))
        else {
            return Shape::Other;
        };
        return if key == "value" && inner.full_name().starts_with("google.protobuf.") {
            shape_of(&Kind::Message(inner))
        } else {
            member_shape(&Shape::Message(inner), key, obj)
        };
    }
    if md.is_map_entry() {
        return shape_of(&md.map_entry_value_field().kind());
    }
    match md.fields().find(|f| f.json_name() == key) {
        Some(fd) if fd.is_map() => {
            let Kind::Message(entry) = fd.kind() else {
                unreachable!()
            };
            Shape::Message(entry) // its members are map keys: see below
        }
        Some(fd) => shape_of(&fd.kind()),
        None => Shape::Other,
    }
}

/// Whether two JSON numbers (or anything else) are the same (module docs).
fn same_value(want: &Json, got: &Json, shape: &Shape) -> bool {
    if let (Shape::Float, Json::Number(x), Json::Number(y)) = (shape, want, got) {
        let (x, y) = (x.as_f64().unwrap() as f32, y.as_f64().unwrap() as f32);
        return x.to_bits() == y.to_bits();
    }
    same_json(want, got)
}

/// Where two JSON values first differ (module docs), and how, for a failure report.
fn first_difference(want: &Json, got: &Json, path: &str, shape: &Shape) -> Option<String> {
    match (want, got) {
        (Json::Object(x), Json::Object(y)) => {
            for (k, v) in x {
                let at = format!("{path}.{k}");
                match y.get(k) {
                    Some(w) => {
                        let inner = member_shape(shape, k, x);
                        if let Some(d) = first_difference(v, w, &at, &inner) {
                            return Some(d);
                        }
                    }
                    None => return Some(format!("{at}: python {v}, ours missing")),
                }
            }
            y.keys()
                .find(|k| !x.contains_key(*k))
                .map(|k| format!("{path}.{k}: python missing, ours {}", y[k]))
        }
        (Json::Array(x), Json::Array(y)) if x.len() == y.len() => x
            .iter()
            .zip(y)
            .enumerate()
            .find_map(|(i, (v, w))| first_difference(v, w, &format!("{path}[{i}]"), shape)),
        _ => (!same_value(want, got, shape)).then(|| format!("{path}: python {want}, ours {got}")),
    }
}

/// A long body shortened for a failure report.
fn short(text: &str) -> String {
    if text.chars().count() <= 400 {
        return text.to_owned();
    }
    format!(
        "{}... ({} bytes)",
        text.chars().take(400).collect::<String>(),
        text.len()
    )
}

fn known_difference(difference: &str) -> Option<&'static str> {
    KNOWN_DIFFERENCES
        .iter()
        .find(|(_, applies)| applies(difference))
        .map(|(why, _)| *why)
}

fn plan(pool: &DescriptorPool) -> MethodPlan {
    let method = pool
        .get_service_by_name("conformance.json.Conformance")
        .unwrap()
        .methods()
        .next()
        .unwrap();
    MethodPlan::new(&method, &[]).unwrap()
}

// ---------------------------------------------------------------------------------------
// Replies.

#[test]
fn replies_match_python_json_format() {
    let (pool, fds) = types();
    let root = pool.get_message_by_name("conformance.json.Root").unwrap();
    let plan = plan(&pool);
    let mut rng = Rng(SEED);
    let mut cases: Vec<(String, Vec<u8>)> = Vec::new();
    for i in 0..REPLIES {
        let mut m = random_message(&mut rng, &root, 0);
        if i % 4 == 0 {
            // A section on its own, so that each shape is also seen near the top.
            let section = rng.pick(&[
                "scalars",
                "optionals",
                "repeateds",
                "maps",
                "oneofs",
                "wkts",
            ]);
            let keep = m.get_field_by_name(section).unwrap().into_owned();
            m = DynamicMessage::new(root.clone());
            m.set_field_by_name(section, keep);
        }
        cases.push((root.full_name().to_owned(), m.encode_to_vec()));
    }
    // Each well-known type as the whole reply.
    for (name, _) in MESSAGES {
        let md = pool
            .get_message_by_name(name)
            .or_else(|| pool.get_message_by_name(&format!("conformance.json.{name}")))
            .unwrap();
        for _ in 0..10 {
            cases.push((
                md.full_name().to_owned(),
                random_message(&mut rng, &md, 0).encode_to_vec(),
            ));
        }
    }
    let requests = cases
        .iter()
        .map(|(ty, bin)| json!({"op": "reply", "type": ty, "bin": BASE64_STANDARD.encode(bin)}))
        .collect();
    let answers = ask_python(&fds, requests);

    let mut failures = Vec::new();
    let (mut one_pass, mut refused) = (0, 0);
    let mut known: std::collections::BTreeMap<&str, usize> = Default::default();
    for ((ty, bin), theirs) in cases.iter().zip(&answers) {
        let md = pool.get_message_by_name(ty).unwrap();
        // The gateway's path for a whole reply of this type (one pass, else the reference).
        let gateway = if md == root {
            plan.response_from_bytes(None, bin)
                .map_err(|e| e.to_string())
        } else {
            let mut out = Vec::new();
            match ReplyWriter::new(&md).unwrap().write(bin, &mut out) {
                Ok(()) => Ok(out),
                Err(_) => Err("left to the reference".to_owned()),
            }
        };
        // The reference path on its own.
        let reference = DynamicMessage::decode(md.clone(), bin.as_slice())
            .map_err(|e| e.to_string())
            .and_then(|m| {
                let mut out = Vec::new();
                portico_grpc_dynamic::proto_json::write_message(&m, &Default::default(), &mut out)
                    .map(|()| out)
                    .map_err(|e| e.to_string())
            });
        let mut fast = Vec::new();
        let fast = match ReplyWriter::new(&md).unwrap().write(bin, &mut fast) {
            Ok(()) => {
                one_pass += 1;
                Some(fast)
            }
            Err(_) => None,
        };
        let expected = theirs["ok"]
            .as_bool()
            .unwrap()
            .then(|| serde_json::from_str::<Json>(theirs["json"].as_str().unwrap()).unwrap());
        if expected.is_none() {
            refused += 1;
        }
        let ours = [
            ("gateway", Some(gateway)),
            ("one-pass", fast.map(Ok)),
            ("reference", Some(reference)),
        ];
        for (path, out) in ours {
            let Some(out) = out else { continue };
            if path == "gateway" && md != root && out.is_err() {
                continue; // a well-known type left to the reference: checked below
            }
            let verdict = match (&expected, &out) {
                (Some(want), Ok(text)) => {
                    let got: Json = serde_json::from_slice(text).unwrap();
                    first_difference(want, &got, "", &Shape::Message(md.clone()))
                }
                (None, Err(_)) => None,
                (Some(want), Err(e)) => Some(format!(
                    "python: {}\n    ours: error {e}",
                    short(&want.to_string())
                )),
                (None, Ok(text)) => Some(format!(
                    "python refuses ({})\n    ours: {}",
                    theirs["error"],
                    short(&String::from_utf8_lossy(text))
                )),
            };
            if let Some(v) = verdict {
                if let Some(why) = known_difference(&v) {
                    *known.entry(why).or_insert(0) += 1;
                    continue;
                }
                failures.push(format!(
                    "{ty} ({path}), bytes {}:\n    {v}",
                    short(&BASE64_STANDARD.encode(bin))
                ));
            }
        }
    }
    eprintln!(
        "{} replies checked ({one_pass} in one pass, {refused} refused by json_format)",
        cases.len()
    );
    for (why, n) in &known {
        eprintln!("  {n} x {why}");
    }
    assert!(
        failures.is_empty(),
        "{} of {} replies differ from json_format:\n{}",
        failures.len(),
        cases.len(),
        failures
            .iter()
            .take(400)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
}

// ---------------------------------------------------------------------------------------
// Requests.

/// A message's JSON rewritten into other forms proto3 JSON accepts (module docs).
fn rewrite_message(rng: &mut Rng, md: &MessageDescriptor, v: Json) -> Json {
    if md.full_name().starts_with("google.protobuf.") {
        return rewrite_wkt(rng, md, v);
    }
    let Json::Object(obj) = v else { return v };
    let mut out = serde_json::Map::new();
    for (k, v) in obj {
        let Some(fd) = md.fields().find(|f| f.json_name() == k) else {
            out.insert(k, v);
            continue;
        };
        let key = if rng.chance(30) {
            fd.name().to_owned()
        } else {
            k
        };
        out.insert(key, rewrite_field(rng, &fd, v));
    }
    // Fields written as null (not set; a Value's null, a NullValue).
    for fd in md.fields() {
        if rng.chance(4)
            && !out.contains_key(fd.json_name())
            && !out.contains_key(fd.name())
            && fd.containing_oneof().is_none()
        {
            out.insert(fd.json_name().to_owned(), Json::Null);
        }
    }
    if rng.chance(5) {
        out.insert("notAField".to_owned(), json!({"x": [1, "y", null]}));
    }
    Json::Object(out)
}

fn rewrite_field(rng: &mut Rng, fd: &FieldDescriptor, v: Json) -> Json {
    if fd.is_map() {
        let Kind::Message(entry) = fd.kind() else {
            unreachable!()
        };
        let vf = entry.map_entry_value_field();
        let Json::Object(obj) = v else { return v };
        return Json::Object(
            obj.into_iter()
                .map(|(k, v)| (k, rewrite_value(rng, &vf.kind(), v)))
                .collect(),
        );
    }
    if fd.is_list() {
        let Json::Array(items) = v else { return v };
        return Json::Array(
            items
                .into_iter()
                .map(|v| rewrite_value(rng, &fd.kind(), v))
                .collect(),
        );
    }
    rewrite_value(rng, &fd.kind(), v)
}

fn rewrite_value(rng: &mut Rng, kind: &Kind, v: Json) -> Json {
    match kind {
        Kind::Message(md) => rewrite_message(rng, md, v),
        Kind::Enum(ed) => match &v {
            Json::String(name) if rng.chance(30) => match ed.get_value_by_name(name) {
                Some(e) => json!(e.number()),
                None => v,
            },
            _ if rng.chance(3) => json!("NOT_A_COLOUR"), // ignored, as an unknown field
            _ => v,
        },
        Kind::Double | Kind::Float => match &v {
            Json::Number(n) if rng.chance(30) => json!(n.to_string()),
            Json::Number(n) if rng.chance(15) => {
                let f = n.as_f64().unwrap();
                json!(format!("{f:e}"))
            }
            _ => v,
        },
        Kind::Int32
        | Kind::Sint32
        | Kind::Sfixed32
        | Kind::Uint32
        | Kind::Fixed32
        | Kind::Int64
        | Kind::Sint64
        | Kind::Sfixed64
        | Kind::Uint64
        | Kind::Fixed64 => {
            let text = match &v {
                Json::Number(n) => n.to_string(),
                Json::String(s) => s.clone(),
                _ => return v,
            };
            let exact: Json = serde_json::from_str(&text).unwrap();
            match rng.below(10) {
                0..=2 => json!(text),
                3..=4 => exact,
                5 if text.ends_with("00") && text != "00" => {
                    // Exponent form, as a number or a string.
                    let mantissa = &text[..text.len() - 2];
                    let e = format!("{mantissa}e2");
                    if rng.chance(50) || mantissa.len() > 15 {
                        json!(e)
                    } else {
                        serde_json::from_str(&e).unwrap()
                    }
                }
                6 if text.len() < 15 => json!(exact.as_f64().unwrap()), // 5 as 5.0
                _ => v,
            }
        }
        Kind::Bytes => match &v {
            Json::String(b64) if rng.chance(40) => {
                let raw = BASE64_STANDARD.decode(b64).unwrap();
                json!(BASE64_URL_SAFE_NO_PAD.encode(raw))
            }
            Json::String(b64) if rng.chance(20) => json!(b64.trim_end_matches('=')),
            _ => v,
        },
        _ => v,
    }
}

fn rewrite_wkt(rng: &mut Rng, md: &MessageDescriptor, v: Json) -> Json {
    match (md.full_name(), v) {
        ("google.protobuf.Timestamp", Json::String(s)) if rng.chance(40) => {
            // Nine fractional digits, and "+00:00" for "Z".
            let s = s.trim_end_matches('Z');
            let s = match s.split_once('.') {
                Some((whole, frac)) => format!("{whole}.{frac:0<9}"),
                None => format!("{s}.000000000"),
            };
            json!(format!("{s}{}", rng.pick(&["Z", "+00:00"])))
        }
        ("google.protobuf.Duration", Json::String(s)) if rng.chance(40) => {
            let s = s.trim_end_matches('s');
            json!(match s.split_once('.') {
                Some((whole, frac)) => format!("{whole}.{frac:0<9}s"),
                None => format!("{s}.000s"),
            })
        }
        ("google.protobuf.Any", Json::Object(mut obj)) => {
            let url = obj.get("@type").and_then(Json::as_str).unwrap_or("");
            let name = url.rsplit('/').next().unwrap_or("").to_owned();
            let Some(inner) = md.parent_pool().get_message_by_name(&name) else {
                return Json::Object(obj);
            };
            if name.starts_with("google.protobuf.") {
                if let Some(value) = obj.remove("value") {
                    obj.insert("value".to_owned(), rewrite_wkt(rng, &inner, value));
                }
                return Json::Object(obj);
            }
            let at_type = obj.remove("@type").unwrap();
            let Json::Object(mut rest) = rewrite_message(rng, &inner, Json::Object(obj)) else {
                unreachable!()
            };
            rest.insert("@type".to_owned(), at_type);
            Json::Object(rest)
        }
        (name, v)
            if name.ends_with("Value")
                && !matches!(name, "google.protobuf.Value" | "google.protobuf.ListValue") =>
        {
            let inner = field(md, "value").kind();
            rewrite_value(rng, &inner, v)
        }
        (_, v) => v,
    }
}

/// Bodies written by hand: the forms the generated ones do not reach.
fn handwritten() -> Vec<Json> {
    vec![
        json!({"scalars": {"fDouble": "NaN", "fFloat": "Infinity"}}),
        json!({"scalars": {"fDouble": "-Infinity", "fFloat": "-Infinity"}}),
        json!({"wkts": {"wDouble": "NaN", "wFloat": "Infinity"}}),
        json!({"wkts": {"wDouble": "-Infinity", "wFloat": "-Infinity"}}),
        json!({"wkts": {"wDouble": "1e3", "wFloat": "-0"}}),
        json!({"repeateds": {"rDouble": ["NaN", "Infinity", "-Infinity", -0.0, "1.5"]}}),
        json!({"repeateds": {"rFloat": ["NaN", "Infinity", "-Infinity", -0.0, "0.1"]}}),
        json!({"repeateds": {"rWDouble": ["NaN", 1, "-Infinity"], "rWFloat": ["Infinity"]}}),
        json!({"maps": {"vDouble": {"a": "NaN", "b": "-Infinity"}, "vFloat": {"c": "Infinity"}}}),
        json!({"maps": {"vWDouble": {"a": "NaN"}, "vWFloat": {"b": "-Infinity"}}}),
        json!({"oneofs": {"cDouble": "NaN"}}),
        json!({"oneofs": {"cWFloat": "Infinity"}}),
        json!({"scalars": {"fDouble": -0.0, "fFloat": -0.0}}),
        json!({"scalars": {"fDouble": "-0", "fFloat": "-0.0"}}),
        json!({"optionals": {"oDouble": -0.0, "oFloat": 0, "oInt32": 0, "oString": ""}}),
        json!({"scalars": {"fInt32": "2147483647", "fInt64": 9223372036854775807u64}}),
        json!({"scalars": {"fInt32": -2147483648, "fUint64": "18446744073709551615"}}),
        json!({"scalars": {"fInt32": 1e2, "fInt64": "1e2", "fUint32": 3.0}}),
        json!({"scalars": {"fSint64": "-9223372036854775808", "fFixed64": 18446744073709551615u64}}),
        json!({"scalars": {"fInt32": 2147483648i64}}),
        json!({"scalars": {"fUint32": -1}}),
        json!({"scalars": {"fInt32": 1.5}}),
        json!({"scalars": {"fInt64": "9223372036854775808"}}),
        json!({"scalars": {"fFloat": 3.5e38}}),
        json!({"scalars": {"fFloat": "3.4028235e38"}}),
        json!({"scalars": {"fDouble": "nan"}}),
        json!({"scalars": {"fDouble": "1.7976931348623157e308", "fFloat": 1e-46}}),
        json!({"scalars": {"fBool": true, "fString": "\u{1F600}"}}),
        json!({"scalars": {"fBytes": "-_8="}}),
        json!({"scalars": {"fBytes": "+/8"}}),
        json!({"scalars": {"fEnum": 2, "f_enum": "RED"}}),
        json!({"scalars": {"fEnum": "CRIMSON"}}),
        json!({"scalars": {"fEnum": -3}}),
        json!({"scalars": {"fEnum": 12345}}),
        json!({"scalars": {"fEnum": "NO_SUCH_NAME"}}),
        json!({"repeateds": {"rEnum": ["RED", "NO_SUCH_NAME", 7]}}),
        json!({"maps": {"vEnum": {"a": "GREEN", "b": "NO_SUCH_NAME"}}}),
        json!({"maps": {"kBool": {"true": "t", "false": "f"}, "kInt64": {"-9223372036854775808": "m"}}}),
        json!({"maps": {"kUint64": {"18446744073709551615": "m"}, "kSint32": {"-1": "n"}}}),
        json!({"maps": {"kInt32": {"1": "a", "01": "b"}}}),
        json!({"names": {"a1b": 1, "Leading": 2, "trailing": 3, "UpperCase": 4, "renamed": 5}}),
        json!({"names": {"a_1b": 1, "_leading": 2, "trailing_": 3, "with_json_name": 5}}),
        json!({"names": {"twoUnderscores": 6, "theURL": "u"}}),
        json!({"names": {"withJsonName": 5}}),
        json!({"oneofs": {"cString": null, "cInt64": "5"}}),
        json!({"oneofs": {"cNull": null}}),
        json!({"oneofs": {"cValue": null}}),
        json!({"oneofs": {"cString": "a", "cInt64": "5"}}),
        json!({"wkts": {"value": null, "nullValue": null, "maybeNull": null}}),
        json!({"wkts": {"value": {"a": [1, null, "x", {"b": false}]}, "listValue": [null, 1.5]}}),
        json!({"wkts": {"struct": {}, "value": [], "listValue": []}}),
        json!({"wkts": {"timestamp": "1970-01-01T00:00:00Z", "duration": "0s"}}),
        json!({"wkts": {"timestamp": "2026-05-06T09:08:09.5+02:00"}}),
        json!({"wkts": {"timestamp": "2026-05-06T07:08:09.123-00:30"}}),
        json!({"wkts": {"timestamp": "0001-01-01T00:00:00Z", "duration": "-315576000000s"}}),
        json!({"wkts": {"timestamp": "9999-12-31T23:59:59.999999999Z", "duration": "315576000000.999999999s"}}),
        json!({"wkts": {"timestamp": "2026-05-06t07:08:09z"}}),
        json!({"wkts": {"duration": "-0.5s"}}),
        json!({"wkts": {"duration": "1.0000000001s"}}),
        json!({"wkts": {"duration": "315576000001s"}}),
        json!({"wkts": {"fieldMask": "fooBar,baz.quxQuux"}}),
        json!({"wkts": {"fieldMask": ""}}),
        json!({"wkts": {"empty": {}, "wInt64": 5, "wUint64": "18446744073709551615"}}),
        json!({"wkts": {"wInt32": "7", "wUint32": 7.0, "wBool": false, "wString": ""}}),
        json!({"wkts": {"wBytes": "AAEC/w==", "wDouble": 0, "wFloat": null}}),
        json!({"wkts": {"any": {"@type": "type.googleapis.com/google.protobuf.Duration", "value": "1.5s"}}}),
        json!({"wkts": {"any": {"@type": "type.googleapis.com/conformance.json.Scalars", "fInt64": 5, "f_double": "NaN"}}}),
        json!({"wkts": {"any": {"@type": "type.googleapis.com/google.protobuf.Value", "value": null}}}),
        json!({"wkts": {"any": {}}}),
        json!({"wkts": {"any": {"@type": "type.googleapis.com/google.protobuf.Any", "value": {"@type": "type.googleapis.com/google.protobuf.Empty", "value": {}}}}}),
        json!({"wkts": {"any": {"@type": "type.googleapis.com/no.such.Type"}}}),
        json!({"wkts": {"any": {"@type": "type.googleapis.com/google.protobuf.Empty"}}}),
        json!({"wkts": {"any": {"@type": "type.googleapis.com/google.protobuf.Empty", "x": 1}}}),
        json!({"wkts": {"any": {"@type": "type.googleapis.com/google.protobuf.Any", "value": {"@type": "type.googleapis.com/google.protobuf.Empty"}}}}),
        json!({"wkts": {"any": {"@type": "type.googleapis.com/google.protobuf.Int64Value", "value": "1e2"}, "wInt32": "-2e1", "wUint64": "1e19"}}),
        json!({"maps": {"kInt32": {"1e1": "a"}, "kUint64": {"1.8e19": "b"}}, "repeateds": {"rInt64": ["1e2", "-1E0"]}}),
        json!({"scalars": {"fInt32": "1.5e0"}}),
        json!({"scalars": {"fInt32": "3e9", "fUint32": "-1e0"}}),
        json!({"scalars": {"fInt64": "1e19"}}),
        json!({"repeateds": {"rInt32": [1, "2", 3e0], "rValue": [null, 1, "x"]}}),
        json!({"repeateds": {"rInt32": [1, null]}}),
        json!({"repeateds": {"rMessage": [{}, {"fInt32": 1}]}}),
        json!({"repeateds": {"rString": null, "rMessage": null}}),
        json!({"maps": {"vMessage": {"a": {}}, "vValue": {"n": null}}}),
        json!({"maps": {"vInt32": {"a": null}}}),
        json!({"scalars": {"fString": null, "fInt32": null, "fEnum": null}}),
        json!({"next": {"next": {"next": {"highest": 1}}}}),
        json!({"highest": "-1", "children": [{"highest": 2}, {}]}),
        json!({"scalars": {}, "unknown": {"deep": [1, 2, {"x": null}]}}),
        json!({"scalars": {"fInt32": true}}),
        json!({"scalars": {"fBool": "true"}}),
        json!({"scalars": {"fString": 5}}),
        json!({"scalars": "nope"}),
        json!([]),
        json!({}),
    ]
}

/// How the message Python parsed differs from the one our bytes decode to.
fn message_difference(md: &MessageDescriptor, parsed: &Json, want: &Json, got: &Json) -> String {
    if let Some(d) = got["difference"].as_str() {
        return d.to_owned();
    }
    let json = |r: &Json| serde_json::from_str::<Json>(r["text"].as_str().unwrap_or("null"));
    match (json(parsed), json(got)) {
        (Ok(a), Ok(b)) => match first_difference(&a, &b, "", &Shape::Message(md.clone())) {
            Some(d) => d,
            None => format!(
                "same JSON, other bytes: python {want}, ours {}",
                got["canon"]
            ),
        },
        _ => format!(
            "python: {}\n    ours: {}",
            short(&parsed["text"].to_string()),
            short(&got.to_string())
        ),
    }
}

/// Which of our paths encoded a body, and its bytes or its error.
type Encoded = (&'static str, Result<Vec<u8>, String>);

#[test]
fn requests_match_python_json_format() {
    let (pool, fds) = types();
    let root = pool.get_message_by_name("conformance.json.Root").unwrap();
    let plan = plan(&pool);
    let encoder = RequestEncoder::new(&root).unwrap();
    let mut rng = Rng(SEED ^ 0x5eed);
    let mut bodies: Vec<String> = handwritten().iter().map(Json::to_string).collect();
    let handwritten_count = bodies.len();
    for _ in 0..REQUESTS {
        let m = random_message(&mut rng, &root, 0);
        let mut text = Vec::new();
        // The JSON of a message both sides can write (not a NaN in a Value, say).
        if portico_grpc_dynamic::proto_json::write_message(&m, &Default::default(), &mut text)
            .is_err()
        {
            continue;
        }
        let v: Json = serde_json::from_slice(&text).unwrap();
        bodies.push(rewrite_message(&mut rng, &root, v).to_string());
    }

    // Per body: the one-pass encoder's bytes (when it takes the body on) and the
    // reference path's (what the gateway sends otherwise).
    let mut ours: Vec<Vec<Encoded>> = Vec::new();
    let mut one_pass = 0;
    for body in &bodies {
        let mut fast = Vec::new();
        let fast = encoder.encode(body.as_bytes(), &mut fast).map(|()| fast);
        let gateway = plan
            .request_bytes(None, &[], None, body.as_bytes())
            .map_err(|e| e.to_string());
        let reference = plan
            .request(None, &[], None, body.as_bytes())
            .map(|m| m.encode_to_vec())
            .map_err(|e| e.to_string());
        let mut these = vec![("gateway", gateway), ("reference", reference)];
        if let Ok(fast) = fast {
            one_pass += 1;
            these.push(("one-pass", Ok(fast)));
        }
        ours.push(these);
    }
    let requests = bodies
        .iter()
        .zip(&ours)
        .map(|(body, these)| {
            let bins: Vec<String> = these
                .iter()
                .filter_map(|(_, r)| r.as_ref().ok())
                .map(|b| BASE64_STANDARD.encode(b))
                .collect();
            json!({"op": "request", "type": root.full_name(), "json": body, "bins": bins})
        })
        .collect();
    let answers = ask_python(&fds, requests);

    let mut failures = Vec::new();
    let (mut refused, mut excused) = (0, 0);
    let mut known: std::collections::BTreeMap<&str, usize> = Default::default();
    for ((body, these), theirs) in bodies.iter().zip(&ours).zip(&answers) {
        let parsed = &theirs["parsed"];
        let mut bins = theirs["bins"].as_array().unwrap().iter();
        let want = parsed["ok"].as_bool().unwrap().then(|| &parsed["canon"]);
        if want.is_none() {
            refused += 1;
        }
        for (path, out) in these {
            let verdict = match (want, out) {
                (None, Err(_)) => None,
                (Some(_), Err(e)) => Some(format!(
                    "python: {}\n    ours: error {e}",
                    short(parsed["text"].as_str().unwrap())
                )),
                (want, Ok(_)) => {
                    let got = bins.next().unwrap();
                    match want {
                        Some(want) if got["canon"] == *want => None,
                        Some(want) => Some(message_difference(&root, parsed, want, got)),
                        None => Some(format!(
                            "python refuses ({})\n    ours: {}",
                            parsed["error"],
                            short(got["text"].as_str().unwrap_or("not a message"))
                        )),
                    }
                }
            };
            if let Some(v) = verdict {
                if let Some(why) = known_difference(&v) {
                    excused += 1;
                    *known.entry(why).or_insert(0) += 1;
                    continue;
                }
                failures.push(format!("{} ({path}):\n    {v}", short(body)));
            }
        }
    }
    eprintln!(
        "{} request bodies checked ({handwritten_count} by hand, {one_pass} in one pass, \
         {refused} refused by json_format, {excused} known differences)",
        bodies.len()
    );
    for (why, n) in &known {
        eprintln!("  {n} x {why}");
    }
    assert!(
        failures.is_empty(),
        "{} differences from json_format in {} request bodies:\n{}",
        failures.len(),
        bodies.len(),
        failures
            .iter()
            .take(400)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
}
