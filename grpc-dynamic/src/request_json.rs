//! The request direction of transcoding in one pass: a JSON body encoded straight into the
//! protobuf bytes of the method's input message, without building a `DynamicMessage`
//! (docs/ARCHITECTURE.md, "The invoke tier").
//!
//! The reference for what a body means is prost-reflect's deserializer with unknown fields
//! ignored, and [`proto_json::read_message`](crate::proto_json::read_message)'s corrections
//! (what [`MethodPlan::request`](crate::MethodPlan::request) does); a [`RequestEncoder`]
//! gives bytes that decode to the very message the reference builds. It reads the JSON with
//! the same parser (serde_json) and converts each value by the same rules (numbers from JSON
//! numbers or decimal strings, integral floats for integers, in a string too (`"1e2"`),
//! `"NaN"` and `"Infinity"`, enums by name or number, bytes in standard or URL-safe base64,
//! fields by JSON or proto name); the well-known types (Timestamp, Duration, Struct,
//! wrappers, ...) are read by prost-reflect itself and encoded where they stand.
//!
//! Whatever it does not take on is [`NotFast`], and the caller uses the reference, which
//! then also explains any mistake of the caller: a field given twice, two members of one
//! oneof, an unknown enum name (the reference drops the field), `null` where a
//! `google.protobuf.Value` or `NullValue` is expected, an unknown key in a message that has
//! extensions, and every error.

use crate::reply_json::{NotFast, ReplyWriter};
use crate::schema::{Card, Field, Scalar, Schema, Ty, Type, Wkt, WT_LEN, WT_VARINT};
use base64::alphabet;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
use base64::{DecodeError, Engine as _};
use prost::Message as _;
use prost_reflect::{
    DeserializeOptions, DynamicMessage, EnumDescriptor, FieldDescriptor, Kind, MessageDescriptor,
};
use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

/// Encodes JSON bodies of one message type as protobuf in one pass. Built once per type and
/// snapshot.
#[derive(Debug)]
pub struct RequestEncoder {
    schema: Schema,
    root: Ty,
}

impl RequestEncoder {
    /// The encoder of `md` requests; `None` when the type (or one it contains) has proto2
    /// groups.
    pub fn new(md: &MessageDescriptor) -> Option<RequestEncoder> {
        let (schema, root) = Schema::plan(md).ok()?;
        Some(RequestEncoder { schema, root })
    }

    /// The enum of `ty`, when it is one that reads as an enum here (`NullValue` does not:
    /// the reference reads it by rules of its own).
    fn enumeration(&self, e: usize) -> Option<&EnumDescriptor> {
        let plan = &self.schema.enums[e];
        (!plan.null).then_some(&plan.desc)
    }

    /// Whether a JSON `null` for a field of type `ty` means something (a
    /// `google.protobuf.Value`, a `NullValue`) rather than "not set".
    fn null_is_a_value(&self, ty: &Ty) -> bool {
        match ty {
            Ty::Wkt(Wkt::Value, _) => true,
            Ty::Enum(e) => self.schema.enums[*e].null,
            _ => false,
        }
    }

    /// Appends the protobuf encoding of the JSON `body` (a whole message) to `out`. On
    /// [`NotFast`] `out` is as it was.
    pub fn encode(&self, body: &[u8], out: &mut Vec<u8>) -> Result<(), NotFast> {
        let start = out.len();
        let mut de = serde_json::Deserializer::from_slice(body);
        let encoded = ValueSeed {
            enc: self,
            ty: &self.root,
            out: &mut *out,
        }
        .deserialize(&mut de)
        .and_then(|()| de.end());
        if encoded.is_err() {
            out.truncate(start);
            return Err(NotFast);
        }
        Ok(())
    }

