//! The gRPC demo services (`--grpc ADDR`): `demo.order.v1.OrderService` and
//! `demo.product.v1.ProductService` (`protos/demo/*.proto`, annotated with
//! `google.api.http`), plus gRPC server reflection (v1 and v1alpha).
//!
//! The services are implemented without generated stubs: requests and replies are
//! [`prost_reflect::DynamicMessage`]s of the demo descriptor set, which is compiled from the
//! `.proto` sources of the repository's `protos/` folder, embedded in this crate, with
//! `protox` (no `protoc` anywhere); the codec is `portico_grpc_dynamic`'s. The same
//! bytes are what the gateway loads from `descriptors/<sha256>.pb`, see
//! [`descriptor_set_bytes`].
//!
//! # Behaviour
//!
//! | method | answer |
//! |---|---|
//! | `OrderService/GetOrder`, `GetOrderStatus` | a fixed order with the id asked for; id `missing` → NOT_FOUND |
//! | `OrderService/CreateOrder` | the request as an order, id `ord-NNNNNN`; `qty` ≤ 0 → INVALID_ARGUMENT, item `duplicate` → ALREADY_EXISTS |
//! | `OrderService/ListOrders` | two orders and `query` = the request as received; `page_size` < 0 → INVALID_ARGUMENT |
//! | `OrderService/UpdateOrder` | the `order` as given; `labels["update_mask"]` = the mask's paths joined by `,` |
//! | `OrderService/CancelOrder` | the order, CANCELLED, with `cancel_reason` and `refunded`; id `missing` → NOT_FOUND |
//! | `ProductService/GetProduct` | a product named as asked; a last segment `missing` → NOT_FOUND |
//! | `ProductService/ListProducts` | two products under `parent` and `query` = the request |
//! | `ProductService/UpdateProduct` | the `product` as given |
//! | `ProductService/SearchProducts` | one product titled after `query` |
//! | `ProductService/GetFile` | a `File` for the `path` captured |
//!
//! Every order carries `request_id` = the call's `x-portico-request-id` metadata.
//!
//! # Fault injection (request metadata, on every method)
//!
//! - `x-demo-delay-ms: N`: sleep N ms before answering;
//! - `x-demo-status: S`: answer the gRPC status S (a code number `5` or a name `NOT_FOUND`,
//!   any case) with the message `injected <NAME>` (after the delay, if any); `0`/`OK` is
//!   ignored;
//! - `x-demo-hang: 1`: never answer, until the client goes away.
//!
//! Every call is counted in [`GrpcStats`] when it arrives (before any fault), and every
//! answer carries the metadata `x-demo-instance: <bound address>`.
//!
//! # What the backend received
//!
//! A call with the metadata `x-demo-echo-metadata: 1` is answered (replies and statuses
//! alike) with the metadata `x-demo-metadata`: the request's ASCII metadata as a JSON object,
//! key → value (repeated keys joined with `", "`, non-ASCII characters `\u`-escaped), so a
//! test can see exactly what a gateway passed on; [`received_metadata`] reads it back.

use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use std::time::Duration;

use portico_grpc_dynamic::{code_by_name, code_name_and_status, DynamicCodec};
use prost_reflect::{DescriptorPool, DynamicMessage, MessageDescriptor, ReflectMessage, Value};
use serde_json::json;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tonic::metadata::{MetadataMap, MetadataValue};
use tonic::{Code, Status};

use crate::control::Control;

/// The `.proto` sources of the demo descriptor set, by import name.
pub const PROTO_FILES: &[(&str, &str)] = &[
    (
        "google/api/http.proto",
        include_str!("../../protos/google/api/http.proto"),
    ),
    (
        "google/api/annotations.proto",
        include_str!("../../protos/google/api/annotations.proto"),
    ),
    (
        "demo/order.proto",
        include_str!("../../protos/demo/order.proto"),
    ),
    (
        "demo/product.proto",
        include_str!("../../protos/demo/product.proto"),
    ),
];

/// The demo files compiled into the set (their imports are included too).
const DEMO_FILES: &[&str] = &["demo/order.proto", "demo/product.proto"];

