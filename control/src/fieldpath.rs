//! Field paths (`order_id`, `shop.id`, `filter.minTotalCents`, `labels[k]`) resolved
//! through a protobuf message type: the one resolver behind the validation of
//! `google.api.http` rules (`validate/api.rs`) and the gateway's HTTP ⇄ gRPC transcoding
//! (`portico-grpc-dynamic`), so a path the configuration accepts is a path the gateway
//! binds. How requests name fields is described in docs/PROTOCOL.md.

use prost_reflect::{FieldDescriptor, Kind, MessageDescriptor};

/// How a path names its fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Syntax {
    /// As a `google.api.http` rule writes it (template variables, `body`, `response_body`):
    /// proto field names only; every segment but the last is a singular message field (a
    /// well-known `google.protobuf` type included).
    Rule,
    /// As an HTTP request writes it (query parameter names, the path variables the route
    /// stage captured): proto names or lowerCamelCase JSON names; the last segment may be
    /// `name[key]`, one entry of a map field; well-known types are not crossed (a request
    /// gives them whole, in their JSON string form).
    Request,
}

/// A field path resolved against a message type: the chain of fields from the top, and
/// a map key when the last segment was `name[key]`.
#[derive(Debug, Clone)]
pub struct FieldPath {
    /// The singular message fields crossed, from the top.
    parents: Vec<FieldDescriptor>,
    leaf: FieldDescriptor,
    map_key: Option<String>,
}

impl FieldPath {
    /// The singular message fields crossed to reach the leaf, from the top.
    pub fn parents(&self) -> &[FieldDescriptor] {
        &self.parents
    }

    /// The field the path ends at.
    pub fn leaf(&self) -> &FieldDescriptor {
        &self.leaf
    }

    /// The top-level field of the path (the leaf itself for a one-segment path).
    pub fn first(&self) -> &FieldDescriptor {
        self.parents.first().unwrap_or(&self.leaf)
    }

    /// The key of `name[key]` (only with [`Syntax::Request`]).
    pub fn map_key(&self) -> Option<&str> {
        self.map_key.as_deref()
    }

    /// The path by proto names, without a map key: `filter.min_total_cents`.
    pub fn proto_path(&self) -> String {
        let mut s = String::new();
        for f in self.parents.iter().chain(std::iter::once(&self.leaf)) {
            if !s.is_empty() {
                s.push('.');
            }
            s.push_str(f.name());
        }
        s
    }

    /// The rule of a path variable (`google.api.http`: a variable binds one value): the
    /// leaf is singular and a scalar or a well-known `google.protobuf` type. The errors
    /// name the leaf as `<message>.<field>`.
    pub fn check_scalar(&self) -> Result<(), String> {
        let leaf = &self.leaf;
        if leaf.is_list() || leaf.is_map() || self.map_key.is_some() {
            return Err(format!("{} is repeated", leaf.full_name()));
        }
        if let Kind::Message(m) = leaf.kind() {
            if !is_well_known(&m) {
                return Err(format!("{} is a message, not a scalar", leaf.full_name()));
            }
        }
        Ok(())
    }
}

/// Resolves the dotted `path` against `msg`. The errors say which segment fails:
/// `<message> has no field "<segment>"`, `<message>.<segment> is not a singular message
/// field`, `<message>.<field> is not a map` (a `name[key]` of a field that is not a map).
pub fn resolve(msg: &MessageDescriptor, path: &str, syntax: Syntax) -> Result<FieldPath, String> {
    let mut parents = Vec::new();
    let mut current = msg.clone();
    let mut segments = path.split('.').peekable();
    while let Some(segment) = segments.next() {
        let last = segments.peek().is_none();
        let (name, key) = match syntax {
            Syntax::Request if last => split_map_key(segment),
            _ => (segment, None),
        };
        let Some(fd) = lookup(&current, name, syntax) else {
            return Err(format!("{} has no field {name:?}", current.full_name()));
        };
        if last {
            if key.is_some() && !fd.is_map() {
                return Err(format!("{} is not a map", fd.full_name()));
            }
            return Ok(FieldPath {
                parents,
                leaf: fd,
                map_key: key.map(str::to_owned),
            });
        }
        match fd.kind() {
            Kind::Message(m)
                if !fd.is_list()
                    && !fd.is_map()
                    && (syntax == Syntax::Rule || !is_well_known(&m)) =>
            {
                current = m;
            }
            _ => {
                return Err(format!(
                    "{}.{name} is not a singular message field",
                    current.full_name()
                ))
            }
        }
        parents.push(fd);
    }
    // `split` yields at least one segment, and the last one returns above.
    Err(format!("{} has no field {path:?}", msg.full_name()))
}

