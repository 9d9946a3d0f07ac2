//! Test support: the test descriptors (testdata/) and a generator of random messages of
//! any type, for the one-pass codecs' tests against prost-reflect.

use prost_reflect::{DescriptorPool, DynamicMessage, Kind, MapKey, MessageDescriptor, Value};
use serde_json::json;
use std::collections::HashMap;

pub fn pool() -> DescriptorPool {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/testdata");
    protox::Compiler::new([dir])
        .unwrap()
        .open_files(["reply.proto", "reply_proto2.proto"])
        .unwrap()
        .descriptor_pool()
}

pub fn message(name: &str) -> MessageDescriptor {
    pool().get_message_by_name(name).unwrap()
}

/// The test type with every shape (testdata/reply.proto).
pub fn everything() -> MessageDescriptor {
    message("portico.test.reply.Everything")
}

/// An `Everything` whose `scalars` sets every scalar type and an enum, with strings needing
/// escapes, the extremes of the integers and 64-bit integers as strings.
pub fn every_scalar() -> serde_json::Value {
    json!({"scalars": {"fDouble": 1.5, "fFloat": 0.1, "fInt32": -1, "fInt64": "-9007199254740993",
        "fUint32": 4294967295u32, "fUint64": "18446744073709551615", "fSint32": -2147483648,
        "fSint64": "-9223372036854775808", "fFixed32": 7, "fFixed64": "8", "fSfixed32": -9,
        "fSfixed64": "-10", "fBool": true, "fString": "h\u{e9}llo \"q\" \\ \n \u{1} \u{1F600}",
        "fBytes": "AAEC/w==", "fEnum": "GREEN"}})
}

/// A small deterministic generator (xorshift64*).
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
    pub fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len() as u64) as usize]
    }
}

pub fn random_json(rng: &mut Rng, depth: u32) -> serde_json::Value {
    match rng.below(if depth > 3 { 4 } else { 6 }) {
        0 => serde_json::Value::Null,
        1 => json!(rng.pick(&[0.0, -0.0, 1.0, 0.1, -1e300, 123456789.125])),
        2 => json!(rng.pick(&["", "x", "é\"\\\n"])),
        3 => json!(rng.chance(50)),
        4 => serde_json::Value::Array(
            (0..rng.below(3))
                .map(|_| random_json(rng, depth + 1))
                .collect(),
        ),
        _ => serde_json::Value::Object(
            (0..rng.below(4))
                .map(|_| {
                    (
                        rng.pick(&["a", "b", "", "ü"]).to_owned(),
                        random_json(rng, depth + 1),
                    )
                })
                .collect(),
        ),
    }
}

fn random_scalar(rng: &mut Rng, kind: &Kind) -> Value {
    let int = rng.pick(&[
        0i64,
        1,
        -1,
        127,
        128,
        i64::from(i32::MIN),
        i64::from(i32::MAX),
        i64::MIN,
        i64::MAX,
    ]);
    let int = if rng.chance(30) {
        rng.next() as i64
    } else {
        int
    };
    match kind {
        Kind::Double => {
            let random = f64::from_bits(rng.next());
            Value::F64(rng.pick(&[
                0.0,
                -0.0,
                0.5,
                1e-300,
                f64::NAN,
                f64::INFINITY,
                f64::NEG_INFINITY,
                random,
            ]))
        }
        Kind::Float => {
            let random = f32::from_bits(rng.next() as u32);
            Value::F32(rng.pick(&[0.0, -0.0, 0.1, 3.4e38, f32::NAN, f32::NEG_INFINITY, random]))
        }
        Kind::Int32 | Kind::Sint32 | Kind::Sfixed32 => Value::I32(int as i32),
        Kind::Int64 | Kind::Sint64 | Kind::Sfixed64 => Value::I64(int),
        Kind::Uint32 | Kind::Fixed32 => Value::U32(int as u32),
        Kind::Uint64 | Kind::Fixed64 => Value::U64(int as u64),
        Kind::Bool => Value::Bool(rng.chance(50)),
        Kind::String => Value::String(
            rng.pick(&["", "a", "h\u{e9}llo", "\"\\/\u{0}\u{1f}\u{7f}", "\u{1F600}"])
                .to_owned(),
        ),
        Kind::Bytes => Value::Bytes(
            (0..rng.below(5))
                .map(|_| rng.next() as u8)
                .collect::<Vec<u8>>()
                .into(),
        ),
        Kind::Enum(_) => Value::EnumNumber(rng.pick(&[0, 1, 2, -3, 99])),
        Kind::Message(_) => unreachable!(),
    }
}