/// The order service's full name.
pub const ORDER_SERVICE: &str = "demo.order.v1.OrderService";
/// The product service's full name.
pub const PRODUCT_SERVICE: &str = "demo.product.v1.ProductService";

/// Resolves the embedded sources, then the well-known types bundled with protox.
struct EmbeddedFiles;

impl protox::file::FileResolver for EmbeddedFiles {
    fn open_file(&self, name: &str) -> Result<protox::file::File, protox::Error> {
        match PROTO_FILES.iter().find(|(n, _)| *n == name) {
            Some((n, source)) => protox::file::File::from_source(n, source),
            None => protox::file::GoogleFileResolver::new().open_file(name),
        }
    }
}

/// Compiles the demo protos into an encoded `FileDescriptorSet` (imports included, no source
/// info). Uses `protox::Compiler` and its own encoding so the `google.api.http` method
/// options survive (a round trip through `prost_types` would drop them).
pub fn compile_descriptor_set() -> Result<Vec<u8>, protox::Error> {
    let mut compiler = protox::Compiler::with_file_resolver(EmbeddedFiles);
    compiler.include_imports(true).include_source_info(false);
    compiler.open_files(DEMO_FILES)?;
    Ok(compiler.encode_file_descriptor_set())
}

/// The encoded `FileDescriptorSet` of the demo protos (compiled once per process): what the
/// registry stores as `descriptors/<sha256>` and the gateway decodes with prost-reflect.
#[allow(clippy::expect_used)] // The embedded sources are fixed and compiled by every test run.
pub fn descriptor_set_bytes() -> &'static [u8] {
    static BYTES: OnceLock<Vec<u8>> = OnceLock::new();
    BYTES.get_or_init(|| compile_descriptor_set().expect("the embedded demo protos compile"))
}

/// The demo descriptor set as a prost-reflect pool.
#[allow(clippy::expect_used)] // As above: fixed, tested input.
pub fn descriptor_pool() -> &'static DescriptorPool {
    static POOL: OnceLock<DescriptorPool> = OnceLock::new();
    POOL.get_or_init(|| {
        DescriptorPool::decode(descriptor_set_bytes()).expect("the demo descriptor set decodes")
    })
}

/// Counters of the gRPC demo server, shared by every connection.
#[derive(Debug, Default)]
pub struct GrpcStats {
    /// Calls received (counted on arrival, before any fault).
    pub requests: AtomicU64,
    /// Calls being answered now (a hanging one stays until its client goes away).
    pub in_flight: AtomicI64,
    /// Calls received per full method path (`/demo.order.v1.OrderService/GetOrder`).
    pub by_method: std::sync::Mutex<HashMap<String, u64>>,
}

impl GrpcStats {
    /// How many calls of `method` (its full path) arrived.
    pub fn calls(&self, method: &str) -> u64 {
        self.by_method
            .lock()
            .map(|m| m.get(method).copied().unwrap_or(0))
            .unwrap_or(0)
    }
}

/// Serves the gRPC demo services on `listener` until the process ends.
pub async fn serve_grpc(listener: TcpListener) -> anyhow::Result<()> {
    serve_grpc_with(listener, Arc::new(GrpcStats::default())).await
}

/// Serves the gRPC demo services on `listener`, counting calls in `stats`.
pub async fn serve_grpc_with(listener: TcpListener, stats: Arc<GrpcStats>) -> anyhow::Result<()> {
    serve_grpc_controlled(listener, stats, Arc::new(Control::default())).await
}

