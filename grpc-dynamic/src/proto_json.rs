//! The reference JSON of a [`DynamicMessage`]: prost-reflect's serde mapping, written and
//! read by serde_json, with corrections to match proto3's JSON mapping (protobuf's own
//! `json_format`, which `tests/json_conformance.rs` holds the gateway to).
//!
//! - prost-reflect writes a non-finite `double`/`float` *field* as `"NaN"`, `"Infinity"` or
//!   `"-Infinity"`, but hands the value of a `google.protobuf.DoubleValue`/`FloatValue` to the
//!   serializer as a number, which serde_json writes as `null` (indistinguishable from an
//!   unset wrapper). [`Finite`] sits between them and writes every non-finite number as that
//!   string instead, at any depth; everything else passes through unchanged.
//! - prost-reflect writes an `Any` holding a `google.protobuf.Empty` as
//!   `{"@type": ..., "value": {}}`, Empty being on its list of types with a JSON form of their
//!   own; protobuf's writers give Empty none (it is a message with no fields), so its fields
//!   stand beside `"@type"`: `{"@type": ...}`. [`write_message`] drops that `"value"` (by a
//!   walk over the written text, guided by the descriptors, run only when the text names
//!   Empty). The other well-known types keep their `"value"`, as protobuf writes them.
//! - prost-reflect reads neither that `{"@type": ...}` (it wants the `"value"`) nor an
//!   integer written in a float's form inside a string (`"1e2"`, `"100.0"`; proto3 JSON
//!   takes it, as the JSON number `1e2` already is, when integral and in range).
//!   [`read_message`] reads a body as prost-reflect does and, only when that fails, once more
//!   with those forms rewritten into ones it reads (`"value": {}` added, `"100"`), by the same
//!   kind of walk over the body's text, which keeps everything else as it was (order and
//!   repeated keys included).

use crate::request_json::Key;
use crate::schema::{Scalar, Wkt};
use prost_reflect::{
    DeserializeOptions, DynamicMessage, FieldDescriptor, Kind, MessageDescriptor,
    ReflectMessage as _, SerializeOptions,
};
use serde::de::{Deserializer as _, MapAccess, Visitor};
use serde::ser::{
    Serialize, SerializeMap, SerializeSeq, SerializeStruct, SerializeStructVariant, SerializeTuple,
    SerializeTupleStruct, SerializeTupleVariant, Serializer,
};
use serde_json::value::RawValue;
use std::borrow::Cow;
use std::fmt;
use std::str::FromStr;

/// Appends `message` as proto3 JSON to `out` (see the module docs).
pub fn write_message(
    message: &DynamicMessage,
    options: &SerializeOptions,
    out: &mut Vec<u8>,
) -> Result<(), serde_json::Error> {
    let start = out.len();
    let mut ser = serde_json::Serializer::new(&mut *out);
    message.serialize_with_options(Finite(&mut ser), options)?;
    // An Any holding an Empty, as prost-reflect writes its type URL (a JSON string, which
    // escapes none of these characters).
    const EMPTY: &[u8] = b"/google.protobuf.Empty\"";
    if out[start..].windows(EMPTY.len()).any(|w| w == EMPTY) {
        let written = out.split_off(start);
        let raw: &RawValue = serde_json::from_slice(&written)?;
        Walk::new(Fix::Reply, out).message(&message.descriptor(), raw);
    }
    Ok(())
}

/// Reads `body` (JSON) as a `desc` message: as prost-reflect reads it, else (only when that
/// fails) with the forms it does not read rewritten (see the module docs). The error is the
/// first reading's.
pub fn read_message(
    desc: &MessageDescriptor,
    body: &[u8],
    options: &DeserializeOptions,
) -> Result<DynamicMessage, serde_json::Error> {
    let first = read_as_is(desc, body, options);
    let Err(e) = first else { return first };
    match corrected_request(desc, body) {
        Some(fixed) => read_as_is(desc, &fixed, options).map_err(|_| e),
        None => Err(e),
    }
}