    /// Appends field `number` of an enclosing message, whose type is this encoder's and whose
    /// value is the JSON `body` (`body: "<field>"` of a binding naming a message field).
    pub fn encode_as_field(
        &self,
        number: u32,
        body: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<(), NotFast> {
        let start = out.len();
        put_key(out, number, WT_LEN);
        let at = begin_len(out);
        if self.encode(body, out).is_err() {
            out.truncate(start);
            return Err(NotFast);
        }
        end_len(out, at);
        Ok(())
    }
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn put_key(out: &mut Vec<u8>, number: u32, wire_type: u8) {
    put_varint(out, (u64::from(number) << 3) | u64::from(wire_type));
}

/// Reserves one byte for a length and returns where the content starts.
fn begin_len(out: &mut Vec<u8>) -> usize {
    out.push(0);
    out.len()
}

/// Writes the length of the content since `start` (moving it when the length needs more
/// than one byte).
fn end_len(out: &mut Vec<u8>, start: usize) {
    let len = out.len() - start;
    if len < 0x80 {
        out[start - 1] = len as u8;
        return;
    }
    let mut prefix = Vec::with_capacity(10);
    put_varint(&mut prefix, len as u64);
    out.splice(start - 1..start, prefix);
}

/// Appends `leaf` = `value` (a scalar or enum, as parsed from a path variable) within its
/// `parents` (each a singular message field, outermost first), as a message of its own that
/// a decoder merges into what comes before it.
pub(crate) fn put_field_value(
    parents: &[FieldDescriptor],
    leaf: &FieldDescriptor,
    value: &prost_reflect::Value,
    out: &mut Vec<u8>,
) -> Result<(), NotFast> {
    use prost_reflect::Value as V;
    let mut starts = [0usize; 8];
    let starts = starts.get_mut(..parents.len()).ok_or(NotFast)?;
    for (p, start) in parents.iter().zip(starts.iter_mut()) {
        put_key(out, p.number(), WT_LEN);
        *start = begin_len(out);
    }
    let number = leaf.number();
    match (leaf.kind(), value) {
        (Kind::String, V::String(v)) => {
            put_key(out, number, WT_LEN);
            put_varint(out, v.len() as u64);
            out.extend_from_slice(v.as_bytes());
        }
        (Kind::Bytes, V::Bytes(v)) => {
            put_key(out, number, WT_LEN);
            put_varint(out, v.len() as u64);
            out.extend_from_slice(v);
        }
        (Kind::Enum(_), V::EnumNumber(n)) => {
            put_key(out, number, WT_VARINT);
            put_varint(out, *n as i64 as u64);
        }
        (kind, v) => {
            let s = Scalar::of(&kind).ok_or(NotFast)?;
            use Scalar as S;
            let num = match (s, v) {
                (S::Bool, V::Bool(v)) => Num::Bool(*v),
                (S::Int32 | S::Sint32 | S::Sfixed32, V::I32(v)) => Num::I32(*v),
                (S::Int64 | S::Sint64 | S::Sfixed64, V::I64(v)) => Num::I64(*v),
                (S::Uint32 | S::Fixed32, V::U32(v)) => Num::U32(*v),
                (S::Uint64 | S::Fixed64, V::U64(v)) => Num::U64(*v),
                (S::Float, V::F32(v)) => Num::F32(*v),
                (S::Double, V::F64(v)) => Num::F64(*v),
                _ => return Err(NotFast), // a value not of the field's type
            };
            put_key(out, number, s.wire_type());
            num.put(s, out);
        }
    }
    for &start in starts.iter().rev() {
        end_len(out, start);
    }
    Ok(())
}

/// A scalar as converted from JSON.
#[derive(Debug, Clone, Copy)]
enum Num {
    I32(i32),
    U32(u32),
    I64(i64),
    U64(u64),
    F32(f32),
    F64(f64),
    Bool(bool),
}

impl Num {
    fn is_default(self) -> bool {
        match self {
            Num::I32(v) => v == 0,
            Num::U32(v) => v == 0,
            Num::I64(v) => v == 0,
            Num::U64(v) => v == 0,
            Num::F32(v) => v == 0.0,
            Num::F64(v) => v == 0.0,
            Num::Bool(v) => !v,
        }
    }

    /// The value's bytes, as a field of type `s` (its wire type is `s.wire_type()`).
    fn put(self, s: Scalar, out: &mut Vec<u8>) {
        match (s, self) {
            (Scalar::Int32, Num::I32(v)) => put_varint(out, v as i64 as u64),
            (Scalar::Sint32, Num::I32(v)) => {
                put_varint(out, u64::from(((v << 1) ^ (v >> 31)) as u32))
            }
            (Scalar::Sfixed32, Num::I32(v)) => out.extend_from_slice(&v.to_le_bytes()),
            (Scalar::Uint32, Num::U32(v)) => put_varint(out, u64::from(v)),
            (Scalar::Fixed32, Num::U32(v)) => out.extend_from_slice(&v.to_le_bytes()),
            (Scalar::Int64, Num::I64(v)) => put_varint(out, v as u64),
            (Scalar::Sint64, Num::I64(v)) => put_varint(out, ((v << 1) ^ (v >> 63)) as u64),
            (Scalar::Sfixed64, Num::I64(v)) => out.extend_from_slice(&v.to_le_bytes()),
            (Scalar::Uint64, Num::U64(v)) => put_varint(out, v),
            (Scalar::Fixed64, Num::U64(v)) => out.extend_from_slice(&v.to_le_bytes()),
            (Scalar::Float, Num::F32(v)) => out.extend_from_slice(&v.to_le_bytes()),
            (Scalar::Double, Num::F64(v)) => out.extend_from_slice(&v.to_le_bytes()),
            (Scalar::Bool, Num::Bool(v)) => out.push(u8::from(v)),
            // An enum number.
            (_, Num::I32(v)) => put_varint(out, v as i64 as u64),
            _ => {}
        }
    }
}

fn not_fast<E: serde::de::Error>() -> E {
    E::custom("left to the reference")
}

/// Reads one JSON value of the field type `ty` and writes it, tagged with `number`: for a
/// singular field (`presence` false: a default is left out), a list element or a map
/// entry's key and value.
struct Put<'a> {
    enc: &'a RequestEncoder,
    ty: &'a Ty,
    number: u32,
    presence: bool,
    out: &'a mut Vec<u8>,
}

impl<'de> DeserializeSeed<'de> for Put<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        match self.ty {
            Ty::Scalar(Scalar::String) => d.deserialize_string(StrPut(self)),
            Ty::Scalar(Scalar::Bytes) => d.deserialize_str(StrPut(self)),
            Ty::Scalar(s) => {
                let s = *s;
                let v = d.deserialize_any(NumVisitor(s))?;
                if self.presence || !v.is_default() {
                    put_key(self.out, self.number, s.wire_type());
                    v.put(s, self.out);
                }
                Ok(())
            }
            Ty::Enum(e) => {
                let desc = self.enc.enumeration(*e).ok_or_else(not_fast)?;
                let v = d.deserialize_any(EnumVisitor(desc))?;
                if self.presence || v != 0 {
                    put_key(self.out, self.number, WT_VARINT);
                    Num::I32(v).put(Scalar::Int32, self.out);
                }
                Ok(())
            }
            ty => {
                put_key(self.out, self.number, WT_LEN);
                let at = begin_len(self.out);
                ValueSeed {
                    enc: self.enc,
                    ty,
                    out: &mut *self.out,
                }
                .deserialize(d)?;
                end_len(self.out, at);
                Ok(())
            }
        }
    }
}