/// Serves the gRPC demo services and the standard `grpc.health.v1.Health` service on
/// `listener`, following `control` (load metadata, faults, sleep: see [`crate::control`]).
pub async fn serve_grpc_controlled(
    listener: TcpListener,
    stats: Arc<GrpcStats>,
    control: Arc<Control>,
) -> anyhow::Result<()> {
    let instance = listener.local_addr()?;
    let demo = Arc::new(Demo::new(instance, stats, control.clone())?);
    let (reporter, health) = tonic_health::server::health_reporter();
    // The health status follows the sleep switch.
    let watcher = tokio::spawn(async move {
        let mut last = None;
        loop {
            let serving = !control.asleep();
            if last != Some(serving) {
                let status = if serving {
                    tonic_health::ServingStatus::Serving
                } else {
                    tonic_health::ServingStatus::NotServing
                };
                reporter.set_service_status("", status).await;
                last = Some(serving);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
    let _watcher = AbortOnDrop(watcher);
    let reflection_v1 = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(descriptor_set_bytes())
        .build_v1()?;
    let reflection_v1alpha = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(descriptor_set_bytes())
        .build_v1alpha()?;
    tonic::transport::Server::builder()
        .add_service(DemoServer::<OrderKind>::new(demo.clone()))
        .add_service(DemoServer::<ProductKind>::new(demo))
        .add_service(reflection_v1)
        .add_service(reflection_v1alpha)
        .add_service(health)
        .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener))
        .await?;
    Ok(())
}

/// Starts the gRPC demo services on `127.0.0.1:0` on the caller's runtime (for in-process
/// tests). Returns the bound address and the server task.
pub async fn spawn(
    stats: Arc<GrpcStats>,
) -> std::io::Result<(SocketAddr, JoinHandle<anyhow::Result<()>>)> {
    let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
    let addr = listener.local_addr()?;
    Ok((addr, tokio::spawn(serve_grpc_with(listener, stats))))
}

// ---------------------------------------------------------------------------------------
// The services.

/// Which service a [`DemoServer`] serves.
pub trait ServiceKind: Send + Sync + 'static {
    const NAME: &'static str;
}

/// Marker: `demo.order.v1.OrderService`.
#[derive(Debug)]
pub struct OrderKind;
impl ServiceKind for OrderKind {
    const NAME: &'static str = ORDER_SERVICE;
}

/// Marker: `demo.product.v1.ProductService`.
#[derive(Debug)]
pub struct ProductKind;
impl ServiceKind for ProductKind {
    const NAME: &'static str = PRODUCT_SERVICE;
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// Aborts a task when dropped.
struct AbortOnDrop(JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The shared state of the demo services.
struct Demo {
    instance: SocketAddr,
    control: Arc<Control>,
    stats: Arc<GrpcStats>,
    next_order: AtomicU64,
    /// Full method path → (input, output) message types.
    methods: HashMap<String, (MessageDescriptor, MessageDescriptor)>,
}

impl Demo {
    fn new(
        instance: SocketAddr,
        stats: Arc<GrpcStats>,
        control: Arc<Control>,
    ) -> anyhow::Result<Self> {
        let pool = descriptor_pool();
        let mut methods = HashMap::new();
        for name in [ORDER_SERVICE, PRODUCT_SERVICE] {
            let service = pool
                .get_service_by_name(name)
                .ok_or_else(|| anyhow::anyhow!("service {name} missing from the demo set"))?;
            for m in service.methods() {
                methods.insert(format!("/{}/{}", name, m.name()), (m.input(), m.output()));
            }
        }
        Ok(Demo {
            instance,
            control,
            stats,
            next_order: AtomicU64::new(1),
            methods,
        })
    }
}

/// A tonic service for one of the demo services, without generated code.
pub struct DemoServer<K> {
    demo: Arc<Demo>,
    _kind: std::marker::PhantomData<fn() -> K>,
}

impl<K> Clone for DemoServer<K> {
    fn clone(&self) -> Self {
        DemoServer {
            demo: self.demo.clone(),
            _kind: std::marker::PhantomData,
        }
    }
}

impl<K: ServiceKind> DemoServer<K> {
    fn new(demo: Arc<Demo>) -> Self {
        DemoServer {
            demo,
            _kind: std::marker::PhantomData,
        }
    }
}

impl<K: ServiceKind> tonic::server::NamedService for DemoServer<K> {
    const NAME: &'static str = K::NAME;
}

impl<K, B> tonic::codegen::Service<http::Request<B>> for DemoServer<K>
where
    K: ServiceKind,
    B: tonic::codegen::Body + Send + 'static,
    B::Error: Into<tonic::codegen::StdError> + Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = std::convert::Infallible;
    type Future = BoxFuture<Result<Self::Response, Self::Error>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let path = req.uri().path().to_owned();
        let demo = self.demo.clone();
        Box::pin(async move {
            let Some((input, _)) = demo.methods.get(&path).cloned() else {
                return Ok(Status::unimplemented(format!("no method {path}")).into_http());
            };
            let mut grpc = tonic::server::Grpc::new(DynamicCodec::server(input));
            let method = Method { demo, path };
            Ok(grpc.unary(method, req).await)
        })
    }
}

/// One call of one method.
struct Method {
    demo: Arc<Demo>,
    path: String,
}

impl tonic::server::UnaryService<DynamicMessage> for Method {
    type Response = DynamicMessage;
    type Future = BoxFuture<Result<tonic::Response<DynamicMessage>, Status>>;

    fn call(&mut self, request: tonic::Request<DynamicMessage>) -> Self::Future {
        let demo = self.demo.clone();
        let path = std::mem::take(&mut self.path);
        Box::pin(async move {
            let stats = demo.stats.clone();
            stats.requests.fetch_add(1, Ordering::Relaxed);
            if let Ok(mut m) = stats.by_method.lock() {
                *m.entry(path.clone()).or_insert(0) += 1;
            }
            stats.in_flight.fetch_add(1, Ordering::Relaxed);
            let _in_flight = InFlight(stats);
            let instance = demo.instance;
            let echo = metadata_str(request.metadata(), "x-demo-echo-metadata")
                .is_some_and(|v| !v.is_empty() && v != "0" && v != "false")
                .then(|| metadata_json(request.metadata()))
                .and_then(|json| MetadataValue::try_from(json).ok());
            let result = match controlled(&demo.control).await {
                Ok(()) => answer(&demo, &path, request).await,
                Err(status) => Err(status),
            };
            match result {
                Ok(reply) => {
                    let mut response = tonic::Response::new(reply);
                    if let Ok(v) = MetadataValue::try_from(instance.to_string()) {
                        response.metadata_mut().insert("x-demo-instance", v);
                    }
                    if let Some(v) = demo
                        .control
                        .load()
                        .and_then(|l| MetadataValue::try_from(l).ok())
                    {
                        response.metadata_mut().insert("x-portico-load", v);
                    }
                    if let Some(v) = echo {
                        response.metadata_mut().insert(ECHO_METADATA, v);
                    }
                    Ok(response)
                }
                Err(mut status) => {
                    if let Some(v) = echo {
                        status.metadata_mut().insert(ECHO_METADATA, v);
                    }
                    Err(status)
                }
            }
        })
    }
}

/// The process-wide switches: asleep → `UNAVAILABLE`; the delay; a status ≥ 500 →
/// `UNAVAILABLE`.
async fn controlled(control: &Control) -> Result<(), Status> {
    if control.asleep() {
        return Err(Status::unavailable("the demo backend is asleep"));
    }
    let (delay, status) = control.faults();
    if let Some(ms) = delay {
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }
    if status.is_some_and(|s| s >= 500) {
        return Err(Status::unavailable("injected failure"));
    }
    Ok(())
}

/// Decrements `in_flight` when the call ends, however it ends (a client going away drops
/// the future of a hanging call).
struct InFlight(Arc<GrpcStats>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Parses `x-demo-status`: a code number or name, any case.
pub fn parse_code(s: &str) -> Option<Code> {
    let s = s.trim();
    if let Ok(n) = s.parse::<i32>() {
        return (0..=16).contains(&n).then(|| Code::from_i32(n));
    }
    code_by_name(&s.to_ascii_uppercase().replace('-', "_"))
}

/// The reply metadata carrying what the backend received (see the module docs).
pub const ECHO_METADATA: &str = "x-demo-metadata";

/// The request's ASCII metadata as a JSON object (see the module docs), in ASCII.
fn metadata_json(md: &MetadataMap) -> String {
    let mut map: std::collections::BTreeMap<String, String> = std::collections::BTreeMap::new();
    for entry in md.iter() {
        if let tonic::metadata::KeyAndValueRef::Ascii(key, value) = entry {
            let value = String::from_utf8_lossy(value.as_encoded_bytes()).into_owned();
            map.entry(key.as_str().to_owned())
                .and_modify(|v| {
                    v.push_str(", ");
                    v.push_str(&value);
                })
                .or_insert(value);
        }
    }
    let json = serde_json::to_string(&map).unwrap_or_default();
    let mut ascii = String::with_capacity(json.len());
    for c in json.chars() {
        if c.is_ascii() {
            ascii.push(c);
        } else {
            let mut units = [0u16; 2];
            for u in c.encode_utf16(&mut units) {
                ascii.push_str(&format!("\\u{u:04x}"));
            }
        }
    }
    ascii
}

/// Reads the `x-demo-metadata` answer (a response header `grpc-metadata-x-demo-metadata`
/// through a gateway) back into key → value.
pub fn received_metadata(value: &str) -> Option<std::collections::BTreeMap<String, String>> {
    serde_json::from_str(value).ok()
}

fn metadata_str<'a>(md: &'a MetadataMap, key: &str) -> Option<&'a str> {
    md.get(key).and_then(|v| v.to_str().ok()).map(str::trim)
}

