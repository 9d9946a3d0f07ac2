//! The reply direction of transcoding in one pass: a backend's protobuf bytes written
//! straight as proto3 JSON, without decoding them into a `DynamicMessage` first
//! (docs/ARCHITECTURE.md, "The invoke tier").
//!
//! The reference for what the JSON says is prost-reflect's serializer with default options
//! (what [`MethodPlan::response`](crate::MethodPlan::response) writes, through
//! [`proto_json`](crate::proto_json), which writes non-finite wrapper values as strings): field JSON names, in
//! field-number order; fields without presence left out when they hold their default;
//! 64-bit integers as strings; enums by name (by number when unnamed); bytes as standard
//! base64; non-finite floats as `"NaN"`, `"Infinity"`, `"-Infinity"` (in `DoubleValue` and
//! `FloatValue` too); the well-known types
//! in their JSON forms. A [`ReplyWriter`] gives byte-for-byte that output (maps aside:
//! prost-reflect writes a map's entries in no fixed order; this writer keeps the wire's).
//!
//! It takes on the encodings every protobuf library writes and leaves everything else to
//! the reference, answering [`NotFast`]: a present `Any` or `FieldMask`, fields out of number order, a singular field sent
//! twice (merge semantics), two members of one oneof, a repeated map key, wire types that
//! do not fit the field, bad UTF-8, truncated input, nesting deeper than 100, out-of-range
//! Timestamps and Durations, non-finite numbers in a `google.protobuf.Value`, unknown
//! fields of a message that has extensions. The reference then decodes and writes the reply
//! (or names its error), so the answer is the same either way. A message type with proto2
//! groups is left to the reference whole ([`ReplyWriter::new`] answers `None`).

use crate::schema::{
    Card, EnumPlan, Field, Scalar, Schema, Ty, Type, Wkt, WT_I32, WT_I64, WT_LEN, WT_VARINT,
};
use base64::prelude::{Engine as _, BASE64_STANDARD};
use prost_reflect::MessageDescriptor;
use serde::Serializer as _;

/// This reply is not for the one-pass writer; the reference path decides what it says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NotFast;

/// Nesting deeper than this (messages, map entries included, as prost counts them against
/// its limit of 100) is left to the reference, which refuses what is too deep.
const MAX_DEPTH: u32 = 90;

/// Reads protobuf wire format; every malformation is [`NotFast`].
struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

type Fast<T> = Result<T, NotFast>;

impl<'a> Reader<'a> {
    fn new(buf: &'a [u8]) -> Self {
        Reader { buf, pos: 0 }
    }

    fn done(&self) -> bool {
        self.pos >= self.buf.len()
    }

    #[inline]
    fn varint(&mut self) -> Fast<u64> {
        let mut value = 0u64;
        for i in 0..10 {
            let b = *self.buf.get(self.pos).ok_or(NotFast)?;
            self.pos += 1;
            if i == 9 && b > 1 {
                return Err(NotFast);
            }
            value |= u64::from(b & 0x7f) << (7 * i);
            if b < 0x80 {
                return Ok(value);
            }
        }
        Err(NotFast)
    }

    fn take(&mut self, n: usize) -> Fast<&'a [u8]> {
        let end = self.pos.checked_add(n).ok_or(NotFast)?;
        let s = self.buf.get(self.pos..end).ok_or(NotFast)?;
        self.pos = end;
        Ok(s)
    }

    fn fixed32(&mut self) -> Fast<u32> {
        let s = self.take(4)?;
        Ok(u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
    }

    fn fixed64(&mut self) -> Fast<u64> {
        let s = self.take(8)?;
        let mut b = [0u8; 8];
        b.copy_from_slice(s);
        Ok(u64::from_le_bytes(b))
    }

    fn len_delimited(&mut self) -> Fast<&'a [u8]> {
        let n = self.varint()?;
        self.take(usize::try_from(n).map_err(|_| NotFast)?)
    }

    /// The next field's number and wire type.
    fn key(&mut self) -> Fast<(u32, u8)> {
        let key = u32::try_from(self.varint()?).map_err(|_| NotFast)?;
        let number = key >> 3;
        if number == 0 {
            return Err(NotFast);
        }
        Ok((number, (key & 7) as u8))
    }

    fn skip(&mut self, wire_type: u8) -> Fast<()> {
        match wire_type {
            WT_VARINT => self.varint().map(drop),
            WT_I64 => self.take(8).map(drop),
            WT_LEN => self.len_delimited().map(drop),
            WT_I32 => self.take(4).map(drop),
            _ => Err(NotFast), // groups
        }
    }

    /// One value of `s`, whose wire type the caller checked.
    fn scalar(&mut self, s: Scalar) -> Fast<Raw<'a>> {
        Ok(match s.wire_type() {
            WT_VARINT => Raw::Varint(self.varint()?),
            WT_I64 => Raw::Fixed64(self.fixed64()?),
            WT_I32 => Raw::Fixed32(self.fixed32()?),
            _ => Raw::Len(self.len_delimited()?),
        })
    }
}

#[derive(Debug, Clone, Copy)]
enum Raw<'a> {
    Varint(u64),
    Fixed32(u32),
    Fixed64(u64),
    Len(&'a [u8]),
}