/// A string or bytes field.
struct StrPut<'a>(Put<'a>);

impl Visitor<'_> for StrPut<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a string")
    }

    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<(), E> {
        let p = self.0;
        if matches!(p.ty, Ty::Scalar(Scalar::Bytes)) {
            let bytes = decode_base64(v).ok_or_else(not_fast)?;
            if p.presence || !bytes.is_empty() {
                put_key(p.out, p.number, WT_LEN);
                put_varint(p.out, bytes.len() as u64);
                p.out.extend_from_slice(&bytes);
            }
        } else if p.presence || !v.is_empty() {
            put_key(p.out, p.number, WT_LEN);
            put_varint(p.out, v.len() as u64);
            p.out.extend_from_slice(v.as_bytes());
        }
        Ok(())
    }
}

/// Bytes as prost-reflect reads them: standard base64, else URL-safe when the text has
/// `-` or `_`; padding optional, trailing bits allowed.
fn decode_base64(v: &str) -> Option<Vec<u8>> {
    const CONFIG: GeneralPurposeConfig = GeneralPurposeConfig::new()
        .with_decode_allow_trailing_bits(true)
        .with_decode_padding_mode(DecodePaddingMode::Indifferent);
    const STANDARD: GeneralPurpose = GeneralPurpose::new(&alphabet::STANDARD, CONFIG);
    const URL_SAFE: GeneralPurpose = GeneralPurpose::new(&alphabet::URL_SAFE, CONFIG);
    let mut buf = Vec::new();
    match STANDARD.decode_vec(v, &mut buf) {
        Ok(()) => Some(buf),
        Err(DecodeError::InvalidByte(_, b'-' | b'_')) => {
            buf.clear();
            URL_SAFE.decode_vec(v, &mut buf).ok().map(|()| buf)
        }
        Err(_) => None,
    }
}

/// A number or boolean of scalar type `s`, by the reference's conversions.
struct NumVisitor(Scalar);

impl NumVisitor {
    fn of_f64<E: serde::de::Error>(&self, v: f64) -> Result<Num, E> {
        let integral = |min: f64, max: f64| {
            if v.fract() != 0.0 || v < min || v > max {
                Err(not_fast::<E>())
            } else {
                Ok(v)
            }
        };
        Ok(match self.0 {
            Scalar::Double => Num::F64(v),
            Scalar::Float => {
                if v < f64::from(f32::MIN) || v > f64::from(f32::MAX) {
                    return Err(not_fast());
                }
                Num::F32(v as f32)
            }
            Scalar::Int32 | Scalar::Sint32 | Scalar::Sfixed32 => {
                Num::I32(integral(f64::from(i32::MIN), f64::from(i32::MAX))? as i32)
            }
            Scalar::Uint32 | Scalar::Fixed32 => {
                Num::U32(integral(0.0, f64::from(u32::MAX))? as u32)
            }
            Scalar::Int64 | Scalar::Sint64 | Scalar::Sfixed64 => {
                Num::I64(integral(i64::MIN as f64, i64::MAX as f64)? as i64)
            }
            Scalar::Uint64 | Scalar::Fixed64 => Num::U64(integral(0.0, u64::MAX as f64)? as u64),
            _ => return Err(not_fast()),
        })
    }

    fn of_i128<E: serde::de::Error>(&self, v: i128) -> Result<Num, E> {
        let e = |_| not_fast::<E>();
        Ok(match self.0 {
            Scalar::Double => Num::F64(if v < 0 {
                v as i64 as f64
            } else {
                v as u64 as f64
            }),
            Scalar::Float => Num::F32(if v < 0 {
                v as i64 as f32
            } else {
                v as u64 as f32
            }),
            Scalar::Int32 | Scalar::Sint32 | Scalar::Sfixed32 => {
                Num::I32(i32::try_from(v).map_err(e)?)
            }
            Scalar::Uint32 | Scalar::Fixed32 => Num::U32(u32::try_from(v).map_err(e)?),
            Scalar::Int64 | Scalar::Sint64 | Scalar::Sfixed64 => {
                Num::I64(i64::try_from(v).map_err(e)?)
            }
            Scalar::Uint64 | Scalar::Fixed64 => Num::U64(u64::try_from(v).map_err(e)?),
            _ => return Err(not_fast()),
        })
    }
}