fn read_as_is(
    desc: &MessageDescriptor,
    body: &[u8],
    options: &DeserializeOptions,
) -> Result<DynamicMessage, serde_json::Error> {
    let mut de = serde_json::Deserializer::from_slice(body);
    let m = DynamicMessage::deserialize_with_options(desc.clone(), &mut de, options)?;
    de.end()?;
    Ok(m)
}

/// `body` (JSON meant as a `desc` message) with proto3 JSON's forms that prost-reflect does
/// not read rewritten into ones it reads (see the module docs); `None` when there are none
/// (or it is not JSON).
pub(crate) fn corrected_request(desc: &MessageDescriptor, body: &[u8]) -> Option<Vec<u8>> {
    let raw: &RawValue = serde_json::from_slice(body).ok()?;
    let mut out = Vec::with_capacity(body.len() + 16);
    let mut walk = Walk::new(Fix::Request, &mut out);
    walk.message(desc, raw);
    walk.changed.then_some(out)
}

/// [`corrected_request`] of `body` meant as the value of field `fd`.
pub(crate) fn corrected_field(fd: &FieldDescriptor, body: &[u8]) -> Option<Vec<u8>> {
    let raw: &RawValue = serde_json::from_slice(body).ok()?;
    let mut out = Vec::with_capacity(body.len() + 16);
    let mut walk = Walk::new(Fix::Request, &mut out);
    walk.field(fd, raw);
    walk.changed.then_some(out)
}

/// The integer that `text` holds in a float's form (`"1e2"`, `"100.0"`, `"-5E0"`), as
/// proto3 JSON reads it: as the double it is (what `json_format` does, and what the JSON
/// number `1e2` is read as), when that is integral; the caller checks the range.
pub(crate) fn integral_text(text: &str) -> Option<i128> {
    let v = f64::from_str(text).ok()?;
    // Beyond ±2^64 no integer field holds it (and `as` would saturate).
    (v.is_finite() && v.fract() == 0.0 && v.abs() < 18_446_744_073_709_551_616.0)
        .then_some(v as i128)
}

/// The decimal text of the integer of type `s` that `text` holds in a float's form, when it
/// is not already a decimal integer of that type ([`integral_text`]) and is in range.
fn integer_in_decimal(s: Scalar, text: &str) -> Option<String> {
    let fits = |n: i128| match s {
        Scalar::Int32 | Scalar::Sint32 | Scalar::Sfixed32 => i32::try_from(n).is_ok(),
        Scalar::Uint32 | Scalar::Fixed32 => u32::try_from(n).is_ok(),
        Scalar::Int64 | Scalar::Sint64 | Scalar::Sfixed64 => i64::try_from(n).is_ok(),
        Scalar::Uint64 | Scalar::Fixed64 => u64::try_from(n).is_ok(),
        _ => false,
    };
    if text.parse::<i128>().is_ok_and(fits) {
        return None; // read as it is
    }
    integral_text(text)
        .filter(|&n| fits(n))
        .map(|n| n.to_string())
}

/// What a [`Walk`] rewrites.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fix {
    /// prost-reflect's JSON of a reply: an `Any` holding an Empty loses its `"value": {}`.
    Reply,
    /// A request body for prost-reflect: an `Any` holding an Empty gets the `"value": {}` it
    /// wants (any other `"value"` is an unknown field of Empty, ignored), integers in a
    /// float's form (in a string) become decimal strings.
    Request,
}

/// A walk over JSON text, guided by the descriptors, that copies it to `out` with the
/// [`Fix`]es made: what it does not change (a scalar, a well-known type, anything not of
/// the expected shape) is copied as written.
struct Walk<'o> {
    fix: Fix,
    out: &'o mut Vec<u8>,
    changed: bool,
}

/// A JSON object's members in order (keys repeated as they are).
type Members<'a> = Vec<(Cow<'a, str>, &'a RawValue)>;

