//! Shared fixtures of the validation tests: a tree with a descriptor and two clusters, API
//! documents, the reason a document was refused.

use crate::snapshot::Snapshot;
use crate::tree::Tree;
use crate::validate::build_snapshot;
use prost_reflect::prost_types::{
    field_descriptor_proto::{Label, Type},
    DescriptorProto, FieldDescriptorProto, FileDescriptorProto, MethodDescriptorProto,
    ServiceDescriptorProto,
};
use prost_reflect::DescriptorPool;
use serde_json::json;
use sha2::{Digest, Sha256};

pub(super) fn field(
    name: &str,
    number: i32,
    ty: Type,
    type_name: Option<&str>,
) -> FieldDescriptorProto {
    FieldDescriptorProto {
        name: Some(name.into()),
        number: Some(number),
        label: Some(Label::Optional as i32),
        r#type: Some(ty as i32),
        type_name: type_name.map(str::to_owned),
        ..Default::default()
    }
}

/// A FileDescriptorSet with `demo.order.v1.OrderService/GetOrder(GetOrderRequest{order_id,
/// page{size}, tags[]}) -> Order{id}` and a streaming `Watch`.
pub(super) fn descriptor() -> Vec<u8> {
    let file = FileDescriptorProto {
        name: Some("demo/order.proto".into()),
        package: Some("demo.order.v1".into()),
        syntax: Some("proto3".into()),
        message_type: vec![
            DescriptorProto {
                name: Some("Page".into()),
                field: vec![field("size", 1, Type::Int32, None)],
                ..Default::default()
            },
            DescriptorProto {
                name: Some("GetOrderRequest".into()),
                field: vec![
                    field("order_id", 1, Type::String, None),
                    field("page", 2, Type::Message, Some(".demo.order.v1.Page")),
                    FieldDescriptorProto {
                        label: Some(Label::Repeated as i32),
                        ..field("tags", 3, Type::String, None)
                    },
                ],
                ..Default::default()
            },
            DescriptorProto {
                name: Some("Order".into()),
                field: vec![field("id", 1, Type::String, None)],
                ..Default::default()
            },
        ],
        service: vec![ServiceDescriptorProto {
            name: Some("OrderService".into()),
            method: vec![
                MethodDescriptorProto {
                    name: Some("GetOrder".into()),
                    input_type: Some(".demo.order.v1.GetOrderRequest".into()),
                    output_type: Some(".demo.order.v1.Order".into()),
                    ..Default::default()
                },
                MethodDescriptorProto {
                    name: Some("Watch".into()),
                    input_type: Some(".demo.order.v1.GetOrderRequest".into()),
                    output_type: Some(".demo.order.v1.Order".into()),
                    server_streaming: Some(true),
                    ..Default::default()
                },
            ],
            ..Default::default()
        }],
        ..Default::default()
    };
    let mut pool = DescriptorPool::new();
    pool.add_file_descriptor_proto(file).unwrap();
    pool.encode_to_vec()
}

pub(super) fn sha(b: &[u8]) -> String {
    hex::encode(Sha256::digest(b))
}

pub(super) struct T(pub(super) Tree);

impl T {
    pub(super) fn new() -> T {
        let d = descriptor();
        let mut t = T(Tree {
            generation: 7,
            ..Tree::default()
        });
        t.bytes(&format!("descriptors/{}", sha(&d)), d);
        t.put(
            "clusters/order-svc",
            json!({"protocol": "grpc", "endpoints": [{"addr": "127.0.0.1:50051"}]}),
        );
        t.put(
            "clusters/web",
            json!({"protocol": "http", "endpoints": [{"addr": "web.internal:8080", "weight": 2}]}),
        );
        t
    }
    pub(super) fn put(&mut self, path: &str, v: serde_json::Value) -> &mut Self {
        self.bytes(path, serde_json::to_vec(&v).unwrap())
    }
    pub(super) fn bytes(&mut self, path: &str, b: Vec<u8>) -> &mut Self {
        self.0.docs.insert(path.into(), b);
        self
    }
    pub(super) fn api(&mut self, v: serde_json::Value) -> &mut Self {
        let id = v["id"].as_str().unwrap().to_owned();
        self.put(&format!("apis/{id}"), v)
    }
    pub(super) fn build(&self, prev: Option<&Snapshot>) -> Snapshot {
        build_snapshot(&self.0, prev)
    }
}

pub(super) fn grpc_api(id: &str, path: &str) -> serde_json::Value {
    json!({
        "id": id, "version": 1,
        "http": {"method": "get", "path": path},
        "backend": {"cluster": "order-svc", "timeout_ms": 800,
            "grpc": {"service": "demo.order.v1.OrderService", "method": "GetOrder", "descriptor": sha(&descriptor())}},
    })
}

pub(super) fn http_api(id: &str, method: &str, path: &str) -> serde_json::Value {
    json!({
        "id": id,
        "http": {"method": method, "path": path},
        "backend": {"cluster": "web", "http": {}},
        "auth": "none",
    })
}

pub(super) fn reason(s: &Snapshot, path: &str) -> String {
    s.rejected
        .iter()
        .find(|r| r.path == path)
        .map(|r| r.reason.clone())
        .unwrap_or_else(|| panic!("{path} not rejected: {:?}", s.rejected))
}

/// Applies `edit` to a good API document and returns the rejection reason.
pub(super) fn api_reason(edit: impl FnOnce(&mut serde_json::Value)) -> String {
    let mut v = grpc_api("order.get", "/v1/orders/{order_id}");
    edit(&mut v);
    let s = T::new().put("apis/order.get", v).build(None);
    assert!(
        !s.apis.contains_key("order.get"),
        "{:?}",
        s.apis["order.get"].definition
    );
    reason(&s, "apis/order.get")
}