impl Visitor<'_> for NumVisitor {
    type Value = Num;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a number")
    }

    fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<Num, E> {
        match self.0 {
            Scalar::Bool => Ok(Num::Bool(v)),
            _ => Err(not_fast()),
        }
    }

    fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Num, E> {
        self.of_i128(i128::from(v))
    }

    fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Num, E> {
        self.of_i128(i128::from(v))
    }

    fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Num, E> {
        self.of_f64(v)
    }

    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Num, E> {
        let e = |_| not_fast::<E>();
        let special = |v: &str| match v {
            "Infinity" => Some(f64::INFINITY),
            "-Infinity" => Some(f64::NEG_INFINITY),
            "NaN" => Some(f64::NAN),
            _ => None,
        };
        Ok(match self.0 {
            Scalar::Double => match f64::from_str(v) {
                Ok(x) => Num::F64(x),
                Err(_) => Num::F64(special(v).ok_or_else(not_fast)?),
            },
            Scalar::Float => match f32::from_str(v) {
                Ok(x) => Num::F32(x),
                Err(_) => Num::F32(special(v).ok_or_else(not_fast)? as f32),
            },
            Scalar::Int32 | Scalar::Sint32 | Scalar::Sfixed32 => Num::I32(integer(v).map_err(e)?),
            Scalar::Uint32 | Scalar::Fixed32 => Num::U32(integer(v).map_err(e)?),
            Scalar::Int64 | Scalar::Sint64 | Scalar::Sfixed64 => Num::I64(integer(v).map_err(e)?),
            Scalar::Uint64 | Scalar::Fixed64 => Num::U64(integer(v).map_err(e)?),
            _ => return Err(not_fast()),
        })
    }
}

/// An integer of type `T` in a string: in decimal, else in a float's form (`"1e2"`), as the
/// reference reads it (crate::proto_json::integral_text).
fn integer<T: FromStr + TryFrom<i128>>(text: &str) -> Result<T, ()> {
    text.parse().or_else(|_| {
        crate::proto_json::integral_text(text)
            .and_then(|n| T::try_from(n).ok())
            .ok_or(())
    })
}

/// An enum by name or number; an unknown name is the reference's (it drops the field).
struct EnumVisitor<'a>(&'a EnumDescriptor);

impl Visitor<'_> for EnumVisitor<'_> {
    type Value = i32;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an enum name or number")
    }

    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<i32, E> {
        self.0
            .get_value_by_name(v)
            .map(|v| v.number())
            .ok_or_else(not_fast)
    }

    fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<i32, E> {
        i32::try_from(v).map_err(|_| not_fast())
    }

    fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<i32, E> {
        i32::try_from(v).map_err(|_| not_fast())
    }
}

/// A message-typed value (its fields, without tag or length).
struct ValueSeed<'a> {
    enc: &'a RequestEncoder,
    ty: &'a Ty,
    out: &'a mut Vec<u8>,
}

impl<'de> DeserializeSeed<'de> for ValueSeed<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        match self.ty {
            Ty::Message(i) => d.deserialize_map(MessageVisitor {
                enc: self.enc,
                t: &self.enc.schema.types[*i],
                out: self.out,
            }),
            // prost-reflect reads the well-known types (their JSON forms are its own).
            Ty::Wkt(_, md) => {
                let options = DeserializeOptions::new().deny_unknown_fields(false);
                let m = DynamicMessage::deserialize_with_options(md.clone(), d, &options)?;
                m.encode(self.out).map_err(|_| not_fast())
            }
            Ty::Scalar(_) | Ty::Enum(_) => Err(not_fast()),
        }
    }
}

struct MessageVisitor<'a> {
    enc: &'a RequestEncoder,
    t: &'a Type,
    out: &'a mut Vec<u8>,
}

/// A JSON key, borrowed from the body when it has no escapes.
pub(crate) struct Key;

impl<'de> DeserializeSeed<'de> for Key {
    type Value = Cow<'de, str>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Cow<'de, str>, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for Key {
    type Value = Cow<'de, str>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a key")
    }

    fn visit_borrowed_str<E: serde::de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
        Ok(Cow::Borrowed(v))
    }

    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Self::Value, E> {
        Ok(Cow::Owned(v.to_owned()))
    }
}