/// One field of `msg` by name: the proto name, or with [`Syntax::Request`] also the
/// lowerCamelCase JSON name.
pub fn lookup(msg: &MessageDescriptor, name: &str, syntax: Syntax) -> Option<FieldDescriptor> {
    match syntax {
        Syntax::Rule => msg.get_field_by_name(name),
        Syntax::Request => msg
            .get_field_by_name(name)
            .or_else(|| msg.get_field_by_json_name(name)),
    }
}

/// Whether `md` is a well-known `google.protobuf` type (written in JSON by its own form).
pub fn is_well_known(md: &MessageDescriptor) -> bool {
    md.full_name().starts_with("google.protobuf.")
}

/// `labels[k]` → (`labels`, `k`); anything else is a plain name.
fn split_map_key(segment: &str) -> (&str, Option<&str>) {
    match (segment.find('['), segment.strip_suffix(']')) {
        (Some(i), Some(inner)) => match (segment.get(..i), inner.get(i + 1..)) {
            (Some(name), Some(key)) => (name, Some(key)),
            _ => (segment, None),
        },
        _ => (segment, None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost_reflect::prost_types::{
        field_descriptor_proto::{Label, Type},
        DescriptorProto, FieldDescriptorProto, FileDescriptorProto, MessageOptions,
    };
    use prost_reflect::DescriptorPool;

    fn field(name: &str, number: i32, ty: Type, type_name: Option<&str>) -> FieldDescriptorProto {
        FieldDescriptorProto {
            name: Some(name.into()),
            number: Some(number),
            label: Some(Label::Optional as i32),
            r#type: Some(ty as i32),
            type_name: type_name.map(str::to_owned),
            json_name: None,
            ..Default::default()
        }
    }

    fn repeated(f: FieldDescriptorProto) -> FieldDescriptorProto {
        FieldDescriptorProto {
            label: Some(Label::Repeated as i32),
            ..f
        }
    }

    /// `t.Req{order_id, shop: Shop{shop_id}, tags[], labels<string,string>, at: Timestamp,
    /// shops[]: Shop}`.
    fn request() -> MessageDescriptor {
        let timestamp = FileDescriptorProto {
            name: Some("google/protobuf/timestamp.proto".into()),
            package: Some("google.protobuf".into()),
            syntax: Some("proto3".into()),
            message_type: vec![DescriptorProto {
                name: Some("Timestamp".into()),
                field: vec![field("seconds", 1, Type::Int64, None)],
                ..Default::default()
            }],
            ..Default::default()
        };
        let file = FileDescriptorProto {
            name: Some("t.proto".into()),
            package: Some("t".into()),
            syntax: Some("proto3".into()),
            dependency: vec!["google/protobuf/timestamp.proto".into()],
            message_type: vec![
                DescriptorProto {
                    name: Some("Shop".into()),
                    field: vec![field("shop_id", 1, Type::String, None)],
                    ..Default::default()
                },
                DescriptorProto {
                    name: Some("Req".into()),
                    field: vec![
                        field("order_id", 1, Type::String, None),
                        field("shop", 2, Type::Message, Some(".t.Shop")),
                        repeated(field("tags", 3, Type::String, None)),
                        repeated(field(
                            "labels",
                            4,
                            Type::Message,
                            Some(".t.Req.LabelsEntry"),
                        )),
                        field("at", 5, Type::Message, Some(".google.protobuf.Timestamp")),
                        repeated(field("shops", 6, Type::Message, Some(".t.Shop"))),
                    ],
                    nested_type: vec![DescriptorProto {
                        name: Some("LabelsEntry".into()),
                        field: vec![
                            field("key", 1, Type::String, None),
                            field("value", 2, Type::String, None),
                        ],
                        options: Some(MessageOptions {
                            map_entry: Some(true),
                            ..Default::default()
                        }),
                        ..Default::default()
                    }],
                    ..Default::default()
                },
            ],
            ..Default::default()
        };
        let mut pool = DescriptorPool::new();
        pool.add_file_descriptor_protos([timestamp, file]).unwrap();
        pool.get_message_by_name("t.Req").unwrap()
    }

    #[test]
    fn rule_paths_use_proto_names_and_cross_singular_messages() {
        let req = request();
        let p = resolve(&req, "shop.shop_id", Syntax::Rule).unwrap();
        assert_eq!(p.proto_path(), "shop.shop_id");
        assert_eq!(p.first().name(), "shop");
        assert_eq!(p.leaf().name(), "shop_id");
        assert!(p.check_scalar().is_ok());
        // Well-known types are crossed in rules.
        assert!(resolve(&req, "at.seconds", Syntax::Rule).is_ok());
        assert_eq!(
            resolve(&req, "orderId", Syntax::Rule).unwrap_err(),
            r#"t.Req has no field "orderId""#
        );
        assert_eq!(
            resolve(&req, "labels[k]", Syntax::Rule).unwrap_err(),
            r#"t.Req has no field "labels[k]""#
        );
        assert_eq!(
            resolve(&req, "shop.nope", Syntax::Rule).unwrap_err(),
            r#"t.Shop has no field "nope""#
        );
        assert_eq!(
            resolve(&req, "tags.x", Syntax::Rule).unwrap_err(),
            "t.Req.tags is not a singular message field"
        );
        assert_eq!(
            resolve(&req, "shops.shop_id", Syntax::Rule).unwrap_err(),
            "t.Req.shops is not a singular message field"
        );
    }

    #[test]
    fn path_variables_end_at_a_scalar() {
        let req = request();
        let check = |path| resolve(&req, path, Syntax::Rule).unwrap().check_scalar();
        assert_eq!(check("tags").unwrap_err(), "t.Req.tags is repeated");
        assert_eq!(check("labels").unwrap_err(), "t.Req.labels is repeated");
        assert_eq!(
            check("shop").unwrap_err(),
            "t.Req.shop is a message, not a scalar"
        );
        assert!(check("at").is_ok());
        assert!(check("order_id").is_ok());
    }

    #[test]
    fn request_paths_take_json_names_and_map_keys() {
        let req = request();
        let p = resolve(&req, "shop.shopId", Syntax::Request).unwrap();
        assert_eq!(p.proto_path(), "shop.shop_id");
        assert_eq!(p.map_key(), None);
        let p = resolve(&req, "labels[a.b]", Syntax::Request);
        // A dot inside the key splits the path: the first segment is then not a message.
        assert!(p.is_err());
        let p = resolve(&req, "labels[k]", Syntax::Request).unwrap();
        assert_eq!(
            (p.proto_path().as_str(), p.map_key()),
            ("labels", Some("k"))
        );
        assert!(p.check_scalar().is_err());
        assert!(resolve(&req, "labels[]", Syntax::Request).is_ok());
        assert_eq!(
            resolve(&req, "tags[k]", Syntax::Request).unwrap_err(),
            "t.Req.tags is not a map"
        );
        // Well-known types are given whole in requests.
        assert!(resolve(&req, "at.seconds", Syntax::Request).is_err());
        assert!(resolve(&req, "orderId", Syntax::Request).is_ok());
        assert!(resolve(&req, "", Syntax::Request).is_err());
        assert!(resolve(&req, "shop.", Syntax::Request).is_err());
    }
}