/// Applies the fault-injection metadata: delay, then hang or status.
async fn inject_faults(md: &MetadataMap) -> Result<(), Status> {
    if let Some(ms) = metadata_str(md, "x-demo-delay-ms").and_then(|v| v.parse::<u64>().ok()) {
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }
    if metadata_str(md, "x-demo-hang").is_some_and(|v| !v.is_empty() && v != "0" && v != "false") {
        std::future::pending::<()>().await;
    }
    if let Some(code) = metadata_str(md, "x-demo-status").and_then(parse_code) {
        if code != Code::Ok {
            let (name, _) = code_name_and_status(code);
            return Err(Status::new(code, format!("injected {name}")));
        }
    }
    Ok(())
}

async fn answer(
    demo: &Demo,
    path: &str,
    request: tonic::Request<DynamicMessage>,
) -> Result<DynamicMessage, Status> {
    inject_faults(request.metadata()).await?;
    let request_id = metadata_str(request.metadata(), "x-portico-request-id")
        .unwrap_or("")
        .to_owned();
    let req = request.into_inner();
    let Some((_, output)) = demo.methods.get(path) else {
        return Err(Status::unimplemented(format!("no method {path}")));
    };
    let output = output.clone();
    let method = path.rsplit('/').next().unwrap_or("");
    match (path.starts_with(&format!("/{ORDER_SERVICE}/")), method) {
        (true, "GetOrder") | (true, "GetOrderStatus") => {
            let id = str_field(&req, "order_id");
            if id == "missing" {
                return Err(Status::not_found(format!("order {id} not found")));
            }
            let shop_id = req
                .get_field_by_name("shop")
                .and_then(|v| v.as_message().map(|m| str_field(m, "id")))
                .filter(|s| !s.is_empty())
                .unwrap_or_else(|| "shop-1".to_owned());
            from_json(output, sample_order(&id, &shop_id, &request_id))
        }
        (true, "CreateOrder") => {
            let qty = req
                .get_field_by_name("qty")
                .and_then(|v| v.as_i32())
                .unwrap_or(0);
            if qty <= 0 {
                return Err(Status::invalid_argument("qty must be positive"));
            }
            if str_field(&req, "item") == "duplicate" {
                return Err(Status::already_exists("an order for item duplicate exists"));
            }
            let mut order = DynamicMessage::new(output);
            copy_same_named(&req, &mut order);
            let n = demo.next_order.fetch_add(1, Ordering::Relaxed);
            order.set_field_by_name("order_id", Value::String(format!("ord-{n:06}")));
            order.set_field_by_name("request_id", Value::String(request_id));
            if !order.has_field_by_name("status") {
                order.set_field_by_name("status", Value::EnumNumber(1));
            }
            if !order.has_field_by_name("created_at") {
                let now = json!("2026-01-02T03:04:05Z");
                set_from_json(&mut order, "created_at", now)?;
            }
            Ok(order)
        }
        (true, "ListOrders") => {
            let page_size = req
                .get_field_by_name("page_size")
                .and_then(|v| v.as_i32())
                .unwrap_or(0);
            if page_size < 0 {
                return Err(Status::invalid_argument("page_size must not be negative"));
            }
            let orders = json!([
                sample_order("41", "shop-1", &request_id),
                sample_order("42", "shop-1", &request_id),
            ]);
            let mut reply = from_json(output, json!({"orders": orders, "totalSize": "2"}))?;
            reply.set_field_by_name("query", Value::Message(req));
            Ok(reply)
        }
        (true, "UpdateOrder") => {
            let order = req
                .get_field_by_name("order")
                .and_then(|v| v.as_message().cloned())
                .unwrap_or_else(|| DynamicMessage::new(output.clone()));
            if str_field(&order, "order_id") == "missing" {
                return Err(Status::not_found("order missing not found"));
            }
            let mut order = order;
            if let Some(mask) = req
                .get_field_by_name("update_mask")
                .and_then(|v| v.as_message().cloned())
            {
                let paths = mask
                    .get_field_by_name("paths")
                    .and_then(|v| {
                        v.as_list().map(|l| {
                            l.iter()
                                .filter_map(|p| p.as_str().map(str::to_owned))
                                .collect::<Vec<_>>()
                                .join(",")
                        })
                    })
                    .unwrap_or_default();
                let key = prost_reflect::MapKey::String("update_mask".to_owned());
                if let Some(Value::Map(m)) = order.get_field_by_name_mut("labels") {
                    m.insert(key, Value::String(paths));
                }
            }
            order.set_field_by_name("request_id", Value::String(request_id));
            Ok(order)
        }
        (true, "CancelOrder") => {
            let id = str_field(&req, "order_id");
            if id == "missing" {
                return Err(Status::not_found(format!("order {id} not found")));
            }
            let mut order = from_json(output, sample_order(&id, "shop-1", &request_id))?;
            order.set_field_by_name("status", Value::EnumNumber(4));
            order.set_field_by_name("cancel_reason", Value::String(str_field(&req, "reason")));
            let refund = req
                .get_field_by_name("refund")
                .and_then(|v| v.as_bool())
                .unwrap_or(false);
            order.set_field_by_name("refunded", Value::Bool(refund));
            Ok(order)
        }
        (false, "GetProduct") => {
            let name = str_field(&req, "name");
            if name.rsplit('/').next() == Some("missing") {
                return Err(Status::not_found(format!("product {name} not found")));
            }
            from_json(output, sample_product(&name))
        }
        (false, "ListProducts") => {
            let page_size = req
                .get_field_by_name("page_size")
                .and_then(|v| v.as_i32())
                .unwrap_or(0);
            if page_size < 0 {
                return Err(Status::invalid_argument("page_size must not be negative"));
            }
            let parent = str_field(&req, "parent");
            let products = json!([
                sample_product(&format!("{parent}/products/p1")),
                sample_product(&format!("{parent}/products/p2")),
            ]);
            let mut reply = from_json(output, json!({ "products": products }))?;
            reply.set_field_by_name("query", Value::Message(req));
            Ok(reply)
        }
        (false, "UpdateProduct") => Ok(req
            .get_field_by_name("product")
            .and_then(|v| v.as_message().cloned())
            .unwrap_or_else(|| DynamicMessage::new(output))),
        (false, "SearchProducts") => {
            let mut product = sample_product("shops/shop-1/products/found");
            product["title"] = json!(str_field(&req, "query"));
            from_json(output, json!({ "products": [product] }))
        }
        (false, "GetFile") => {
            let path = str_field(&req, "path");
            let content_type = match path.rsplit('.').next() {
                Some("png") => "image/png",
                Some("json") => "application/json",
                Some("txt") => "text/plain",
                _ => "application/octet-stream",
            };
            let size = i64::try_from(path.len()).unwrap_or(0) * 100;
            from_json(
                output,
                json!({"path": path, "size": size.to_string(), "contentType": content_type}),
            )
        }
        _ => Err(Status::unimplemented(format!("no method {path}"))),
    }
}