/// A scalar value as prost decodes it.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Val<'a> {
    I32(i32),
    U32(u32),
    I64(i64),
    U64(u64),
    F32(f32),
    F64(f64),
    Bool(bool),
    Str(&'a str),
    Bytes(&'a [u8]),
}

impl<'a> Val<'a> {
    fn decode(s: Scalar, raw: Raw<'a>) -> Fast<Val<'a>> {
        Ok(match (s, raw) {
            (Scalar::Int32, Raw::Varint(v)) => Val::I32(v as i32),
            (Scalar::Int64, Raw::Varint(v)) => Val::I64(v as i64),
            (Scalar::Uint32, Raw::Varint(v)) => Val::U32(v as u32),
            (Scalar::Uint64, Raw::Varint(v)) => Val::U64(v),
            (Scalar::Sint32, Raw::Varint(v)) => {
                let v = v as u32;
                Val::I32(((v >> 1) as i32) ^ -((v & 1) as i32))
            }
            (Scalar::Sint64, Raw::Varint(v)) => Val::I64(((v >> 1) as i64) ^ -((v & 1) as i64)),
            (Scalar::Bool, Raw::Varint(v)) => Val::Bool(v != 0),
            (Scalar::Fixed32, Raw::Fixed32(v)) => Val::U32(v),
            (Scalar::Sfixed32, Raw::Fixed32(v)) => Val::I32(v as i32),
            (Scalar::Float, Raw::Fixed32(v)) => Val::F32(f32::from_bits(v)),
            (Scalar::Fixed64, Raw::Fixed64(v)) => Val::U64(v),
            (Scalar::Sfixed64, Raw::Fixed64(v)) => Val::I64(v as i64),
            (Scalar::Double, Raw::Fixed64(v)) => Val::F64(f64::from_bits(v)),
            (Scalar::String, Raw::Len(b)) => Val::Str(std::str::from_utf8(b).map_err(|_| NotFast)?),
            (Scalar::Bytes, Raw::Len(b)) => Val::Bytes(b),
            _ => return Err(NotFast),
        })
    }

    /// The default value of a field of type `s` (proto3: zero, empty, false).
    fn default_of(s: Scalar) -> Val<'static> {
        match s {
            Scalar::Int32 | Scalar::Sint32 | Scalar::Sfixed32 => Val::I32(0),
            Scalar::Uint32 | Scalar::Fixed32 => Val::U32(0),
            Scalar::Int64 | Scalar::Sint64 | Scalar::Sfixed64 => Val::I64(0),
            Scalar::Uint64 | Scalar::Fixed64 => Val::U64(0),
            Scalar::Float => Val::F32(0.0),
            Scalar::Double => Val::F64(0.0),
            Scalar::Bool => Val::Bool(false),
            Scalar::String => Val::Str(""),
            Scalar::Bytes => Val::Bytes(b""),
        }
    }

    /// Whether prost-reflect counts it as the default (`-0.0 == 0.0`; NaN is not).
    fn is_default(self) -> bool {
        match self {
            Val::I32(v) => v == 0,
            Val::U32(v) => v == 0,
            Val::I64(v) => v == 0,
            Val::U64(v) => v == 0,
            Val::F32(v) => v == 0.0,
            Val::F64(v) => v == 0.0,
            Val::Bool(v) => !v,
            Val::Str(v) => v.is_empty(),
            Val::Bytes(v) => v.is_empty(),
        }
    }

    fn write(self, out: &mut Vec<u8>) {
        if let Val::Bytes(v) = self {
            out.push(b'"');
            let start = out.len();
            out.resize(start + base64::encoded_len(v.len(), true).unwrap_or(0), 0);
            let n = BASE64_STANDARD
                .encode_slice(v, &mut out[start..])
                .unwrap_or(0);
            out.truncate(start + n);
            out.push(b'"');
            return;
        }
        if let Val::I64(_) | Val::U64(_) = self {
            // As a string (proto3 JSON), with serde_json's digits (Display's, without the
            // formatting machinery).
            out.push(b'"');
            let mut ser = serde_json::Serializer::new(&mut *out);
            let _ = match self {
                Val::I64(v) => ser.serialize_i64(v),
                Val::U64(v) => ser.serialize_u64(v),
                _ => Ok(()),
            };
            out.push(b'"');
            return;
        }
        let mut ser = serde_json::Serializer::new(&mut *out);
        // Writing into a Vec does not fail.
        let _ = match self {
            Val::I32(v) => ser.serialize_i32(v),
            Val::U32(v) => ser.serialize_u32(v),
            Val::I64(_) | Val::U64(_) => Ok(()),
            Val::F32(v) if v.is_finite() => ser.serialize_f32(v),
            Val::F64(v) if v.is_finite() => ser.serialize_f64(v),
            Val::F32(v) => ser.serialize_str(non_finite(f64::from(v))),
            Val::F64(v) => ser.serialize_str(non_finite(v)),
            Val::Bool(v) => ser.serialize_bool(v),
            Val::Str(v) => ser.serialize_str(v),
            Val::Bytes(_) => Ok(()),
        };
    }

    /// As a map key: always a JSON string.
    fn write_key(self, out: &mut Vec<u8>) {
        use std::io::Write as _;
        // Writing into a Vec does not fail.
        let _ = match self {
            Val::Str(_) => {
                self.write(out);
                Ok(())
            }
            Val::Bool(v) => write!(out, "\"{v}\""),
            Val::I32(v) => write!(out, "\"{v}\""),
            Val::U32(v) => write!(out, "\"{v}\""),
            Val::I64(v) => write!(out, "\"{v}\""),
            Val::U64(v) => write!(out, "\"{v}\""),
            _ => Ok(()),
        };
    }
}

use crate::proto_json::non_finite;

/// A map key as it identifies an entry (to find repeated keys).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum KeyId<'a> {
    Str(&'a str),
    Int(i128),
}

impl<'a> KeyId<'a> {
    fn of(v: Val<'a>) -> KeyId<'a> {
        match v {
            Val::Str(s) => KeyId::Str(s),
            Val::I32(v) => KeyId::Int(v.into()),
            Val::U32(v) => KeyId::Int(v.into()),
            Val::I64(v) => KeyId::Int(v.into()),
            Val::U64(v) => KeyId::Int(v.into()),
            Val::Bool(v) => KeyId::Int(v.into()),
            _ => KeyId::Int(i128::MIN),
        }
    }
}

/// The repeated field being written, while its values keep coming.
enum Open<'a> {
    None,
    /// A list; whether `[` is written.
    List(bool),
    /// A map: the keys written so far.
    Map(Vec<KeyId<'a>>),
}

impl Open<'_> {
    fn close(&mut self, out: &mut Vec<u8>) {
        match std::mem::replace(self, Open::None) {
            Open::List(true) => out.push(b']'),
            Open::Map(keys) if !keys.is_empty() => out.push(b'}'),
            _ => {}
        }
    }
}

/// Writes `,` before every entry but the first of an object, then the entry's key.
#[inline]
fn entry(out: &mut Vec<u8>, first: &mut bool, key: &[u8]) {
    if !std::mem::take(first) {
        out.push(b',');
    }
    out.extend_from_slice(key);
}

/// Writes replies of one message type as JSON in one pass over their protobuf bytes. Built
/// once per type and snapshot.
#[derive(Debug)]
pub struct ReplyWriter {
    schema: Schema,
    root: Ty,
}

impl ReplyWriter {
    /// The writer of `md` replies; `None` when the type (or one it contains) has proto2
    /// groups, which only the reference path reads.
    pub fn new(md: &MessageDescriptor) -> Option<ReplyWriter> {
        let (schema, root) = Schema::plan(md).ok()?;
        Some(ReplyWriter { schema, root })
    }

    /// Appends the JSON of the reply `bytes` to `out`. On [`NotFast`] `out` is as it was.
    pub fn write(&self, bytes: &[u8], out: &mut Vec<u8>) -> Result<(), NotFast> {
        let start = out.len();
        let written = self.value_of(&self.root, bytes, out, 0);
        if written.is_err() {
            out.truncate(start);
        }
        written
    }

    /// A message-typed value (`ty` is a message, a well-known type or left to the
    /// reference).
    fn value_of(&self, ty: &Ty, bytes: &[u8], out: &mut Vec<u8>, depth: u32) -> Fast<()> {
        if depth > MAX_DEPTH {
            return Err(NotFast);
        }
        match ty {
            Ty::Message(i) => self.message(&self.schema.types[*i], bytes, out, depth),
            Ty::Wkt(w, _) => self.well_known(*w, bytes, out, depth),
            Ty::Scalar(_) | Ty::Enum(_) => Err(NotFast),
        }
    }

    fn message(&self, t: &Type, bytes: &[u8], out: &mut Vec<u8>, depth: u32) -> Fast<()> {
        out.push(b'{');
        let mut r = Reader::new(bytes);
        let mut first = true;
        let mut last = 0u32;
        let mut open = Open::None;
        let mut oneofs = 0u64;
        while !r.done() {
            let (number, wt) = r.key()?;
            let Some(f) = t.field(number) else {
                if t.extended {
                    return Err(NotFast);
                }
                r.skip(wt)?;
                continue;
            };
            if number < last {
                return Err(NotFast);
            }
            if number == last {
                if matches!(f.card, Card::One { .. }) {
                    return Err(NotFast); // sent twice: merged or replaced
                }
            } else {
                open.close(out);
                last = number;
                open = match f.card {
                    Card::One { .. } => Open::None,
                    Card::List { .. } => Open::List(false),
                    Card::Map { .. } => Open::Map(Vec::new()),
                };
            }
            match &f.card {
                Card::One { presence, oneof } => {
                    if let Some(o) = *oneof {
                        let bit = 1u64.checked_shl(o).ok_or(NotFast)?;
                        if oneofs & bit != 0 {
                            return Err(NotFast);
                        }
                        oneofs |= bit;
                    }
                    self.single(f, *presence, wt, &mut r, out, &mut first, depth)?;
                }
                Card::List { .. } => {
                    let Open::List(opened) = &mut open else {
                        return Err(NotFast);
                    };
                    self.list_values(f, wt, &mut r, out, &mut first, opened, depth)?;
                }
                Card::Map { key, value } => {
                    let Open::Map(keys) = &mut open else {
                        return Err(NotFast);
                    };
                    if wt != WT_LEN {
                        return Err(NotFast);
                    }
                    let entry_bytes = r.len_delimited()?;
                    self.map_entry(f, *key, value, entry_bytes, keys, out, &mut first, depth)?;
                }
            }
        }
        open.close(out);
        out.push(b'}');
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn single(
        &self,
        f: &Field,
        presence: bool,
        wt: u8,
        r: &mut Reader<'_>,
        out: &mut Vec<u8>,
        first: &mut bool,
        depth: u32,
    ) -> Fast<()> {
        match &f.ty {
            Ty::Scalar(s) => {
                if wt != s.wire_type() {
                    return Err(NotFast);
                }
                let v = Val::decode(*s, r.scalar(*s)?)?;
                if presence || !v.is_default() {
                    entry(out, first, &f.key);
                    v.write(out);
                }
            }
            Ty::Enum(e) => {
                if wt != WT_VARINT {
                    return Err(NotFast);
                }
                let n = r.varint()? as i32;
                let names = &self.schema.enums[*e];
                if presence || n != names.default {
                    entry(out, first, &f.key);
                    write_enum(names, n, out);
                }
            }
            ty => {
                if wt != WT_LEN {
                    return Err(NotFast);
                }
                let bytes = r.len_delimited()?;
                entry(out, first, &f.key);
                self.value_of(ty, bytes, out, depth + 1)?;
            }
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn list_values(
        &self,
        f: &Field,
        wt: u8,
        r: &mut Reader<'_>,
        out: &mut Vec<u8>,
        first: &mut bool,
        opened: &mut bool,
        depth: u32,
    ) -> Fast<()> {
        let mut next = |out: &mut Vec<u8>| {
            if std::mem::replace(opened, true) {
                out.push(b',');
            } else {
                entry(out, first, &f.key);
                out.push(b'[');
            }
        };
        match &f.ty {
            Ty::Scalar(s) => {
                if wt == WT_LEN && *s != Scalar::String && *s != Scalar::Bytes {
                    let mut packed = Reader::new(r.len_delimited()?);
                    while !packed.done() {
                        let v = Val::decode(*s, packed.scalar(*s)?)?;
                        next(out);
                        v.write(out);
                    }
                } else if wt == s.wire_type() {
                    let v = Val::decode(*s, r.scalar(*s)?)?;
                    next(out);
                    v.write(out);
                } else {
                    return Err(NotFast);
                }
            }
            Ty::Enum(e) => {
                let names = &self.schema.enums[*e];
                if wt == WT_LEN {
                    let mut packed = Reader::new(r.len_delimited()?);
                    while !packed.done() {
                        let n = packed.varint()? as i32;
                        next(out);
                        write_enum(names, n, out);
                    }
                } else if wt == WT_VARINT {
                    let n = r.varint()? as i32;
                    next(out);
                    write_enum(names, n, out);
                } else {
                    return Err(NotFast);
                }
            }
            ty => {
                if wt != WT_LEN {
                    return Err(NotFast);
                }
                let bytes = r.len_delimited()?;
                next(out);
                self.value_of(ty, bytes, out, depth + 1)?;
            }
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn map_entry<'a>(
        &self,
        f: &Field,
        key_type: Scalar,
        value_type: &Ty,
        bytes: &'a [u8],
        keys: &mut Vec<KeyId<'a>>,
        out: &mut Vec<u8>,
        first: &mut bool,
        depth: u32,
    ) -> Fast<()> {
        let mut r = Reader::new(bytes);
        let mut key = Val::default_of(key_type);
        let mut value: Option<Raw<'a>> = None;
        while !r.done() {
            match r.key()? {
                (1, wt) if wt == key_type.wire_type() => {
                    key = Val::decode(key_type, r.scalar(key_type)?)?;
                }
                (2, wt) => {
                    let raw = match value_type {
                        Ty::Scalar(s) if wt == s.wire_type() => {
                            // Checked now: a value sent twice is decoded twice by the
                            // reference, the first too (its UTF-8, say).
                            let raw = r.scalar(*s)?;
                            Val::decode(*s, raw)?;
                            raw
                        }
                        Ty::Enum(_) if wt == WT_VARINT => Raw::Varint(r.varint()?),
                        Ty::Message(_) | Ty::Wkt(..) if wt == WT_LEN => {
                            if value.is_some() {
                                return Err(NotFast); // merged
                            }
                            Raw::Len(r.len_delimited()?)
                        }
                        _ => return Err(NotFast),
                    };
                    value = Some(raw);
                }
                (1, _) => return Err(NotFast),
                (_, wt) => r.skip(wt)?,
            }
        }
        let id = KeyId::of(key);
        if keys.contains(&id) {
            return Err(NotFast); // the reference keeps the last
        }
        if keys.is_empty() {
            entry(out, first, &f.key);
            out.push(b'{');
        } else {
            out.push(b',');
        }
        keys.push(id);
        key.write_key(out);
        out.push(b':');
        match value_type {
            Ty::Scalar(s) => match value {
                Some(raw) => Val::decode(*s, raw)?.write(out),
                None => Val::default_of(*s).write(out),
            },
            Ty::Enum(e) => {
                let names = &self.schema.enums[*e];
                let n = match value {
                    Some(Raw::Varint(v)) => v as i32,
                    _ => names.default,
                };
                write_enum(names, n, out);
            }
            ty => {
                let bytes = match value {
                    Some(Raw::Len(b)) => b,
                    _ => &[],
                };
                // The entry is a message, and so is its value.
                self.value_of(ty, bytes, out, depth + 2)?;
            }
        }
        Ok(())
    }

    fn well_known(&self, w: Wkt, bytes: &[u8], out: &mut Vec<u8>, depth: u32) -> Fast<()> {
        match w {
            // Present, they leave the whole reply to the reference (its depth limit counts
            // from the top, which a writer of this value alone could not keep).
            Wkt::Any | Wkt::FieldMask => return Err(NotFast),
            Wkt::Timestamp | Wkt::Duration => {
                let (seconds, nanos) = seconds_and_nanos(bytes)?;
                if w == Wkt::Timestamp {
                    if !(MIN_TIMESTAMP_SECONDS..=MAX_TIMESTAMP_SECONDS).contains(&seconds) {
                        return Err(NotFast);
                    }
                    write_timestamp(seconds, nanos, out);
                } else {
                    if seconds.unsigned_abs() > MAX_DURATION_SECONDS
                        || nanos.unsigned_abs() > MAX_DURATION_NANOS
                    {
                        return Err(NotFast);
                    }
                    write_duration(seconds, nanos, out);
                }
            }
            Wkt::Wrapper(s) => {
                let mut r = Reader::new(bytes);
                let mut v = Val::default_of(s);
                while !r.done() {
                    match r.key()? {
                        (1, wt) if wt == s.wire_type() => v = Val::decode(s, r.scalar(s)?)?,
                        (1, _) => return Err(NotFast),
                        (_, wt) => r.skip(wt)?,
                    }
                }
                // A non-finite wrapped number as proto3 JSON's string, as a field's is
                // (crate::proto_json: prost-reflect alone would write null).
                v.write(out);
            }
            Wkt::Empty => {
                let mut r = Reader::new(bytes);
                while !r.done() {
                    let (_, wt) = r.key()?;
                    r.skip(wt)?;
                }
                out.extend_from_slice(b"{}");
            }
            Wkt::Struct => self.structure(bytes, out, depth)?,
            Wkt::ListValue => {
                out.push(b'[');
                let mut r = Reader::new(bytes);
                let mut first = true;
                while !r.done() {
                    match r.key()? {
                        (1, WT_LEN) => {
                            let v = r.len_delimited()?;
                            if !std::mem::take(&mut first) {
                                out.push(b',');
                            }
                            self.well_known(Wkt::Value, v, out, depth + 1)?;
                        }
                        (1, _) => return Err(NotFast),
                        (_, wt) => r.skip(wt)?,
                    }
                }
                out.push(b']');
            }
            Wkt::Value => {
                if depth > MAX_DEPTH {
                    return Err(NotFast);
                }
                let mut r = Reader::new(bytes);
                let mut kind: Option<(u32, Raw<'_>)> = None;
                while !r.done() {
                    let (number, wt) = r.key()?;
                    let raw = match (number, wt) {
                        (1 | 4, WT_VARINT) => Raw::Varint(r.varint()?),
                        (2, WT_I64) => Raw::Fixed64(r.fixed64()?),
                        (3 | 5 | 6, WT_LEN) => Raw::Len(r.len_delimited()?),
                        (1..=6, _) => return Err(NotFast),
                        (_, wt) => {
                            r.skip(wt)?;
                            continue;
                        }
                    };
                    if kind.is_some() {
                        return Err(NotFast); // replaced or merged
                    }
                    kind = Some((number, raw));
                }
                match kind {
                    None | Some((1, _)) => out.extend_from_slice(b"null"),
                    Some((2, Raw::Fixed64(bits))) => {
                        let v = f64::from_bits(bits);
                        if !v.is_finite() {
                            return Err(NotFast);
                        }
                        Val::F64(v).write(out);
                    }
                    Some((3, raw)) => Val::decode(Scalar::String, raw)?.write(out),
                    Some((4, Raw::Varint(v))) => Val::Bool(v != 0).write(out),
                    Some((5, Raw::Len(b))) => self.structure(b, out, depth + 1)?,
                    Some((6, Raw::Len(b))) => self.well_known(Wkt::ListValue, b, out, depth + 1)?,
                    Some(_) => return Err(NotFast),
                }
            }
        }
        Ok(())
    }

    /// `google.protobuf.Struct`: its entries by key (prost-types keeps them in a BTreeMap).
    fn structure(&self, bytes: &[u8], out: &mut Vec<u8>, depth: u32) -> Fast<()> {
        let mut r = Reader::new(bytes);
        let mut entries: Vec<(&str, &[u8])> = Vec::new();
        while !r.done() {
            match r.key()? {
                (1, WT_LEN) => {
                    let mut e = Reader::new(r.len_delimited()?);
                    let (mut key, mut value): (&str, &[u8]) = ("", &[]);
                    let mut has_value = false;
                    while !e.done() {
                        match e.key()? {
                            (1, WT_LEN) => {
                                key =
                                    std::str::from_utf8(e.len_delimited()?).map_err(|_| NotFast)?
                            }
                            (2, WT_LEN) => {
                                if std::mem::replace(&mut has_value, true) {
                                    return Err(NotFast); // merged
                                }
                                value = e.len_delimited()?;
                            }
                            (1 | 2, _) => return Err(NotFast),
                            (_, wt) => e.skip(wt)?,
                        }
                    }
                    entries.push((key, value));
                }
                (1, _) => return Err(NotFast),
                (_, wt) => r.skip(wt)?,
            }
        }
        entries.sort_by(|a, b| a.0.cmp(b.0));
        // A repeated key is the reference's: it keeps the last entry, but only after
        // decoding every one (a dropped entry's bad value is still an error).
        if entries.windows(2).any(|w| w[0].0 == w[1].0) {
            return Err(NotFast);
        }
        out.push(b'{');
        let mut first = true;
        for (key, value) in &entries {
            if !std::mem::take(&mut first) {
                out.push(b',');
            }
            Val::Str(key).write(out);
            out.push(b':');
            // The entry is a message, and so is its Value.
            self.well_known(Wkt::Value, value, out, depth + 2)?;
        }
        out.push(b'}');
        Ok(())
    }
}

const MAX_DURATION_SECONDS: u64 = 315_576_000_000;
const MAX_DURATION_NANOS: u32 = 999_999_999;
const MIN_TIMESTAMP_SECONDS: i64 = -62_135_596_800;
const MAX_TIMESTAMP_SECONDS: i64 = 253_402_300_799;

/// A Timestamp in RFC 3339 as prost-types writes it (`2026-01-02T03:04:05.120Z`: the
/// fraction in 0, 3, 6 or 9 digits), for seconds within years 1 to 9999; nanos out of
/// `0..1e9` (which prost-types normalizes first) through prost-types itself.
fn write_timestamp(seconds: i64, nanos: i32, out: &mut Vec<u8>) {
    if !(0..1_000_000_000).contains(&nanos) {
        let text = prost_types::Timestamp { seconds, nanos }.to_string();
        Val::Str(&text).write(out);
        return;
    }
    let (days, secs) = (
        seconds.div_euclid(86_400),
        seconds.rem_euclid(86_400) as u32,
    );
    let (year, month, day) = civil_from_days(days);
    out.push(b'"');
    push_digits(out, year as u32, 4);
    out.push(b'-');
    push_digits(out, month, 2);
    out.push(b'-');
    push_digits(out, day, 2);
    out.push(b'T');
    push_digits(out, secs / 3600, 2);
    out.push(b':');
    push_digits(out, secs / 60 % 60, 2);
    out.push(b':');
    push_digits(out, secs % 60, 2);
    push_fraction(out, nanos as u32);
    out.extend_from_slice(b"Z\"");
}

/// A Duration as prost-types writes it (`-1.000000500s`); one whose seconds and nanos
/// disagree in sign or whose nanos are a second or more through prost-types itself.
fn write_duration(seconds: i64, nanos: i32, out: &mut Vec<u8>) {
    let normal = nanos.unsigned_abs() < 1_000_000_000
        && ((seconds >= 0 && nanos >= 0) || (seconds <= 0 && nanos <= 0));
    if !normal {
        let text = prost_types::Duration { seconds, nanos }.to_string();
        Val::Str(&text).write(out);
        return;
    }
    out.push(b'"');
    if seconds < 0 || nanos < 0 {
        out.push(b'-');
    }
    let _ = serde::Serializer::serialize_u64(
        &mut serde_json::Serializer::new(&mut *out),
        seconds.unsigned_abs(),
    );
    push_fraction(out, nanos.unsigned_abs());
    out.extend_from_slice(b"s\"");
}

/// `.` and the nanos in 3, 6 or 9 digits (none when 0), as prost-types writes them.
fn push_fraction(out: &mut Vec<u8>, nanos: u32) {
    if nanos == 0 {
        return;
    }
    out.push(b'.');
    if nanos.is_multiple_of(1_000_000) {
        push_digits(out, nanos / 1_000_000, 3);
    } else if nanos.is_multiple_of(1_000) {
        push_digits(out, nanos / 1_000, 6);
    } else {
        push_digits(out, nanos, 9);
    }
}

/// `v` in exactly `width` decimal digits (it has no more).
fn push_digits(out: &mut Vec<u8>, mut v: u32, width: usize) {
    let start = out.len();
    out.resize(start + width, b'0');
    for at in (start..start + width).rev() {
        out[at] = b'0' + (v % 10) as u8;
        v /= 10;
    }
}

/// (year, month, day) of a day counted from 1970-01-01 in the proleptic Gregorian
/// calendar (Howard Hinnant's `civil_from_days`).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// Fields 1 (`int64 seconds`) and 2 (`int32 nanos`) of a Timestamp or Duration.
fn seconds_and_nanos(bytes: &[u8]) -> Fast<(i64, i32)> {
    let mut r = Reader::new(bytes);
    let (mut seconds, mut nanos) = (0i64, 0i32);
    while !r.done() {
        match r.key()? {
            (1, WT_VARINT) => seconds = r.varint()? as i64,
            (2, WT_VARINT) => nanos = r.varint()? as i32,
            (1 | 2, _) => return Err(NotFast),
            (_, wt) => r.skip(wt)?,
        }
    }
    Ok((seconds, nanos))
}

fn write_enum(names: &EnumPlan, n: i32, out: &mut Vec<u8>) {
    if names.null {
        out.extend_from_slice(b"null");
        return;
    }
    match names.name(n) {
        Some(name) => out.extend_from_slice(name),
        None => Val::I32(n).write(out),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testgen::{every_scalar, everything, message, random_message, Rng, Seen};
    use prost::Message as _;
    use prost_reflect::{DynamicMessage, SerializeOptions};
    use serde_json::json;

    /// prost-reflect's JSON of `bytes`, or `None` when it refuses them.
    fn reference(md: &MessageDescriptor, bytes: &[u8]) -> Option<Vec<u8>> {
        reference_or_why(md, bytes).ok()
    }

    fn reference_or_why(md: &MessageDescriptor, bytes: &[u8]) -> Result<Vec<u8>, String> {
        let m = DynamicMessage::decode(md.clone(), bytes).map_err(|e| e.to_string())?;
        let mut out = Vec::new();
        crate::proto_json::write_message(&m, &SerializeOptions::new(), &mut out)
            .map_err(|e| e.to_string())?;
        Ok(out)
    }

    /// Writes `bytes` both ways. Whenever the writer takes a reply, the reference takes it
    /// too and says the same: byte for byte, or (`ordered` false: maps, whose entries the
    /// reference writes in no fixed order) as the same JSON value. Returns whether the
    /// writer took it.
    fn same_as_reference(md: &MessageDescriptor, bytes: &[u8], ordered: bool) -> bool {
        let writer = ReplyWriter::new(md).expect("no groups");
        let mut out = b"prefix".to_vec();
        let fast = writer.write(bytes, &mut out);
        let Ok(()) = fast else {
            assert_eq!(out, b"prefix", "a refusal leaves the output as it was");
            return false;
        };
        let out = &out[b"prefix".len()..];
        let expected = match reference_or_why(md, bytes) {
            Ok(expected) => expected,
            Err(why) => panic!(
                "the writer took a reply the reference refuses ({why}): {bytes:02x?} → {}",
                String::from_utf8_lossy(out)
            ),
        };
        if ordered {
            assert_eq!(
                String::from_utf8_lossy(out),
                String::from_utf8_lossy(&expected),
                "bytes {bytes:02x?}"
            );
        } else {
            let a: serde_json::Value = serde_json::from_slice(out).expect("the writer's JSON");
            let b: serde_json::Value = serde_json::from_slice(&expected).unwrap();
            assert_eq!(a, b, "bytes {bytes:02x?}");
        }
        true
    }

    fn encode(md: &MessageDescriptor, v: serde_json::Value) -> Vec<u8> {
        DynamicMessage::deserialize(md.clone(), v)
            .unwrap()
            .encode_to_vec()
    }

    #[test]
    fn scalars_wkts_and_presence_are_written_as_the_reference_writes_them() {
        let md = everything();
        let cases = [
            json!({}),
            json!({"scalars": {}}),
            every_scalar(),
            json!({"scalars": {"fDouble": "NaN", "fFloat": "-Infinity", "fEnum": "CRIMSON"}}),
            json!({"scalars": {"fDouble": 1e300, "fFloat": 3.4e38, "fEnum": 77}}),
            json!({"scalars": {"fDouble": -0.0}}),
            json!({"maybeInt": 0, "maybeString": "", "maybeColour": "COLOUR_UNSPECIFIED"}),
            json!({"choiceText": ""}),
            json!({"choiceNumber": "0"}),
            json!({"choiceMessage": {}}),
            json!({"ints": [0, -1, 2147483647], "sints": ["-1", "5"], "doubles": [0.5, "Infinity"],
                   "fixeds": [1, 0], "flags": [true, false], "colours": ["RED", "BLUE", 9],
                   "names": ["", "a"], "blobs": ["", "/w=="], "children": [{}, {"fInt32": 3}]}),
            json!({"next": {"next": {"scalars": {"fBool": true}}}}),
            json!({"at": "2026-01-02T03:04:05.120Z", "took": "-1.000000500s",
                   "nothing": {}, "wDouble": 0, "wFloat": 1.25, "wInt64": "0", "wUint64": "5",
                   "wInt32": -3, "wUint32": 0, "wBool": false, "wString": "", "wBytes": "AQ=="}),
            json!({"at": "0001-01-01T00:00:00Z", "took": "315576000000s"}),
            json!({"at": "9999-12-31T23:59:59.999999999Z", "took": "0.000001s"}),
            json!({"attributes": {"b": [1, "x", null, true, {"z": {}}], "a": 1.5, "c": {"d": []}}}),
            json!({"anything": null}),
            json!({"anything": "text"}),
            json!({"anything": {"k": [[]]}}),
            json!({"list": [1, [2, [3]], {"x": false}]}),
            json!({"stamps": ["1970-01-01T00:00:00Z", "2000-02-29T12:00:00.5Z"]}),
            json!({"fieldWithAHighNumber": 5}),
        ];
        for case in cases {
            let bytes = encode(&md, case.clone());
            assert!(same_as_reference(&md, &bytes, true), "not taken: {case}");
        }
    }

    #[test]
    fn non_finite_wrappers_are_strings_as_proto3_json_says() {
        let md = everything();
        for (double, float) in [
            ("NaN", "Infinity"),
            ("-Infinity", "NaN"),
            ("Infinity", "-Infinity"),
        ] {
            let case = json!({"wDouble": double, "wFloat": float,
                              "scalars": {"fDouble": double, "fFloat": float}});
            let bytes = encode(&md, case.clone());
            assert!(same_as_reference(&md, &bytes, true), "not taken: {case}");
            let writer = ReplyWriter::new(&md).expect("no groups");
            let mut out = Vec::new();
            writer.write(&bytes, &mut out).unwrap();
            let got: serde_json::Value = serde_json::from_slice(&out).unwrap();
            assert_eq!(got, case, "the one-pass writer");
            let reference: serde_json::Value =
                serde_json::from_slice(&reference(&md, &bytes).unwrap()).unwrap();
            assert_eq!(reference, case, "the reference");
        }
    }

    #[test]
    fn timestamps_and_durations_are_written_as_prost_types_writes_them() {
        let mut rng = Rng(0x5eed);
        let nanos_of = |rng: &mut Rng| match rng.below(5) {
            0 => 0,
            1 => (rng.below(1000) * 1_000_000) as i32,
            2 => (rng.below(1_000_000) * 1_000) as i32,
            3 => rng.below(1_000_000_000) as i32,
            _ => rng.next() as i32, // out of range: normalized by prost-types
        };
        let span = (MAX_TIMESTAMP_SECONDS - MIN_TIMESTAMP_SECONDS) as u64;
        let edges = [
            MIN_TIMESTAMP_SECONDS,
            MAX_TIMESTAMP_SECONDS,
            0,
            -1,
            951_782_400,
            4_107_542_400,
        ];
        for i in 0..20_000 {
            let seconds = match edges.get(i) {
                Some(&s) => s,
                None => MIN_TIMESTAMP_SECONDS + (rng.next() % (span + 1)) as i64,
            };
            let nanos = nanos_of(&mut rng);
            let mut out = Vec::new();
            write_timestamp(seconds, nanos, &mut out);
            let expected = format!("\"{}\"", prost_types::Timestamp { seconds, nanos });
            assert_eq!(
                String::from_utf8(out).unwrap(),
                expected,
                "{seconds} {nanos}"
            );

            let seconds =
                (rng.next() % (2 * MAX_DURATION_SECONDS + 1)) as i64 - MAX_DURATION_SECONDS as i64;
            let nanos = nanos_of(&mut rng);
            let nanos = if rng.chance(50) {
                nanos.wrapping_neg()
            } else {
                nanos
            };
            let mut out = Vec::new();
            write_duration(seconds, nanos, &mut out);
            let expected = format!("\"{}\"", prost_types::Duration { seconds, nanos });
            assert_eq!(
                String::from_utf8(out).unwrap(),
                expected,
                "{seconds} {nanos}"
            );
        }
    }

    #[test]
    fn maps_are_written_with_every_key_type() {
        let md = everything();
        let cases = [
            json!({"labels": {"": "", "b": "2", "a\"": "1"}}),
            json!({"colourById": {"-5": "RED", "0": "COLOUR_UNSPECIFIED", "3": 42}}),
            json!({"byLong": {"-9223372036854775808": {}, "1": {"fString": "x"}}}),
            json!({"byFlag": {"true": 0.0, "false": -2.5}}),
            json!({"times": {"18446744073709551615": "2026-01-01T00:00:00Z", "0": "1970-01-01T00:00:00Z"}}),
            json!({"values": {"n": null, "s": "x", "l": [1], "o": {"a": 1}}}),
        ];
        for case in cases {
            let bytes = encode(&md, case.clone());
            assert!(same_as_reference(&md, &bytes, false), "not taken: {case}");
        }
        // An entry without key or value (prost leaves defaults out) is the defaults.
        let entry_without_value = [0x8a, 0x01, 0x03, 0x0a, 0x01, b'k'];
        let entry_without_key = [0x92, 0x01, 0x02, 0x10, 0x02];
        let empty_entry = [0x9a, 0x01, 0x00];
        let times_empty_entry = [0xaa, 0x01, 0x00];
        for bytes in [
            &entry_without_value[..],
            &entry_without_key,
            &empty_entry,
            &times_empty_entry,
        ] {
            assert!(same_as_reference(&md, bytes, true), "{bytes:02x?}");
        }
    }

    #[test]
    fn a_reply_type_that_is_a_well_known_type_is_written_whole() {
        let md = message("google.protobuf.Timestamp");
        let bytes = encode(&md, json!("2026-11-30T10:00:00.000001Z"));
        assert!(same_as_reference(&md, &bytes, true));
        let md = message("google.protobuf.Empty");
        assert!(same_as_reference(&md, &[], true));
    }

    #[test]
    fn unusual_encodings_are_the_references_and_agree_with_it() {
        let md = everything();
        let scalars = message("portico.test.reply.Scalars");
        // Unpacked repeated scalars and enums (proto2 writers): taken.
        assert!(same_as_reference(
            &md,
            &[0x40, 0x01, 0x40, 0x02, 0x68, 0x01],
            true
        ));
        // Packed, then unpacked, of one field: one list.
        assert!(same_as_reference(
            &md,
            &[0x42, 0x02, 0x01, 0x02, 0x40, 0x03],
            true
        ));
        // An empty packed list: no field.
        assert!(same_as_reference(&md, &[0x42, 0x00], true));
        // Unknown fields are skipped.
        assert!(same_as_reference(
            &md,
            &[0xf8, 0x07, 0x01, 0x10, 0x05],
            true
        ));
        // A proto3 field holding its default on the wire is left out.
        assert!(same_as_reference(&scalars, &[0x18, 0x00, 0x72, 0x00], true));
        // int32 from a varint over 32 bits: truncated, as prost does (2^32 reads as 0).
        assert!(same_as_reference(
            &scalars,
            &[0x18, 0x80, 0x80, 0x80, 0x80, 0x10],
            true
        ));

        let refused: [&[u8]; 11] = [
            // Out of number order.
            &[0xb8, 0x01, 0x01, 0x40, 0x01],
            // A singular field twice (last wins / messages merge).
            &[0x0a, 0x02, 0x18, 0x01, 0x0a, 0x02, 0x18, 0x02],
            // Two members of one oneof.
            &[0x2a, 0x01, b'a', 0x30, 0x01],
            // A repeated map key.
            &[
                0x8a, 0x01, 0x03, 0x0a, 0x01, b'k', 0x8a, 0x01, 0x03, 0x0a, 0x01, b'k',
            ],
            // Wire type not the field's.
            &[0x1d, 0, 0, 0, 0],
            // Bad UTF-8.
            &[0x72, 0x01, 0xff],
            // Truncated.
            &[0x0a, 0x05, 0x18],
            // Field number 0.
            &[0x00, 0x01],
            // A group.
            &[0xfb, 0x07, 0xfc, 0x07],
            // A varint of 11 bytes.
            &[
                0x18, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01,
            ],
            // A non-finite number in a Value.
            &[0xda, 0x01, 0x09, 0x11, 0, 0, 0, 0, 0, 0, 0xf0, 0x7f],
        ];
        for bytes in refused {
            let md = if bytes == [0x72, 0x01, 0xff] || bytes[0] == 0x18 {
                &scalars
            } else {
                &md
            };
            assert!(!same_as_reference(md, bytes, true), "{bytes:02x?} taken");
        }
        // Found by the `transcode` fuzz target (2026-12-01): a Struct whose entries repeat a
        // key, the dropped one's Value not decoding (tag 0), and a map entry whose string
        // value, sent twice, is not UTF-8 the first time. The reference decodes everything
        // before it keeps the last.
        let structure = message("google.protobuf.Struct");
        let repeated_key = [
            0x0a, 0x0e, 0x0a, 0x01, b'a', 0x12, 0x05, 0, 0, 0, 0x0a, 0, 0x0a, 0, 0x0a, 0, 0x0a, 0,
        ];
        assert!(!same_as_reference(&structure, &repeated_key, true));
        assert!(reference(&structure, &repeated_key).is_none());
        let twice = [
            0x8a, 0x01, 0x08, 0x0a, 0x01, b'k', 0x12, 0x01, 0xff, 0x12, 0x00,
        ];
        assert!(!same_as_reference(&md, &twice, true));
        assert!(reference(&md, &twice).is_none());
        // Out-of-range Timestamp and Duration: the reference's to refuse.
        for (field, seconds) in [(0xc2u8, 253_402_300_800i64), (0xca, 315_576_000_001)] {
            let mut inner = vec![0x08];
            prost::encoding::encode_varint(seconds as u64, &mut inner);
            let mut bytes = vec![field, 0x01, inner.len() as u8];
            bytes.extend_from_slice(&inner);
            assert!(!same_as_reference(&md, &bytes, true));
            assert!(reference(&md, &bytes).is_none());
        }
    }

    #[test]
    fn any_field_mask_extensions_and_depth_are_left_to_the_reference() {
        let md = everything();
        let scalars = message("portico.test.reply.Scalars");
        let any = json!({"any": {"@type": "type.googleapis.com/portico.test.reply.Scalars", "fInt32": 1}});
        let bytes = encode(&md, any);
        assert!(!same_as_reference(&md, &bytes, true));
        assert!(reference(&md, &bytes).is_some());
        // An Any holding an Empty: the reference's, which writes it {"@type": ...} as
        // protobuf does (crate::proto_json), also as a whole reply of a method.
        let url = "type.googleapis.com/google.protobuf.Empty";
        let bytes = encode(&md, json!({"any": {"@type": url, "value": {}}}));
        assert!(ReplyWriter::new(&md)
            .unwrap()
            .write(&bytes, &mut Vec::new())
            .is_err());
        let method = md
            .parent_pool()
            .get_service_by_name("portico.test.reply.Replies")
            .unwrap()
            .methods()
            .find(|m| m.name() == "Get")
            .unwrap();
        let text = crate::MethodPlan::new(&method, &[])
            .unwrap()
            .response_from_bytes(None, &bytes)
            .unwrap();
        assert_eq!(
            serde_json::from_slice::<serde_json::Value>(&text).unwrap(),
            json!({"any": {"@type": url}})
        );
        let bytes = encode(&md, json!({"mask": "aB,c.dE"}));
        assert!(!same_as_reference(&md, &bytes, true));
        // Unset, they do not matter.
        assert!(same_as_reference(
            &md,
            &encode(&md, json!({"scalars": {"fInt32": 1}})),
            true
        ));

        // proto2: presence keeps defaults; an extension is the reference's.
        let legacy = message("portico.test.reply2.Legacy");
        let bytes = encode(
            &legacy,
            json!({"count": 0, "name": "", "on": false, "unpacked": [1, 2], "packed": [3]}),
        );
        assert!(same_as_reference(&legacy, &bytes, true));
        let mut with_extension = bytes.clone();
        with_extension.extend_from_slice(&[0xa2, 0x06, 0x01, b'n']);
        assert!(!same_as_reference(&legacy, &with_extension, true));
        assert!(reference(&legacy, &with_extension).is_some());
        // Groups: no writer at all.
        assert!(ReplyWriter::new(&message("portico.test.reply2.WithGroup")).is_none());

        // Nesting: taken while shallow, refused before the reference's limit.
        let _ = scalars;
        let mut bytes: Vec<u8> = Vec::new();
        let mut taken_at = 0;
        for depth in 1..=120 {
            let mut outer = vec![0xba, 0x01];
            prost::encoding::encode_varint(bytes.len() as u64, &mut outer);
            outer.extend_from_slice(&bytes);
            bytes = outer;
            if same_as_reference(&md, &bytes, true) {
                taken_at = depth;
            }
        }
        assert!(
            (80..=MAX_DEPTH).contains(&taken_at),
            "deepest taken: {taken_at}"
        );
    }

    #[test]
    fn random_replies_are_written_as_the_reference_writes_them() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let md = everything();
        let (mut taken, mut total) = (0, 0);
        for _ in 0..3000 {
            let mut seen = Seen::default();
            let m = random_message(&mut rng, &md, 0, &mut seen);
            let bytes = m.encode_to_vec();
            total += 1;
            if same_as_reference(&md, &bytes, !seen.maps) {
                taken += 1;
            } else {
                // The generator makes no other reason to leave a reply to the reference.
                assert!(seen.unhandled, "not taken: {bytes:02x?}");
                assert!(
                    reference(&md, &bytes).is_some(),
                    "refused by both: {bytes:02x?}"
                );
            }

            // Mutations: whatever the writer takes, it says as the reference says.
            let mut mutated = bytes.clone();
            for _ in 0..1 + rng.below(3) {
                if mutated.is_empty() {
                    break;
                }
                let at = rng.below(mutated.len() as u64) as usize;
                match rng.below(3) {
                    0 => mutated[at] = rng.next() as u8,
                    1 => {
                        mutated.remove(at);
                    }
                    _ => mutated.insert(at, rng.next() as u8),
                }
            }
            same_as_reference(&md, &mutated, false);
        }
        assert!(taken * 10 >= total * 8, "taken {taken} of {total}");
    }
}