fn members(raw: &RawValue) -> Option<Members<'_>> {
    struct V;
    impl<'de> Visitor<'de> for V {
        type Value = Members<'de>;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("an object")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Members<'de>, A::Error> {
            let mut members = Vec::new();
            while let Some(key) = map.next_key_seed(Key)? {
                members.push((key, map.next_value::<&'de RawValue>()?));
            }
            Ok(members)
        }
    }
    serde_json::Deserializer::from_str(raw.get())
        .deserialize_map(V)
        .ok()
}

fn elements(raw: &RawValue) -> Option<Vec<&RawValue>> {
    serde_json::from_str(raw.get()).ok()
}

fn is_null(raw: &RawValue) -> bool {
    raw.get() == "null"
}

impl<'o> Walk<'o> {
    fn new(fix: Fix, out: &'o mut Vec<u8>) -> Self {
        Walk {
            fix,
            out,
            changed: false,
        }
    }

    fn copy(&mut self, raw: &RawValue) {
        self.out.extend_from_slice(raw.get().as_bytes());
    }

    fn string(&mut self, s: &str) {
        // A JSON string of a `str` cannot fail to write.
        let _ = serde_json::to_writer(&mut *self.out, s);
    }

    /// `"key":` after a comma unless it is the first member.
    fn key(&mut self, first: &mut bool, key: &str) {
        if !std::mem::take(first) {
            self.out.push(b',');
        }
        self.string(key);
        self.out.push(b':');
    }

    /// A value of message type `md`.
    fn message(&mut self, md: &MessageDescriptor, raw: &RawValue) {
        match Wkt::of(md.full_name()) {
            Some(Wkt::Any) => self.any(md, raw),
            Some(Wkt::Wrapper(s)) => self.scalar(s, raw),
            Some(_) => self.copy(raw),
            None => match members(raw) {
                Some(members) => self.fields(md, &members),
                None => self.copy(raw),
            },
        }
    }

    /// The members of a `md` message, as an object.
    fn fields(&mut self, md: &MessageDescriptor, members: &Members<'_>) {
        self.out.push(b'{');
        let mut first = true;
        for (key, value) in members {
            self.key(&mut first, key);
            let fd = md
                .get_field_by_json_name(key)
                .or_else(|| md.get_field_by_name(key));
            match fd {
                Some(fd) => self.field(&fd, value),
                None => self.copy(value),
            }
        }
        self.out.push(b'}');
    }

    fn any(&mut self, md: &MessageDescriptor, raw: &RawValue) {
        let Some(entries) = members(raw) else {
            return self.copy(raw);
        };
        // The first "@type" (the one prost-reflect reads).
        let inner = entries
            .iter()
            .find(|(k, _)| k == "@type")
            .and_then(|(_, v)| serde_json::from_str::<Cow<'_, str>>(v.get()).ok())
            .and_then(|url| {
                let name = url.rsplit('/').next().unwrap_or_default();
                md.parent_pool().get_message_by_name(name)
            });
        let Some(inner) = inner else {
            return self.copy(raw);
        };
        if Wkt::of(inner.full_name()) == Some(Wkt::Empty) {
            let mut values = entries.iter().filter(|(k, _)| k == "value");
            let as_wanted = match self.fix {
                Fix::Reply => values.next().is_none(),
                Fix::Request => {
                    values
                        .next()
                        .is_some_and(|(_, v)| members(v).is_some_and(|m| m.is_empty()))
                        && values.next().is_none()
                }
            };
            if as_wanted {
                return self.copy(raw);
            }
            self.changed = true;
        }
        self.out.push(b'{');
        let mut first = true;
        match Wkt::of(inner.full_name()) {
            Some(Wkt::Empty) => {
                for (key, value) in entries.iter().filter(|(k, _)| k != "value") {
                    self.key(&mut first, key);
                    self.copy(value);
                }
                if self.fix == Fix::Request {
                    self.key(&mut first, "value");
                    self.out.extend_from_slice(b"{}");
                }
            }
            Some(_) => {
                for (key, value) in &entries {
                    self.key(&mut first, key);
                    if key == "value" && !is_null(value) {
                        self.message(&inner, value);
                    } else {
                        self.copy(value);
                    }
                }
            }
            None => {
                for (key, value) in &entries {
                    self.key(&mut first, key);
                    let fd = inner
                        .get_field_by_json_name(key)
                        .or_else(|| inner.get_field_by_name(key));
                    match fd {
                        Some(fd) if key != "@type" => self.field(&fd, value),
                        _ => self.copy(value),
                    }
                }
            }
        }
        self.out.push(b'}');
    }

    /// The value of field `fd` (a list, a map or one value).
    fn field(&mut self, fd: &FieldDescriptor, raw: &RawValue) {
        if is_null(raw) {
            return self.copy(raw);
        }
        if fd.is_map() {
            let (Kind::Message(entry), Some(members)) = (fd.kind(), members(raw)) else {
                return self.copy(raw);
            };
            let key_kind = Scalar::of(&entry.map_entry_key_field().kind());
            let value_kind = entry.map_entry_value_field().kind();
            self.out.push(b'{');
            let mut first = true;
            for (key, value) in &members {
                let key = match (self.fix, key_kind) {
                    (Fix::Request, Some(s)) => match integer_in_decimal(s, key) {
                        Some(decimal) => {
                            self.changed = true;
                            Cow::Owned(decimal)
                        }
                        None => Cow::Borrowed(key.as_ref()),
                    },
                    _ => Cow::Borrowed(key.as_ref()),
                };
                self.key(&mut first, &key);
                self.value(&value_kind, value);
            }
            self.out.push(b'}');
        } else if fd.is_list() {
            let Some(items) = elements(raw) else {
                return self.copy(raw);
            };
            let kind = fd.kind();
            self.out.push(b'[');
            for (i, item) in items.into_iter().enumerate() {
                if i > 0 {
                    self.out.push(b',');
                }
                self.value(&kind, item);
            }
            self.out.push(b']');
        } else {
            self.value(&fd.kind(), raw);
        }
    }

    /// One value (not a list or a map) of type `kind`.
    fn value(&mut self, kind: &Kind, raw: &RawValue) {
        match kind {
            _ if is_null(raw) => self.copy(raw),
            Kind::Message(md) => self.message(md, raw),
            kind => match Scalar::of(kind) {
                Some(s) => self.scalar(s, raw),
                None => self.copy(raw),
            },
        }
    }

    /// A scalar of type `s`: an integer in a float's form in a string, in decimal.
    fn scalar(&mut self, s: Scalar, raw: &RawValue) {
        if self.fix == Fix::Request && raw.get().starts_with('"') {
            let decimal = serde_json::from_str::<Cow<'_, str>>(raw.get())
                .ok()
                .and_then(|text| integer_in_decimal(s, &text));
            if let Some(decimal) = decimal {
                self.changed = true;
                return self.string(&decimal);
            }
        }
        self.copy(raw)
    }
}

/// proto3 JSON's text of a non-finite number.
pub(crate) fn non_finite(v: f64) -> &'static str {
    if v.is_nan() {
        "NaN"
    } else if v > 0.0 {
        "Infinity"
    } else {
        "-Infinity"
    }
}

/// A serializer (or one of its compound parts) that writes non-finite numbers as proto3
/// JSON's strings; see the module docs.
pub struct Finite<S>(pub S);

/// A value serialized through [`Finite`].
struct Value<'a, T: ?Sized>(&'a T);