impl<'de> Visitor<'de> for MessageVisitor<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let t = self.t;
        // Fields given a value so far, and oneofs.
        let mut seen = vec![
            false;
            if t.fields.len() > 128 {
                t.fields.len()
            } else {
                0
            }
        ];
        let mut seen_bits = 0u128;
        let mut oneofs = 0u64;
        while let Some(key) = map.next_key_seed(Key)? {
            let Some(&i) = t.by_name.get(key.as_ref()) else {
                if t.extended {
                    return Err(not_fast());
                }
                map.next_value::<IgnoredAny>()?;
                continue;
            };
            let f = &t.fields[i];
            let given = map.next_value_seed(FieldSeed {
                enc: self.enc,
                f,
                out: &mut *self.out,
            })?;
            if !given {
                continue; // null: left unset
            }
            let again = if seen.is_empty() {
                let bit = 1u128 << i;
                let again = seen_bits & bit != 0;
                seen_bits |= bit;
                again
            } else {
                std::mem::replace(&mut seen[i], true)
            };
            if again {
                return Err(not_fast()); // given twice: the reference keeps the last
            }
            if let Card::One { oneof: Some(o), .. } = f.card {
                let bit = 1u64.checked_shl(o).ok_or_else(not_fast)?;
                if oneofs & bit != 0 {
                    return Err(not_fast()); // the reference refuses it
                }
                oneofs |= bit;
            }
        }
        Ok(())
    }
}

/// One field's JSON value; answers whether it was given (not `null`).
struct FieldSeed<'a> {
    enc: &'a RequestEncoder,
    f: &'a Field,
    out: &'a mut Vec<u8>,
}

impl<'de> DeserializeSeed<'de> for FieldSeed<'_> {
    type Value = bool;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<bool, D::Error> {
        d.deserialize_option(self)
    }
}

impl<'de> Visitor<'de> for FieldSeed<'_> {
    type Value = bool;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a field value")
    }

    fn visit_none<E: serde::de::Error>(self) -> Result<bool, E> {
        if self.enc.null_is_a_value(&self.f.ty) {
            return Err(not_fast());
        }
        Ok(false)
    }

    fn visit_unit<E: serde::de::Error>(self) -> Result<bool, E> {
        self.visit_none()
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<bool, D::Error> {
        let f = self.f;
        match &f.card {
            Card::One { presence, .. } => Put {
                enc: self.enc,
                ty: &f.ty,
                number: f.number,
                presence: *presence,
                out: self.out,
            }
            .deserialize(d)?,
            Card::List { .. } => d.deserialize_seq(ListVisitor {
                enc: self.enc,
                f,
                out: self.out,
            })?,
            Card::Map { key, value } => d.deserialize_map(MapVisitor {
                enc: self.enc,
                number: f.number,
                key: *key,
                value,
                out: self.out,
            })?,
        }
        Ok(true)
    }
}

struct ListVisitor<'a> {
    enc: &'a RequestEncoder,
    f: &'a Field,
    out: &'a mut Vec<u8>,
}

impl<'de> Visitor<'de> for ListVisitor<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a list")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let f = self.f;
        let packed = match f.ty {
            _ if !matches!(f.card, Card::List { packed: true }) => None,
            Ty::Scalar(s) if s.wire_type() != WT_LEN => Some(s),
            Ty::Enum(_) => Some(Scalar::Int32), // enums are encoded as int32
            _ => None,
        };
        if let Some(s) = packed {
            // One length-delimited record of all the values.
            let start = self.out.len();
            put_key(self.out, f.number, WT_LEN);
            let at = begin_len(self.out);
            while let Some(v) = seq.next_element_seed(Packed {
                enc: self.enc,
                ty: &f.ty,
            })? {
                v.put(s, self.out);
            }
            if self.out.len() == at {
                self.out.truncate(start); // empty: no field
            } else {
                end_len(self.out, at);
            }
            return Ok(());
        }
        while let Some(()) = seq.next_element_seed(Put {
            enc: self.enc,
            ty: &f.ty,
            number: f.number,
            presence: true,
            out: &mut *self.out,
        })? {}
        Ok(())
    }
}

/// One value of a packed list.
struct Packed<'a> {
    enc: &'a RequestEncoder,
    ty: &'a Ty,
}

impl<'de> DeserializeSeed<'de> for Packed<'_> {
    type Value = Num;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Num, D::Error> {
        match self.ty {
            Ty::Scalar(s) => d.deserialize_any(NumVisitor(*s)),
            Ty::Enum(e) => {
                let desc = self.enc.enumeration(*e).ok_or_else(not_fast)?;
                d.deserialize_any(EnumVisitor(desc)).map(Num::I32)
            }
            _ => Err(not_fast()),
        }
    }
}

struct MapVisitor<'a> {
    enc: &'a RequestEncoder,
    number: u32,
    key: Scalar,
    value: &'a Ty,
    out: &'a mut Vec<u8>,
}

