//! The message types the one-pass codecs read and write ([`ReplyWriter`](crate::ReplyWriter),
//! [`RequestEncoder`](crate::RequestEncoder)), planned once per type and snapshot from the
//! descriptors: each message's fields by number and by name, their types, cardinality,
//! presence and oneof; each enum's names, escaped for JSON. One plan serves both directions.

use prost_reflect::{EnumDescriptor, FieldDescriptor, Kind, MessageDescriptor};
use std::collections::HashMap;

/// Field numbers up to this are found by direct index; beyond it, by binary search.
const MAX_DENSE_NUMBER: u32 = 256;

pub(crate) const WT_VARINT: u8 = 0;
pub(crate) const WT_I64: u8 = 1;
pub(crate) const WT_LEN: u8 = 2;
pub(crate) const WT_I32: u8 = 5;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scalar {
    Double,
    Float,
    Int32,
    Int64,
    Uint32,
    Uint64,
    Sint32,
    Sint64,
    Fixed32,
    Fixed64,
    Sfixed32,
    Sfixed64,
    Bool,
    String,
    Bytes,
}

impl Scalar {
    pub(crate) fn of(kind: &Kind) -> Option<Scalar> {
        Some(match kind {
            Kind::Double => Scalar::Double,
            Kind::Float => Scalar::Float,
            Kind::Int32 => Scalar::Int32,
            Kind::Int64 => Scalar::Int64,
            Kind::Uint32 => Scalar::Uint32,
            Kind::Uint64 => Scalar::Uint64,
            Kind::Sint32 => Scalar::Sint32,
            Kind::Sint64 => Scalar::Sint64,
            Kind::Fixed32 => Scalar::Fixed32,
            Kind::Fixed64 => Scalar::Fixed64,
            Kind::Sfixed32 => Scalar::Sfixed32,
            Kind::Sfixed64 => Scalar::Sfixed64,
            Kind::Bool => Scalar::Bool,
            Kind::String => Scalar::String,
            Kind::Bytes => Scalar::Bytes,
            Kind::Message(_) | Kind::Enum(_) => return None,
        })
    }

    /// The wire type of one (unpacked) value.
    pub(crate) fn wire_type(self) -> u8 {
        match self {
            Scalar::Double | Scalar::Fixed64 | Scalar::Sfixed64 => WT_I64,
            Scalar::Float | Scalar::Fixed32 | Scalar::Sfixed32 => WT_I32,
            Scalar::String | Scalar::Bytes => WT_LEN,
            _ => WT_VARINT,
        }
    }
}

/// The well-known types, which have a JSON form of their own (prost-reflect's list).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wkt {
    Timestamp,
    Duration,
    Struct,
    Value,
    ListValue,
    Empty,
    Wrapper(Scalar),
    Any,
    FieldMask,
}

impl Wkt {
    pub(crate) fn of(full_name: &str) -> Option<Wkt> {
        Some(match full_name {
            "google.protobuf.Timestamp" => Wkt::Timestamp,
            "google.protobuf.Duration" => Wkt::Duration,
            "google.protobuf.Struct" => Wkt::Struct,
            "google.protobuf.Value" => Wkt::Value,
            "google.protobuf.ListValue" => Wkt::ListValue,
            "google.protobuf.Empty" => Wkt::Empty,
            "google.protobuf.FloatValue" => Wkt::Wrapper(Scalar::Float),
            "google.protobuf.DoubleValue" => Wkt::Wrapper(Scalar::Double),
            "google.protobuf.Int32Value" => Wkt::Wrapper(Scalar::Int32),
            "google.protobuf.Int64Value" => Wkt::Wrapper(Scalar::Int64),
            "google.protobuf.UInt32Value" => Wkt::Wrapper(Scalar::Uint32),
            "google.protobuf.UInt64Value" => Wkt::Wrapper(Scalar::Uint64),
            "google.protobuf.BoolValue" => Wkt::Wrapper(Scalar::Bool),
            "google.protobuf.StringValue" => Wkt::Wrapper(Scalar::String),
            "google.protobuf.BytesValue" => Wkt::Wrapper(Scalar::Bytes),
            "google.protobuf.Any" => Wkt::Any,
            "google.protobuf.FieldMask" => Wkt::FieldMask,
            _ => return None,
        })
    }
}