impl<T: ?Sized + Serialize> Serialize for Value<'_, T> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(Finite(serializer))
    }
}

impl<S: Serializer> Serializer for Finite<S> {
    type Ok = S::Ok;
    type Error = S::Error;
    type SerializeSeq = Finite<S::SerializeSeq>;
    type SerializeTuple = Finite<S::SerializeTuple>;
    type SerializeTupleStruct = Finite<S::SerializeTupleStruct>;
    type SerializeTupleVariant = Finite<S::SerializeTupleVariant>;
    type SerializeMap = Finite<S::SerializeMap>;
    type SerializeStruct = Finite<S::SerializeStruct>;
    type SerializeStructVariant = Finite<S::SerializeStructVariant>;

    fn serialize_f32(self, v: f32) -> Result<S::Ok, S::Error> {
        if v.is_finite() {
            self.0.serialize_f32(v)
        } else {
            self.0.serialize_str(non_finite(f64::from(v)))
        }
    }

    fn serialize_f64(self, v: f64) -> Result<S::Ok, S::Error> {
        if v.is_finite() {
            self.0.serialize_f64(v)
        } else {
            self.0.serialize_str(non_finite(v))
        }
    }

    fn serialize_bool(self, v: bool) -> Result<S::Ok, S::Error> {
        self.0.serialize_bool(v)
    }
    fn serialize_i8(self, v: i8) -> Result<S::Ok, S::Error> {
        self.0.serialize_i8(v)
    }
    fn serialize_i16(self, v: i16) -> Result<S::Ok, S::Error> {
        self.0.serialize_i16(v)
    }
    fn serialize_i32(self, v: i32) -> Result<S::Ok, S::Error> {
        self.0.serialize_i32(v)
    }
    fn serialize_i64(self, v: i64) -> Result<S::Ok, S::Error> {
        self.0.serialize_i64(v)
    }
    fn serialize_i128(self, v: i128) -> Result<S::Ok, S::Error> {
        self.0.serialize_i128(v)
    }
    fn serialize_u8(self, v: u8) -> Result<S::Ok, S::Error> {
        self.0.serialize_u8(v)
    }
    fn serialize_u16(self, v: u16) -> Result<S::Ok, S::Error> {
        self.0.serialize_u16(v)
    }
    fn serialize_u32(self, v: u32) -> Result<S::Ok, S::Error> {
        self.0.serialize_u32(v)
    }
    fn serialize_u64(self, v: u64) -> Result<S::Ok, S::Error> {
        self.0.serialize_u64(v)
    }
    fn serialize_u128(self, v: u128) -> Result<S::Ok, S::Error> {
        self.0.serialize_u128(v)
    }
    fn serialize_char(self, v: char) -> Result<S::Ok, S::Error> {
        self.0.serialize_char(v)
    }
    fn serialize_str(self, v: &str) -> Result<S::Ok, S::Error> {
        self.0.serialize_str(v)
    }
    fn serialize_bytes(self, v: &[u8]) -> Result<S::Ok, S::Error> {
        self.0.serialize_bytes(v)
    }
    fn serialize_none(self) -> Result<S::Ok, S::Error> {
        self.0.serialize_none()
    }
    fn serialize_some<T: ?Sized + Serialize>(self, value: &T) -> Result<S::Ok, S::Error> {
        self.0.serialize_some(&Value(value))
    }
    fn serialize_unit(self) -> Result<S::Ok, S::Error> {
        self.0.serialize_unit()
    }
    fn serialize_unit_struct(self, name: &'static str) -> Result<S::Ok, S::Error> {
        self.0.serialize_unit_struct(name)
    }
    fn serialize_unit_variant(
        self,
        name: &'static str,
        index: u32,
        variant: &'static str,
    ) -> Result<S::Ok, S::Error> {
        self.0.serialize_unit_variant(name, index, variant)
    }
    fn serialize_newtype_struct<T: ?Sized + Serialize>(
        self,
        name: &'static str,
        value: &T,
    ) -> Result<S::Ok, S::Error> {
        self.0.serialize_newtype_struct(name, &Value(value))
    }
    fn serialize_newtype_variant<T: ?Sized + Serialize>(
        self,
        name: &'static str,
        index: u32,
        variant: &'static str,
        value: &T,
    ) -> Result<S::Ok, S::Error> {
        self.0
            .serialize_newtype_variant(name, index, variant, &Value(value))
    }
    fn serialize_seq(self, len: Option<usize>) -> Result<Self::SerializeSeq, S::Error> {
        self.0.serialize_seq(len).map(Finite)
    }
    fn serialize_tuple(self, len: usize) -> Result<Self::SerializeTuple, S::Error> {
        self.0.serialize_tuple(len).map(Finite)
    }
    fn serialize_tuple_struct(
        self,
        name: &'static str,
        len: usize,
    ) -> Result<Self::SerializeTupleStruct, S::Error> {
        self.0.serialize_tuple_struct(name, len).map(Finite)
    }
    fn serialize_tuple_variant(
        self,
        name: &'static str,
        index: u32,
        variant: &'static str,
        len: usize,
    ) -> Result<Self::SerializeTupleVariant, S::Error> {
        self.0
            .serialize_tuple_variant(name, index, variant, len)
            .map(Finite)
    }
    fn serialize_map(self, len: Option<usize>) -> Result<Self::SerializeMap, S::Error> {
        self.0.serialize_map(len).map(Finite)
    }
    fn serialize_struct(
        self,
        name: &'static str,
        len: usize,
    ) -> Result<Self::SerializeStruct, S::Error> {
        self.0.serialize_struct(name, len).map(Finite)
    }
    fn serialize_struct_variant(
        self,
        name: &'static str,
        index: u32,
        variant: &'static str,
        len: usize,
    ) -> Result<Self::SerializeStructVariant, S::Error> {
        self.0
            .serialize_struct_variant(name, index, variant, len)
            .map(Finite)
    }
    fn is_human_readable(&self) -> bool {
        self.0.is_human_readable()
    }
}