impl<'de> Visitor<'de> for MapVisitor<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a map")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(key) = map.next_key_seed(Key)? {
            put_key(self.out, self.number, WT_LEN);
            let at = begin_len(self.out);
            // The key, as the reference parses it.
            let k = key.as_ref();
            let e = |_| not_fast::<A::Error>();
            let num = match self.key {
                Scalar::String => {
                    put_key(self.out, 1, WT_LEN);
                    put_varint(self.out, k.len() as u64);
                    self.out.extend_from_slice(k.as_bytes());
                    None
                }
                Scalar::Int32 | Scalar::Sint32 | Scalar::Sfixed32 => {
                    Some(Num::I32(integer(k).map_err(e)?))
                }
                Scalar::Int64 | Scalar::Sint64 | Scalar::Sfixed64 => {
                    Some(Num::I64(integer(k).map_err(e)?))
                }
                Scalar::Uint32 | Scalar::Fixed32 => Some(Num::U32(integer(k).map_err(e)?)),
                Scalar::Uint64 | Scalar::Fixed64 => Some(Num::U64(integer(k).map_err(e)?)),
                Scalar::Bool => Some(Num::Bool(
                    bool::from_str(k).map_err(|_| not_fast::<A::Error>())?,
                )),
                _ => return Err(not_fast()),
            };
            if let Some(num) = num {
                put_key(self.out, 1, self.key.wire_type());
                num.put(self.key, self.out);
            }
            map.next_value_seed(Put {
                enc: self.enc,
                ty: self.value,
                number: 2,
                presence: true,
                out: &mut *self.out,
            })?;
            end_len(self.out, at);
        }
        Ok(())
    }
}

/// Reply writers and request encoders shared by the APIs of one descriptor pool whose
/// methods take or answer the same types.
#[derive(Debug, Default)]
pub struct JsonCodecs {
    replies: HashMap<String, Option<Arc<ReplyWriter>>>,
    requests: HashMap<String, Option<Arc<RequestEncoder>>>,
}

impl JsonCodecs {
    /// The writer of `md` replies, built on first use.
    pub fn reply(&mut self, md: &MessageDescriptor) -> Option<Arc<ReplyWriter>> {
        self.replies
            .entry(md.full_name().to_owned())
            .or_insert_with(|| ReplyWriter::new(md).map(Arc::new))
            .clone()
    }