#[derive(Debug)]
pub(crate) enum Ty {
    Scalar(Scalar),
    /// Index into [`Schema::enums`].
    Enum(usize),
    /// Index into [`Schema::types`].
    Message(usize),
    /// A well-known type, and its descriptor (the request side has prost-reflect read it).
    Wkt(Wkt, MessageDescriptor),
}

#[derive(Debug)]
pub(crate) enum Card {
    /// `oneof`: the index of a real (not synthetic) oneof within the message.
    One {
        presence: bool,
        oneof: Option<u32>,
    },
    List {
        packed: bool,
    },
    Map {
        key: Scalar,
        value: Ty,
    },
}

#[derive(Debug)]
pub(crate) struct Field {
    pub(crate) number: u32,
    /// `"jsonName":`, escaped.
    pub(crate) key: Box<[u8]>,
    /// The values' type (a map's are in its [`Card`]).
    pub(crate) ty: Ty,
    pub(crate) card: Card,
}

#[derive(Debug, Default)]
pub(crate) struct Type {
    /// By field number.
    pub(crate) fields: Vec<Field>,
    /// Field number → index in `fields` + 1 (0: none), for numbers up to
    /// [`MAX_DENSE_NUMBER`].
    dense: Vec<u16>,
    /// JSON names over proto names, as prost-reflect looks them up: name → index in `fields`.
    pub(crate) by_name: HashMap<Box<str>, usize>,
    /// The pool knows extensions of this message: an unknown number or key may be one.
    pub(crate) extended: bool,
}

impl Type {
    pub(crate) fn field(&self, number: u32) -> Option<&Field> {
        if let Some(&i) = self.dense.get(number as usize) {
            return (i != 0).then(|| &self.fields[usize::from(i) - 1]);
        }
        self.fields
            .binary_search_by_key(&number, |f| f.number)
            .ok()
            .map(|i| &self.fields[i])
    }
}

#[derive(Debug)]
pub(crate) struct EnumPlan {
    pub(crate) desc: EnumDescriptor,
    /// `google.protobuf.NullValue`: `null` in JSON.
    pub(crate) null: bool,
    /// The default number (the first value's).
    pub(crate) default: i32,
    /// (number, `"NAME"` escaped), by number; aliases resolved as prost-reflect does.
    names: Vec<(i32, Box<[u8]>)>,
}

impl EnumPlan {
    /// The JSON string of `number`'s name, if it has one.
    pub(crate) fn name(&self, number: i32) -> Option<&[u8]> {
        self.names
            .binary_search_by_key(&number, |(n, _)| *n)
            .ok()
            .map(|i| &*self.names[i].1)
    }
}

/// The plan of every type reachable from one message type.
#[derive(Debug, Default)]
pub(crate) struct Schema {
    pub(crate) types: Vec<Type>,
    pub(crate) enums: Vec<EnumPlan>,
    type_index: HashMap<String, usize>,
    enum_index: HashMap<String, usize>,
}

/// A type with proto2 groups, which the one-pass codecs do not read or write.
pub(crate) struct HasGroups;

impl Schema {
    /// The plan of `md` and every type it reaches, and `md`'s own type.
    pub(crate) fn plan(md: &MessageDescriptor) -> Result<(Schema, Ty), HasGroups> {
        let mut schema = Schema::default();
        let root = schema.message(md)?;
        Ok((schema, root))
    }