/// What a generated message holds that decides how it is checked.
#[derive(Default)]
pub struct Seen {
    /// A map with two entries or more (written in no fixed order by the reference).
    pub maps: bool,
    /// An `Any` or a `FieldMask` (left to the reference).
    pub unhandled: bool,
}

fn random_value(rng: &mut Rng, kind: &Kind, depth: u32, seen: &mut Seen) -> Value {
    match kind {
        Kind::Message(md) => Value::Message(random_message(rng, md, depth + 1, seen)),
        other => random_scalar(rng, other),
    }
}

pub fn random_message(
    rng: &mut Rng,
    md: &MessageDescriptor,
    depth: u32,
    seen: &mut Seen,
) -> DynamicMessage {
    let wkt_json = match md.full_name() {
        "google.protobuf.Timestamp" => Some(json!(rng.pick(&[
            "1970-01-01T00:00:00Z",
            "0001-01-01T00:00:00Z",
            "2026-05-06T07:08:09.123456Z",
            "9999-12-31T23:59:59.999999999Z"
        ]))),
        "google.protobuf.Duration" => Some(json!(rng.pick(&[
            "0s",
            "-0.5s",
            "1.000000001s",
            "-315576000000s"
        ]))),
        "google.protobuf.Struct" => {
            Some(json!({"k": random_json(rng, 1), "a": random_json(rng, 1)}))
        }
        "google.protobuf.Value" => Some(random_json(rng, 0)),
        "google.protobuf.ListValue" => Some(json!([random_json(rng, 1)])),
        "google.protobuf.Any" => {
            Some(json!({"@type": "type.googleapis.com/google.protobuf.Empty", "value": {}}))
        }
        "google.protobuf.FieldMask" => Some(json!("a,bC")),
        _ => None,
    };
    if let Some(v) = wkt_json {
        seen.unhandled |= matches!(
            md.full_name(),
            "google.protobuf.Any" | "google.protobuf.FieldMask"
        );
        return DynamicMessage::deserialize(md.clone(), v).unwrap();
    }
    let mut m = DynamicMessage::new(md.clone());
    for fd in md.fields() {
        let nested = matches!(fd.kind(), Kind::Message(_));
        let rare = matches!(fd.name(), "any" | "mask");
        if !rng.chance(if rare {
            3
        } else if nested && depth > 2 {
            5
        } else {
            45
        }) {
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
                map.insert(key, random_value(rng, &vf.kind(), depth, seen));
            }
            seen.maps |= map.len() > 1;
            Value::Map(map)
        } else if fd.is_list() {
            Value::List(
                (0..rng.below(4))
                    .map(|_| random_value(rng, &fd.kind(), depth, seen))
                    .collect(),
            )
        } else {
            random_value(rng, &fd.kind(), depth, seen)
        };
        m.set_field(&fd, value);
    }
    m
}

/// `testdata/reply.bin`: the test descriptors compiled, for the fuzz target `transcode`
/// (fuzz/), which does not compile `.proto` files itself.
#[test]
fn the_fuzz_targets_descriptor_set_is_current() {
    use prost::Message as _;
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/testdata");
    let mut compiler = protox::Compiler::new([dir]).unwrap();
    compiler.include_imports(true);
    compiler
        .open_files(["reply.proto", "reply_proto2.proto"])
        .unwrap();
    let bytes = compiler.file_descriptor_set().encode_to_vec();
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/testdata/reply.bin");
    if std::env::var_os("PORTICO_BLESS").is_some() {
        std::fs::write(path, &bytes).unwrap();
    }
    assert!(
        std::fs::read(path).is_ok_and(|b| b == bytes),
        "testdata/reply.bin is not the compiled testdata/*.proto; write it with \
         PORTICO_BLESS=1 cargo test -p portico-grpc-dynamic the_fuzz_targets_descriptor_set"
    );
}