fn sample_order(id: &str, shop_id: &str, request_id: &str) -> serde_json::Value {
    json!({
        "orderId": id,
        "shop": {"id": shop_id, "name": "Demo Shop"},
        "item": "book",
        "qty": 2,
        "status": "ORDER_STATUS_PAID",
        "totalCents": "4200",
        "sequence": "18446744073709551615",
        "createdAt": "2026-01-02T03:04:05Z",
        "shipWithin": "86400s",
        "attributes": {"gift": true, "channel": "web", "score": 4.5},
        "note": "leave at the door",
        "tags": ["demo", "book"],
        "labels": {"source": "demo"},
        "items": [{"sku": "BK-1", "qty": 2, "unitPrice": {"currencyCode": "USD", "units": "21"}}],
        "requestId": request_id,
    })
}

fn sample_product(name: &str) -> serde_json::Value {
    let id = name.rsplit('/').next().unwrap_or(name);
    json!({
        "name": name,
        "title": format!("Demo product {id}"),
        "category": "CATEGORY_BOOKS",
        "priceCents": "1999",
        "stock": "9007199254740993",
        "tags": ["demo"],
        "inventory": {"berlin": 3, "tokyo": 0},
        "updatedAt": "2026-01-02T03:04:05Z",
        "rating": 4.5,
        "thumbnail": "iVBORw0=",
        "weightKg": 0.35,
        "active": true,
    })
}