    fn message(&mut self, md: &MessageDescriptor) -> Result<Ty, HasGroups> {
        if let Some(wkt) = Wkt::of(md.full_name()) {
            return Ok(Ty::Wkt(wkt, md.clone()));
        }
        if let Some(&i) = self.type_index.get(md.full_name()) {
            return Ok(Ty::Message(i));
        }
        let i = self.types.len();
        self.types.push(Type::default());
        self.type_index.insert(md.full_name().to_owned(), i);
        let mut fields = Vec::with_capacity(md.fields().len());
        let mut oneofs: Vec<String> = Vec::new();
        for fd in md.fields() {
            fields.push(self.field(&fd, &mut oneofs)?);
        }
        let mut by_name = HashMap::with_capacity(fields.len() * 2);
        for (j, fd) in md.fields().enumerate() {
            by_name.insert(fd.name().into(), j);
        }
        for (j, fd) in md.fields().enumerate() {
            by_name.insert(fd.json_name().into(), j);
        }
        // `fields()` is in number order, so `by_name`'s indices hold after this no-op sort.
        debug_assert!(fields.windows(2).all(|w| w[0].number < w[1].number));
        let max = fields.last().map_or(0, |f| f.number);
        let dense = if max <= MAX_DENSE_NUMBER {
            let mut dense = vec![0u16; max as usize + 1];
            for (j, f) in fields.iter().enumerate() {
                dense[f.number as usize] = j as u16 + 1;
            }
            dense
        } else {
            Vec::new()
        };
        self.types[i] = Type {
            fields,
            dense,
            by_name,
            extended: md.extensions().len() > 0,
        };
        Ok(Ty::Message(i))
    }

    fn field(
        &mut self,
        fd: &FieldDescriptor,
        oneofs: &mut Vec<String>,
    ) -> Result<Field, HasGroups> {
        if fd.is_group() {
            return Err(HasGroups);
        }
        let (card, ty) = if fd.is_map() {
            let Kind::Message(entry) = fd.kind() else {
                return Err(HasGroups);
            };
            let key = Scalar::of(&entry.map_entry_key_field().kind()).ok_or(HasGroups)?;
            let value = self.kind(&entry.map_entry_value_field())?;
            (Card::Map { key, value }, Ty::Scalar(Scalar::Bool))
        } else if fd.is_list() {
            let packed = fd.is_packed();
            (Card::List { packed }, self.kind(fd)?)
        } else {
            let oneof = match fd.containing_oneof() {
                Some(o) if !o.is_synthetic() => {
                    let at = match oneofs.iter().position(|n| n == o.name()) {
                        Some(at) => at,
                        None => {
                            oneofs.push(o.name().to_owned());
                            oneofs.len() - 1
                        }
                    };
                    Some(at as u32)
                }
                _ => None,
            };
            let presence = fd.supports_presence();
            (Card::One { presence, oneof }, self.kind(fd)?)
        };
        let mut key = serde_json::to_vec(fd.json_name()).unwrap_or_default();
        key.push(b':');
        Ok(Field {
            number: fd.number(),
            key: key.into_boxed_slice(),
            ty,
            card,
        })
    }

    fn kind(&mut self, fd: &FieldDescriptor) -> Result<Ty, HasGroups> {
        if fd.is_group() {
            return Err(HasGroups);
        }
        Ok(match fd.kind() {
            Kind::Message(md) => self.message(&md)?,
            Kind::Enum(ed) => Ty::Enum(self.enumeration(&ed)),
            other => Ty::Scalar(Scalar::of(&other).ok_or(HasGroups)?),
        })
    }

    fn enumeration(&mut self, ed: &EnumDescriptor) -> usize {
        if let Some(&i) = self.enum_index.get(ed.full_name()) {
            return i;
        }
        let mut names: Vec<(i32, Box<[u8]>)> = Vec::new();
        for v in ed.values() {
            let n = v.number();
            if names.iter().any(|(m, _)| *m == n) {
                continue;
            }
            let name = ed
                .get_value(n)
                .map_or_else(|| v.name().to_owned(), |v| v.name().to_owned());
            let quoted = serde_json::to_vec(&name).unwrap_or_default();
            names.push((n, quoted.into_boxed_slice()));
        }
        names.sort_by_key(|(n, _)| *n);
        let i = self.enums.len();
        self.enums.push(EnumPlan {
            desc: ed.clone(),
            null: ed.full_name() == "google.protobuf.NullValue",
            default: ed.default_value().number(),
            names,
        });
        self.enum_index.insert(ed.full_name().to_owned(), i);
        i
    }
}