impl<S: SerializeSeq> SerializeSeq for Finite<S> {
    type Ok = S::Ok;
    type Error = S::Error;
    fn serialize_element<T: ?Sized + Serialize>(&mut self, value: &T) -> Result<(), S::Error> {
        self.0.serialize_element(&Value(value))
    }
    fn end(self) -> Result<S::Ok, S::Error> {
        self.0.end()
    }
}

impl<S: SerializeTuple> SerializeTuple for Finite<S> {
    type Ok = S::Ok;
    type Error = S::Error;
    fn serialize_element<T: ?Sized + Serialize>(&mut self, value: &T) -> Result<(), S::Error> {
        self.0.serialize_element(&Value(value))
    }
    fn end(self) -> Result<S::Ok, S::Error> {
        self.0.end()
    }
}

impl<S: SerializeTupleStruct> SerializeTupleStruct for Finite<S> {
    type Ok = S::Ok;
    type Error = S::Error;
    fn serialize_field<T: ?Sized + Serialize>(&mut self, value: &T) -> Result<(), S::Error> {
        self.0.serialize_field(&Value(value))
    }
    fn end(self) -> Result<S::Ok, S::Error> {
        self.0.end()
    }
}

impl<S: SerializeTupleVariant> SerializeTupleVariant for Finite<S> {
    type Ok = S::Ok;
    type Error = S::Error;
    fn serialize_field<T: ?Sized + Serialize>(&mut self, value: &T) -> Result<(), S::Error> {
        self.0.serialize_field(&Value(value))
    }
    fn end(self) -> Result<S::Ok, S::Error> {
        self.0.end()
    }
}