fn str_field(msg: &DynamicMessage, name: &str) -> String {
    msg.get_field_by_name(name)
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default()
}

fn from_json(desc: MessageDescriptor, value: serde_json::Value) -> Result<DynamicMessage, Status> {
    DynamicMessage::deserialize(desc, value)
        .map_err(|e| Status::internal(format!("building the reply: {e}")))
}

fn set_from_json(
    msg: &mut DynamicMessage,
    field: &str,
    value: serde_json::Value,
) -> Result<(), Status> {
    let Some(fd) = msg.descriptor().get_field_by_name(field) else {
        return Err(Status::internal(format!("no field {field}")));
    };
    let prost_reflect::Kind::Message(md) = fd.kind() else {
        return Err(Status::internal(format!("field {field} is not a message")));
    };
    let v = from_json(md, value)?;
    msg.set_field(&fd, Value::Message(v));
    Ok(())
}

/// Copies every set field of `from` to the field of the same name and type in `to`.
fn copy_same_named(from: &DynamicMessage, to: &mut DynamicMessage) {
    let target = to.descriptor();
    for (fd, value) in from.fields() {
        if let Some(tfd) = target.get_field_by_name(fd.name()) {
            if tfd.kind() == fd.kind() && tfd.cardinality() == fd.cardinality() {
                to.set_field(&tfd, value.clone());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descriptor_set_keeps_the_http_annotations() {
        let pool = descriptor_pool();
        let method = pool
            .get_service_by_name(ORDER_SERVICE)
            .and_then(|s| s.methods().find(|m| m.name() == "GetOrder"))
            .unwrap();
        let ext = pool.get_extension_by_name("google.api.http").unwrap();
        let options = method.options();
        assert!(options.has_extension(&ext));
        let rule = options.get_extension(&ext);
        let rule = rule.as_message().unwrap();
        assert_eq!(str_field(rule, "get"), "/v1/orders/{order_id}");
    }

    #[test]
    fn descriptor_set_is_deterministic() {
        assert_eq!(compile_descriptor_set().unwrap(), descriptor_set_bytes());
    }

    #[test]
    fn received_metadata_is_ascii_json() {
        let mut md = MetadataMap::new();
        md.insert("x-a", MetadataValue::from_static("1"));
        md.append("x-a", MetadataValue::from_static("2"));
        md.insert(
            "x-b",
            MetadataValue::try_from("caf\u{e9}".as_bytes()).unwrap(),
        );
        let json = metadata_json(&md);
        assert!(json.is_ascii(), "{json}");
        let got = received_metadata(&json).unwrap();
        assert_eq!(got["x-a"], "1, 2");
        assert_eq!(got["x-b"], "caf\u{e9}");
    }

    #[test]
    fn codes_parse_by_number_and_name() {
        assert_eq!(parse_code("5"), Some(Code::NotFound));
        assert_eq!(parse_code("not_found"), Some(Code::NotFound));
        assert_eq!(parse_code("UNAVAILABLE"), Some(Code::Unavailable));
        assert_eq!(parse_code("17"), None);
        assert_eq!(parse_code("nope"), None);
    }
}