    /// The encoder of `md` requests, built on first use.
    pub fn request(&mut self, md: &MessageDescriptor) -> Option<Arc<RequestEncoder>> {
        self.requests
            .entry(md.full_name().to_owned())
            .or_insert_with(|| RequestEncoder::new(md).map(Arc::new))
            .clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testgen::{every_scalar, everything, message, random_message, Rng, Seen};
    use serde_json::json;

    fn lossy(body: &[u8]) -> String {
        String::from_utf8_lossy(body).into_owned()
    }

    /// A message as a backend sees it, as JSON (`None`: the bytes do not decode).
    fn as_json(md: &MessageDescriptor, bytes: &[u8]) -> Option<serde_json::Value> {
        let m = DynamicMessage::decode(md.clone(), bytes).ok()?;
        serde_json::to_value(&m).ok()
    }

    /// The message the reference makes of `body`, encoded and read back.
    fn reference(md: &MessageDescriptor, body: &[u8]) -> Option<serde_json::Value> {
        let options = DeserializeOptions::new().deny_unknown_fields(false);
        let m = crate::proto_json::read_message(md, body, &options).ok()?;
        as_json(md, &m.encode_to_vec())
    }

    /// Encodes `body` in one pass; whenever the encoder takes it, the reference takes it
    /// too and the bytes decode to the message the reference makes. Returns whether the
    /// encoder took it.
    fn same_as_reference(md: &MessageDescriptor, body: &[u8]) -> bool {
        let encoder = RequestEncoder::new(md).expect("no groups");
        let mut out = b"pre".to_vec();
        if encoder.encode(body, &mut out).is_err() {
            assert_eq!(out, b"pre", "a refusal leaves the output as it was");
            return false;
        }
        let Some(expected) = reference(md, body) else {
            panic!(
                "the encoder took a body the reference refuses: {}",
                lossy(body)
            );
        };
        let Some(got) = as_json(md, &out[3..]) else {
            panic!(
                "the encoder wrote bytes that do not decode: {}",
                lossy(body)
            );
        };
        assert_eq!(got, expected, "body {}", lossy(body));
        true
    }

    #[test]
    fn bodies_in_every_form_the_reference_reads() {
        let md = everything();
        let cases = [
            json!({}),
            json!({"scalars": {}}),
            every_scalar(),
            // Numbers as strings, integral floats, specials, enums by number and alias.
            json!({"scalars": {"fInt32": "42", "fUint64": 1e3, "fDouble": "NaN", "fFloat": "-Infinity",
                   "fSint64": -5.0, "fEnum": 2, "fFixed32": "0", "fBool": false}}),
            json!({"scalars": {"fEnum": "CRIMSON", "fDouble": "1e-300", "fFloat": "3.5"}}),
            json!({"scalars": {"f_int32": 5, "f_string": "proto names"}}),
            // Integers in a float's form in a string (proto3 JSON; the reference rewrites them).
            json!({"scalars": {"fInt32": "1e2", "fUint64": "1e19", "fSint64": "-2.5e1",
                   "fFixed32": "7.0", "fString": "1e2"}, "ints": ["1e1", 2], "sints": ["-4E0"],
                   "colourById": {"1e1": "RED"}, "byLong": {"-2e0": {"fInt64": "3e0"}}}),
            // Defaults: left out (no presence) or kept (presence).
            json!({"scalars": {"fInt32": 0, "fString": "", "fBytes": "", "fEnum": "COLOUR_UNSPECIFIED", "fDouble": -0.0}}),
            json!({"maybeInt": 0, "maybeString": "", "maybeColour": 0}),
            json!({"choiceText": ""}),
            json!({"choiceNumber": "0"}),
            json!({"choiceMessage": {}}),
            json!({"choiceText": null, "choiceNumber": 7}),
            // Bytes in URL-safe base64 without padding.
            json!({"scalars": {"fBytes": "-_8"}}),
            json!({"ints": [0, -1, 2147483647, "3"], "sints": ["-1", 5], "doubles": [0.5, "Infinity"],
                   "fixeds": [1, 0], "flags": [true, false], "colours": ["RED", "BLUE", 9],
                   "names": ["", "a"], "blobs": ["", "/w=="], "children": [{}, {"fInt32": 3}]}),
            json!({"ints": [], "names": [], "children": []}),
            json!({"labels": {"": "", "b": "2", "a\"": "1"}, "colourById": {"-5": "RED", "0": 0},
                   "byLong": {"-9223372036854775808": {}, "1": {"fString": "x"}},
                   "byFlag": {"true": 0.0, "false": -2.5}, "times": {"7": "2026-01-01T00:00:00Z"},
                   "values": {"n": null, "s": "x", "l": [1], "o": {"a": 1}}}),
            json!({"next": {"next": {"scalars": {"fBool": true}, "ints": [1]}}}),
            json!({"at": "2026-01-02T03:04:05.120+02:00", "took": "-1.000000500s", "nothing": {},
                   "wDouble": 0, "wFloat": "1.25", "wInt64": "0", "wUint64": 5, "wInt32": -3,
                   "wUint32": 0, "wBool": false, "wString": "", "wBytes": "AQ=="}),
            json!({"attributes": {"b": [1, "x", null, true, {"z": {}}], "a": 1.5}, "anything": "text",
                   "list": [1, [2, [3]], {"x": false}]}),
            json!({"any": {"@type": "type.googleapis.com/portico.test.reply.Scalars", "fInt32": 1},
                   "mask": "aB,c.dE", "stamps": ["1970-01-01T00:00:00Z"]}),
            json!({"fieldWithAHighNumber": 5, "unknownKey": {"deep": [1, {"x": null}]}, "also": null}),
            json!({"scalars": null, "ints": null, "labels": null, "at": null}),
        ];
        for case in cases {
            let body = serde_json::to_vec(&case).unwrap();
            assert!(same_as_reference(&md, &body), "not taken: {case}");
        }
        // Escaped keys, a long string (a length over one byte), whitespace.
        let long = "x".repeat(300);
        for body in [
            r#"{"sc\u0061lars": {"fInt32": 1}}"#.to_owned(),
            format!(r#"{{"scalars": {{"fString": "{long}"}}, "names": ["{long}"]}}"#),
            " {\n \"maybeInt\" : 1 } \n".to_owned(),
        ] {
            assert!(same_as_reference(&md, body.as_bytes()), "not taken: {body}");
        }
    }

    #[test]
    fn decimals_reach_the_backend_exactly() {
        // Shortest texts of doubles that serde_json's default (fast) float parser reads a
        // ULP off; with its float_roundtrip feature both paths read them exactly.
        let md = everything();
        for text in [
            "9.335744933994957e-17",
            "-1.638344060600543e-227",
            "5.084767197776064e190",
            "2.6104882325689648e-130",
        ] {
            let want = f64::from_str(text).unwrap();
            let body = format!(r#"{{"scalars": {{"fDouble": {text}}}, "doubles": [{text}]}}"#);
            assert!(same_as_reference(&md, body.as_bytes()), "not taken: {body}");
            let mut out = Vec::new();
            RequestEncoder::new(&md)
                .unwrap()
                .encode(body.as_bytes(), &mut out)
                .unwrap();
            let m = DynamicMessage::decode(md.clone(), out.as_slice()).unwrap();
            let scalars = m.get_field_by_name("scalars").unwrap();
            let got = scalars.as_message().unwrap().get_field_by_name("f_double");
            assert_eq!(
                got.unwrap().as_f64().unwrap().to_bits(),
                want.to_bits(),
                "{text}"
            );
            let doubles = m.get_field_by_name("doubles").unwrap();
            let got = doubles.as_list().unwrap()[0].as_f64().unwrap();
            assert_eq!(got.to_bits(), want.to_bits(), "{text}");
        }
    }

    #[test]
    fn what_the_reference_reads_otherwise_or_refuses_is_left_to_it() {
        let md = everything();
        let left = [
            // Given twice, by one name or two (the reference keeps the last).
            r#"{"maybeInt": 1, "maybeInt": 2}"#,
            r#"{"scalars": {"fInt32": 1, "f_int32": 2}}"#,
            r#"{"ints": [1], "ints": [2]}"#,
            // Two members of one oneof (the reference refuses).
            r#"{"choiceText": "a", "choiceNumber": 1}"#,
            // An unknown enum name (the reference drops the field).
            r#"{"scalars": {"fEnum": "PURPLE"}}"#,
            r#"{"colours": ["RED", "PURPLE"]}"#,
            // null for a Value.
            r#"{"anything": null}"#,
            // Mistakes.
            r#"{"scalars": {"fInt32": 1.5}}"#,
            r#"{"scalars": {"fInt32": 2147483648}}"#,
            r#"{"scalars": {"fInt32": "abc"}}"#,
            r#"{"scalars": {"fInt32": "1.5e0"}}"#,
            r#"{"scalars": {"fInt32": "3e9"}}"#,
            r#"{"scalars": {"fUint64": "-1e0"}}"#,
            r#"{"ints": ["1e400"]}"#,
            r#"{"colourById": {"0.5": "RED"}}"#,
            r#"{"scalars": {"fBool": "true"}}"#,
            r#"{"scalars": {"fString": 5}}"#,
            r#"{"scalars": {"fBytes": "***"}}"#,
            r#"{"scalars": {"fFloat": 1e39}}"#,
            r#"{"ints": [1, null]}"#,
            r#"{"ints": 5}"#,
            r#"{"colourById": {"x": "RED"}}"#,
            r#"{"byFlag": {"yes": 1}}"#,
            r#"{"at": "yesterday"}"#,
            r#"[]"#,
            r#"{} trailing"#,
            r#"{"maybeInt": 1"#,
        ];
        for body in left {
            assert!(!same_as_reference(&md, body.as_bytes()), "taken: {body}");
        }
        // proto2 with an extension: unknown keys may name one.
        let legacy = message("portico.test.reply2.Legacy");
        assert!(same_as_reference(
            &legacy,
            br#"{"count": 0, "on": true, "packed": [1, 2], "unpacked": [3]}"#
        ));
        assert!(!same_as_reference(
            &legacy,
            br#"{"count": 1, "[portico.test.reply2.note]": "n"}"#
        ));
        assert!(RequestEncoder::new(&message("portico.test.reply2.WithGroup")).is_none());
    }

    /// Rewrites a JSON value the ways a client may write the same thing (and some it may
    /// not): numbers as strings, strings of digits as numbers, camelCase keys in
    /// snake_case, unknown keys, nulls.
    fn perturb(rng: &mut Rng, v: &mut serde_json::Value) {
        match v {
            serde_json::Value::Object(map) => {
                let entries: Vec<(String, serde_json::Value)> =
                    std::mem::take(map).into_iter().collect();
                for (k, mut value) in entries {
                    perturb(rng, &mut value);
                    let k = if rng.chance(20) {
                        let mut snake = String::new();
                        for c in k.chars() {
                            if c.is_ascii_uppercase() {
                                snake.push('_');
                                snake.push(c.to_ascii_lowercase());
                            } else {
                                snake.push(c);
                            }
                        }
                        snake
                    } else {
                        k
                    };
                    if rng.chance(5) {
                        value = serde_json::Value::Null;
                    }
                    map.insert(k, value);
                }
                if rng.chance(10) {
                    map.insert("notAField".into(), json!({"x": [1, null]}));
                }
            }
            serde_json::Value::Array(items) => items.iter_mut().for_each(|i| perturb(rng, i)),
            serde_json::Value::Number(n) if rng.chance(20) => *v = json!(n.to_string()),
            serde_json::Value::String(s) if rng.chance(20) => {
                if let Ok(n) = s.parse::<i64>() {
                    *v = json!(n);
                }
            }
            _ => {}
        }
    }

    #[test]
    fn random_bodies_encode_to_the_message_the_reference_makes() {
        let mut rng = Rng(0x0123_4567_89ab_cdef);
        let md = everything();
        let (mut taken, mut plain) = (0, 0);
        for round in 0..3000 {
            let mut seen = Seen::default();
            let m = random_message(&mut rng, &md, 0, &mut seen);
            let mut value = serde_json::to_value(&m).unwrap();
            if round % 2 == 1 {
                perturb(&mut rng, &mut value);
            }
            let body = serde_json::to_vec(&value).unwrap();
            if same_as_reference(&md, &body) {
                taken += 1;
            } else if round % 2 == 0 {
                // As the reference writes it, a body is taken unless it holds a null
                // (a google.protobuf.Value's).
                assert!(
                    body.windows(4).any(|w| w == b"null"),
                    "not taken: {}",
                    lossy(&body)
                );
            }
            plain += usize::from(round % 2 == 0);
            // Bytes mutated: whatever is taken means what the reference reads.
            let mut mutated = body.clone();
            let at = rng.below(mutated.len() as u64) as usize;
            mutated[at] = rng.pick(b"\"{}0-e,n[1.");
            same_as_reference(&md, &mutated);
        }
        assert!(
            taken >= plain * 8 / 10,
            "taken {taken} of {plain} plain + perturbed"
        );
    }
}