impl<S: SerializeMap> SerializeMap for Finite<S> {
    type Ok = S::Ok;
    type Error = S::Error;
    fn serialize_key<T: ?Sized + Serialize>(&mut self, key: &T) -> Result<(), S::Error> {
        self.0.serialize_key(&Value(key))
    }
    fn serialize_value<T: ?Sized + Serialize>(&mut self, value: &T) -> Result<(), S::Error> {
        self.0.serialize_value(&Value(value))
    }
    fn end(self) -> Result<S::Ok, S::Error> {
        self.0.end()
    }
}

impl<S: SerializeStruct> SerializeStruct for Finite<S> {
    type Ok = S::Ok;
    type Error = S::Error;
    fn serialize_field<T: ?Sized + Serialize>(
        &mut self,
        key: &'static str,
        value: &T,
    ) -> Result<(), S::Error> {
        self.0.serialize_field(key, &Value(value))
    }
    fn skip_field(&mut self, key: &'static str) -> Result<(), S::Error> {
        self.0.skip_field(key)
    }
    fn end(self) -> Result<S::Ok, S::Error> {
        self.0.end()
    }
}

impl<S: SerializeStructVariant> SerializeStructVariant for Finite<S> {
    type Ok = S::Ok;
    type Error = S::Error;
    fn serialize_field<T: ?Sized + Serialize>(
        &mut self,
        key: &'static str,
        value: &T,
    ) -> Result<(), S::Error> {
        self.0.serialize_field(key, &Value(value))
    }
    fn skip_field(&mut self, key: &'static str) -> Result<(), S::Error> {
        self.0.skip_field(key)
    }
    fn end(self) -> Result<S::Ok, S::Error> {
        self.0.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testgen::everything;
    use serde_json::json;

    const EMPTY: &str = "type.googleapis.com/google.protobuf.Empty";
    const ANY: &str = "type.googleapis.com/google.protobuf.Any";
    const EVERYTHING: &str = "type.googleapis.com/portico.test.reply.Everything";

    /// A message as prost-reflect reads it (an Any holding Empty with its `"value": {}`).
    fn prost(v: serde_json::Value) -> DynamicMessage {
        DynamicMessage::deserialize(everything(), v).unwrap()
    }

    fn written(m: &DynamicMessage) -> String {
        let mut out = b"pre".to_vec();
        write_message(m, &SerializeOptions::new(), &mut out).unwrap();
        assert!(out.starts_with(b"pre"));
        String::from_utf8(out.split_off(3)).unwrap()
    }

    /// `body` read by [`read_message`], as prost-reflect's JSON (a recursive message's
    /// Debug would not do for a failure report).
    fn read(body: &serde_json::Value) -> Result<serde_json::Value, serde_json::Error> {
        let options = DeserializeOptions::new().deny_unknown_fields(false);
        read_message(&everything(), body.to_string().as_bytes(), &options)
            .map(|m| serde_json::to_value(&m).unwrap())
    }

    fn as_json(m: &DynamicMessage) -> serde_json::Value {
        serde_json::to_value(m).unwrap()
    }

    #[test]
    fn an_any_holding_empty_is_written_without_a_value() {
        // At the top, and inside a message inside an Any, inside an Any.
        let m = prost(json!({
            "scalars": {"fString": "/google.protobuf.Empty\""},
            "any": {"@type": EMPTY, "value": {}},
            "next": {"any": {"@type": EVERYTHING, "scalars": {"fInt32": 1},
                "any": {"@type": ANY, "value": {"@type": EMPTY, "value": {}}}}},
            "fieldWithAHighNumber": 5
        }));
        let text = written(&m);
        // prost-reflect's text, in its order, but for the two values.
        let theirs = serde_json::to_string(&m).unwrap();
        let with = format!(r#""@type":"{EMPTY}","value":{{}}"#);
        assert_eq!(theirs.matches(&with).count(), 2, "{theirs}");
        assert_eq!(
            text,
            theirs.replace(&with, &format!(r#""@type":"{EMPTY}""#))
        );
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["any"], json!({"@type": EMPTY}));
        assert_eq!(
            v["next"]["any"]["any"],
            json!({"@type": ANY, "value": {"@type": EMPTY}})
        );
        // And it reads back as the same message.
        assert_eq!(read(&v).unwrap(), as_json(&m));
    }

    #[test]
    fn other_well_known_types_in_an_any_keep_their_value() {
        for (ty, value) in [
            ("google.protobuf.Struct", json!({})),
            (
                "google.protobuf.Struct",
                json!({"@type": EMPTY, "value": {}}),
            ),
            ("google.protobuf.ListValue", json!([])),
            ("google.protobuf.Duration", json!("1.500s")),
            ("google.protobuf.Timestamp", json!("1970-01-01T00:00:00Z")),
            ("google.protobuf.Int64Value", json!("5")),
            ("google.protobuf.DoubleValue", json!(0.5)),
            ("google.protobuf.FieldMask", json!("a.b")),
            (
                "google.protobuf.Any",
                json!({"@type": ANY, "value": {"@type": EVERYTHING}}),
            ),
        ] {
            let any = json!({"@type": format!("type.googleapis.com/{ty}"), "value": value});
            let m = prost(json!({"any": any}));
            let text = written(&m);
            assert_eq!(text, serde_json::to_string(&m).unwrap());
            assert_eq!(
                serde_json::from_str::<serde_json::Value>(&text).unwrap()["any"],
                any
            );
        }
    }

    #[test]
    fn a_struct_that_looks_like_an_any_of_empty_is_data() {
        // Written as it is, also when an Any of Empty beside it has the text walked.
        let data = json!({"@type": EMPTY, "value": {}});
        let m = prost(json!({
            "attributes": data, "anything": data, "values": {"k": data},
            "any": {"@type": EMPTY, "value": {}}
        }));
        let v: serde_json::Value = serde_json::from_str(&written(&m)).unwrap();
        assert_eq!(
            v,
            json!({"attributes": data, "anything": data, "values": {"k": data},
                   "any": {"@type": EMPTY}})
        );
        assert_eq!(read(&v).unwrap(), as_json(&m));
    }

    #[test]
    fn an_any_holding_empty_is_read_with_or_without_a_value() {
        let want = prost(json!({"any": {"@type": EMPTY, "value": {}}}));
        for any in [
            json!({"@type": EMPTY}),
            json!({"@type": EMPTY, "value": {}}),
            // Any other member is an unknown field of Empty: ignored.
            json!({"value": {"x": 1}, "@type": EMPTY, "other": [2]}),
        ] {
            assert_eq!(read(&json!({"any": any})).unwrap(), as_json(&want), "{any}");
        }
        assert!(read(&json!({"any": {"@type": "type.googleapis.com/no.Such"}})).is_err());
    }

    #[test]
    fn integers_in_a_floats_form_are_read_when_integral_and_in_range() {
        let got = read(&json!({
            "scalars": {"fInt32": "1e2", "fInt64": "-1.5e3", "fUint64": "1e19",
                        "fSfixed32": "2.0", "fFixed64": "1E1", "fString": "1e2", "fDouble": "1e2"},
            "ints": ["1e1", 2, "3"], "sints": ["-4e0"],
            "colourById": {"1e1": "RED"}, "byLong": {"-2e0": {"fUint32": "7e0"}},
            "wInt64": "9e15", "wUint32": "1e2", "wString": "1e2",
            "any": {"@type": "type.googleapis.com/google.protobuf.Int32Value", "value": "4e1"},
            "attributes": {"n": "1e2"}, "labels": {"1e2": "1e2"}
        }))
        .unwrap();
        let want = prost(json!({
            "scalars": {"fInt32": 100, "fInt64": "-1500", "fUint64": "10000000000000000000",
                        "fSfixed32": 2, "fFixed64": "10", "fString": "1e2", "fDouble": 100},
            "ints": [10, 2, 3], "sints": [-4],
            "colourById": {"10": "RED"}, "byLong": {"-2": {"fUint32": 7}},
            "wInt64": "9000000000000000", "wUint32": 100, "wString": "1e2",
            "any": {"@type": "type.googleapis.com/google.protobuf.Int32Value", "value": 40},
            "attributes": {"n": "1e2"}, "labels": {"1e2": "1e2"}
        }));
        assert_eq!(got, as_json(&want));
        for bad in [
            json!({"scalars": {"fInt32": "1.5e0"}}),
            json!({"scalars": {"fInt32": "3e9"}}),
            json!({"scalars": {"fUint32": "-1e0"}}),
            json!({"scalars": {"fInt64": "1e19"}}),
            json!({"scalars": {"fUint64": "1.8446744073709552e19"}}),
            json!({"scalars": {"fInt32": "Infinity"}}),
            json!({"scalars": {"fInt32": "1e2 "}}),
            json!({"ints": ["1e400"]}),
            json!({"colourById": {"0.5": "RED"}}),
            json!({"wInt32": "1e10"}),
        ] {
            assert!(read(&bad).is_err(), "read: {bad}");
        }
    }

    fn json_of<T: Serialize>(v: &T) -> serde_json::Value {
        let mut out = Vec::new();
        v.serialize(Finite(&mut serde_json::Serializer::new(&mut out)))
            .unwrap();
        serde_json::from_slice(&out).unwrap()
    }

    #[test]
    fn non_finite_numbers_are_strings_at_any_depth() {
        assert_eq!(json_of(&f64::NAN), json!("NaN"));
        assert_eq!(json_of(&f32::INFINITY), json!("Infinity"));
        assert_eq!(json_of(&f64::NEG_INFINITY), json!("-Infinity"));
        assert_eq!(json_of(&1.5f64), json!(1.5));
        assert_eq!(
            json_of(&vec![Some(f64::NAN), None, Some(2.0)]),
            json!(["NaN", null, 2.0])
        );
        let map: std::collections::BTreeMap<&str, (f32, bool)> =
            [("a", (f32::NEG_INFINITY, true))].into_iter().collect();
        assert_eq!(json_of(&map), json!({"a": ["-Infinity", true]}));
    }
}
