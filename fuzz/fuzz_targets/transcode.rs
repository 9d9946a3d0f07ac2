//! The one-pass JSON ⇄ protobuf codecs of portico-grpc-dynamic (`RequestEncoder`,
//! `ReplyWriter`) held to prost-reflect's serde mapping, the reference they stand in for:
//! whatever a one-pass codec takes, the reference takes too and means the same (a request
//! body encodes to the message the reference makes; a reply is written as the JSON the
//! reference writes); whatever it leaves, it leaves untouched. Input: one byte choosing the
//! direction (bit 0: 0 request, 1 reply) and the message type (the rest), then the JSON body
//! or the protobuf reply. Types: grpc-dynamic/testdata/*.proto, compiled in reply.bin.
#![no_main]

use libfuzzer_sys::fuzz_target;
use portico_grpc_dynamic::{ReplyWriter, RequestEncoder};
use prost::Message as _;
use prost_reflect::{
    DescriptorPool, DeserializeOptions, DynamicMessage, MessageDescriptor, SerializeOptions,
};
use std::sync::OnceLock;

const TYPES: [&str; 5] = [
    "portico.test.reply.Everything",
    "portico.test.reply.Scalars",
    "portico.test.reply2.Legacy",
    "google.protobuf.Struct",
    "google.protobuf.Timestamp",
];

type Codecs = Vec<(MessageDescriptor, RequestEncoder, ReplyWriter)>;

fn codecs() -> &'static Codecs {
    static CODECS: OnceLock<Codecs> = OnceLock::new();
    CODECS.get_or_init(|| {
        let set = include_bytes!("../../grpc-dynamic/testdata/reply.bin");
        let pool = DescriptorPool::decode(set.as_slice()).expect("reply.bin decodes");
        TYPES
            .iter()
            .map(|name| {
                let md = pool.get_message_by_name(name).expect("a test type");
                let encoder = RequestEncoder::new(&md).expect("no groups");
                let writer = ReplyWriter::new(&md).expect("no groups");
                (md, encoder, writer)
            })
            .collect()
    })
}

fuzz_target!(|data: &[u8]| {
    let Some((&choice, rest)) = data.split_first() else {
        return;
    };
    let (md, encoder, writer) = &codecs()[usize::from(choice >> 1) % TYPES.len()];
    if choice & 1 == 0 {
        request(md, encoder, rest);
    } else {
        reply(md, writer, rest);
    }
});

/// A message as a backend reads it, as JSON.
fn as_json(md: &MessageDescriptor, bytes: &[u8]) -> Option<serde_json::Value> {
    let m = DynamicMessage::decode(md.clone(), bytes).ok()?;
    serde_json::to_value(&m).ok()
}

fn request(md: &MessageDescriptor, encoder: &RequestEncoder, body: &[u8]) {
    let mut out = Vec::new();
    if encoder.encode(body, &mut out).is_err() {
        assert!(out.is_empty(), "a refusal leaves the output as it was");
        return;
    }
    let mut de = serde_json::Deserializer::from_slice(body);
    let options = DeserializeOptions::new().deny_unknown_fields(false);
    let reference = match DynamicMessage::deserialize_with_options(md.clone(), &mut de, &options)
        .and_then(|m| de.end().map(|()| m))
    {
        Ok(m) => m,
        // The one deliberate difference from prost-reflect: an integer written as a string in
        // a float's form ("1e2", "4.") is read as Python's json_format reads it, which the
        // JSON-conformance test (grpc-dynamic/tests/json_conformance.rs) holds us to.
        Err(e) if e.to_string().contains("invalid digit found in string") => return,
        Err(e) => panic!("the encoder took a body the reference refuses: {e}"),
    };
    let got = as_json(md, &out).expect("the encoder's bytes decode");
    let expected = as_json(md, &reference.encode_to_vec()).expect("the reference's bytes decode");
    assert_eq!(got, expected, "the encoder and the reference disagree");
}

fn reply(md: &MessageDescriptor, writer: &ReplyWriter, bytes: &[u8]) {
    let mut out = Vec::new();
    if writer.write(bytes, &mut out).is_err() {
        assert!(out.is_empty(), "a refusal leaves the output as it was");
        return;
    }
    let reference = DynamicMessage::decode(md.clone(), bytes)
        .expect("the writer took a reply the reference refuses");
    let mut expected = Vec::new();
    portico_grpc_dynamic::proto_json::write_message(
        &reference,
        &SerializeOptions::new(),
        &mut expected,
    )
    .expect("the writer took a reply the reference cannot write");
    let got: serde_json::Value = serde_json::from_slice(&out).expect("the writer's JSON parses");
    let expected: serde_json::Value = serde_json::from_slice(&expected).unwrap();
    assert_eq!(got, expected, "the writer and the reference disagree");
}
