//! Turning a backend's interface into draft APIs: compile `.proto` sources in process (protox,
//! with `google/api/annotations.proto` and `http.proto` vendored), accept an encoded
//! `FileDescriptorSet`, or fetch one by gRPC server reflection; then one draft
//! [`v1::ApiDefinition`] per unary RPC that carries a `google.api.http` rule.
//!
//! Descriptors are stored self-contained (all imports included) because gateways decode them
//! on their own; an uploaded set missing the vendored google/api files is completed.

use crate::error::{ApiError, ApiResult, Detail};
use portico_control::v1;
use prost::Message as _;
use prost_reflect::{DescriptorPool, DynamicMessage, MethodDescriptor, Value};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

/// ZooKeeper's default `jute.maxbuffer` is 1 MiB; keep descriptors comfortably below it.
pub const MAX_DESCRIPTOR_BYTES: usize = 1_000_000;

const ANNOTATIONS_PROTO: &str = include_str!("../../protos/google/api/annotations.proto");
const HTTP_PROTO: &str = include_str!("../../protos/google/api/http.proto");

/// Options of an import: where the drafts' calls go and how they are named.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ImportOptions {
    /// The cluster every draft's backend names (required).
    #[serde(default)]
    pub cluster: Option<String>,
    /// `signature` (default) or `none`.
    #[serde(default)]
    pub auth: Option<v1::AuthMode>,
    /// Backend deadline of the drafts (default: the contract's default).
    #[serde(default)]
    pub timeout_ms: Option<u64>,
    /// Only these services (full names); default all.
    #[serde(default)]
    pub services: Option<Vec<String>>,
    /// API ids by method (`pkg.Service/Method` or `pkg.Service.Method`); default
    /// `<service short name without "Service">.<method>`, lowercased.
    #[serde(default)]
    pub ids: BTreeMap<String, String>,
}

/// One RPC with its HTTP rule.
#[derive(Debug, Clone)]
pub struct MethodRule {
    /// Full service name, e.g. `demo.order.v1.OrderService`.
    pub service: String,
    pub method: String,
    pub http: v1::HttpRule,
    /// The RPC's leading comment in its `.proto` (from the set's `SourceCodeInfo`, when the
    /// set carries it), trimmed: what the draft tells merchants about the API.
    pub comment: Option<String>,
}

/// An RPC that got no draft, and why.
#[derive(Debug, Clone, Serialize)]
pub struct Skipped {
    pub method: String,
    pub reason: String,
}

/// What a descriptor set offers.
#[derive(Debug, Clone)]
pub struct Analysis {
    /// The self-contained encoded set to store.
    pub bytes: Vec<u8>,
    /// Hex SHA-256 of `bytes`: the name of `descriptors/<sha256>`.
    pub sha256: String,
    pub services: Vec<String>,
    pub methods: Vec<MethodRule>,
    pub skipped: Vec<Skipped>,
}

/// A pool with the vendored google/api files (and google/protobuf/descriptor.proto).
fn vendored_pool() -> ApiResult<DescriptorPool> {
    let mut compiler = protox::Compiler::with_file_resolver(SourceFiles::vendored_only());
    compiler.include_imports(true).include_source_info(false);
    compiler
        .open_files(["google/api/annotations.proto"])
        .map_err(|e| ApiError::internal(format!("vendored google/api protos: {e}")))?;
    DescriptorPool::decode(compiler.encode_file_descriptor_set().as_slice())
        .map_err(|e| ApiError::internal(format!("vendored google/api protos: {e}")))
}

/// In-memory `.proto` sources, then the vendored google/api files, then protox's bundled
/// google/protobuf files.
struct SourceFiles {
    files: BTreeMap<String, String>,
    google: protox::file::GoogleFileResolver,
}

impl SourceFiles {
    fn vendored_only() -> SourceFiles {
        SourceFiles {
            files: BTreeMap::new(),
            google: protox::file::GoogleFileResolver::new(),
        }
    }
}

impl protox::file::FileResolver for SourceFiles {
    fn open_file(&self, name: &str) -> Result<protox::file::File, protox::Error> {
        if let Some(source) = self.files.get(name) {
            return protox::file::File::from_source(name, source);
        }
        match name {
            "google/api/annotations.proto" => {
                protox::file::File::from_source(name, ANNOTATIONS_PROTO)
            }
            "google/api/http.proto" => protox::file::File::from_source(name, HTTP_PROTO),
            _ => self.google.open_file(name),
        }
    }
}

/// Compiles uploaded `.proto` sources (name → text; imports among them by these names) into a
/// self-contained encoded FileDescriptorSet.
pub fn compile_sources(files: &BTreeMap<String, String>) -> ApiResult<Vec<u8>> {
    if files.is_empty() {
        return Err(ApiError::bad_request(
            "no .proto files: send {\"files\": {\"name.proto\": \"...\"}} or multipart file parts",
        ));
    }
    for name in files.keys() {
        if !name.ends_with(".proto") || name.starts_with('/') || name.split('/').any(|s| s == "..")
        {
            return Err(ApiError::bad_request(format!(
                "file name {name:?}: must be a relative path ending in .proto"
            )));
        }
    }
    let mut compiler = protox::Compiler::with_file_resolver(SourceFiles {
        files: files.clone(),
        google: protox::file::GoogleFileResolver::new(),
    });
    // Source info keeps the comments: an RPC's leading comment is its draft's merchant
    // description ([`merchant_description`]).
    compiler.include_imports(true).include_source_info(true);
    compiler
        .open_files(files.keys())
        .map_err(|e| compile_error(&e, files))?;
    Ok(compiler.encode_file_descriptor_set())
}

/// A compile error as 422, naming the file and the line:column of the first label.
fn compile_error(e: &protox::Error, files: &BTreeMap<String, String>) -> ApiError {
    use miette::Diagnostic as _;
    let file = e.file().map(str::to_owned);
    let offset = e
        .labels()
        .and_then(|mut labels| labels.next())
        .map(|label| label.offset());
    let position = match (&file, offset) {
        (Some(f), Some(offset)) => files.get(f).map(|text| {
            let before = text.get(..offset).unwrap_or(text);
            let line = before.matches('\n').count() + 1;
            let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
            format!("{f}:{line}:{column}")
        }),
        (Some(f), None) => Some(f.clone()),
        _ => None,
    };
    let reason = e.to_string();
    let message = match &position {
        Some(p) => format!("the .proto files do not compile: {p}: {reason}"),
        None => format!("the .proto files do not compile: {reason}"),
    };
    ApiError::invalid(
        message,
        vec![Detail {
            path: position.or(file),
            field: None,
            reason,
        }],
    )
}

/// Decodes an encoded FileDescriptorSet (completing it with the vendored google/api files if
/// it imports them without including them) and lists its RPCs with their HTTP rules.
pub fn analyze(bytes: &[u8], services_filter: Option<&[String]>) -> ApiResult<Analysis> {
    let (pool, stored) = decode_set(bytes)?;
    // Read the HTTP rules with an extension that is surely known, even when the uploaded set
    // carries no google/api files (then the options hold the extension as unknown fields).
    let http_ext = match pool.get_extension_by_name("google.api.http") {
        Some(ext) => Some(ext),
        None => vendored_pool()?.get_extension_by_name("google.api.http"),
    };
    let wanted: Option<BTreeSet<&str>> =
        services_filter.map(|s| s.iter().map(String::as_str).collect());
    let mut listing = Listing::default();
    for service in pool.services() {
        let name = service.full_name();
        if name.starts_with("grpc.reflection.") || name.starts_with("grpc.health.") {
            continue;
        }
        if wanted.as_ref().is_some_and(|w| !w.contains(name)) {
            continue;
        }
        listing.add_service(&service, http_ext.as_ref());
    }
    if let Some(w) = wanted {
        if let Some(missing) = w.iter().find(|s| !listing.services.iter().any(|n| n == *s)) {
            return Err(ApiError::invalid(
                format!("service {missing:?} is not in the descriptor set"),
                vec![],
            ));
        }
    }
    let sha256 = hex::encode(Sha256::digest(&stored));
    Ok(Analysis {
        bytes: stored,
        sha256,
        services: listing.services,
        methods: listing.methods,
        skipped: listing.skipped,
    })
}

/// Decodes the set alone, or else with the vendored google/api files, and returns the pool
/// with the bytes to store (re-encoded when the vendored files were needed), refusing a set
/// too large for a ZooKeeper node.
fn decode_set(bytes: &[u8]) -> ApiResult<(DescriptorPool, Vec<u8>)> {
    let (pool, stored) = match DescriptorPool::decode(bytes) {
        Ok(pool) => (pool, bytes.to_vec()),
        Err(alone) => {
            let mut pool = vendored_pool()?;
            pool.decode_file_descriptor_set(bytes).map_err(|e| {
                ApiError::invalid(
                    format!(
                        "not a valid FileDescriptorSet: {alone}; with google/api vendored: {e}"
                    ),
                    vec![],
                )
            })?;
            let encoded = pool.encode_to_vec();
            (pool, encoded)
        }
    };
    if stored.len() > MAX_DESCRIPTOR_BYTES {
        return Err(ApiError::too_large(format!(
            "the descriptor set is {} bytes; at most {MAX_DESCRIPTOR_BYTES} fit in a ZooKeeper node",
            stored.len()
        )));
    }
    Ok((pool, stored))
}

/// The services of a set with their unary RPCs that carry an HTTP rule, and the RPCs left out.
#[derive(Default)]
struct Listing {
    services: Vec<String>,
    methods: Vec<MethodRule>,
    skipped: Vec<Skipped>,
}

impl Listing {
    fn add_service(
        &mut self,
        service: &prost_reflect::ServiceDescriptor,
        http_ext: Option<&prost_reflect::ExtensionDescriptor>,
    ) {
        let name = service.full_name().to_owned();
        self.services.push(name.clone());
        for method in service.methods() {
            let full = format!("{name}/{}", method.name());
            if method.is_client_streaming() || method.is_server_streaming() {
                self.skipped.push(Skipped {
                    method: full,
                    reason: "streaming RPCs are not offered as HTTP APIs".to_owned(),
                });
                continue;
            }
            match http_rule_of(&method, http_ext) {
                Some(http) => self.methods.push(MethodRule {
                    service: name.clone(),
                    method: method.name().to_owned(),
                    http,
                    comment: leading_comment(&method),
                }),
                None => self.skipped.push(Skipped {
                    method: full,
                    reason: "no google.api.http annotation".to_owned(),
                }),
            }
        }
    }
}

/// The leading comment of `method` in its file's `SourceCodeInfo` (none when the set was built
/// without source info, as reflection usually serves it), each line trimmed, blank lines
/// dropped, joined with spaces.
fn leading_comment(method: &MethodDescriptor) -> Option<String> {
    let file = method.parent_file();
    let info = file.file_descriptor_proto().source_code_info.as_ref()?;
    let location = info.location.iter().find(|l| l.path == method.path())?;
    let text = location
        .leading_comments
        .as_deref()?
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ");
    (!text.is_empty()).then_some(text)
}

/// What merchants read about an imported API (docs/operations/portal.md, "The merchants' portal"):
/// the RPC's leading comment, else a neutral sentence made from the API id. Never the gRPC
/// service or method name, which are the backend team's internal names.
pub fn merchant_description(id: &str, rule: &MethodRule) -> String {
    match &rule.comment {
        Some(c) => c.clone(),
        None => format!("The {id} API."),
    }
}

/// Whether `description` is the one earlier imports wrote (`<service>.<method>`, the gRPC
/// name): a re-import replaces it with [`merchant_description`].
fn is_grpc_name(description: Option<&str>, rule: &MethodRule) -> bool {
    description.is_none_or(|d| {
        let d = d.trim();
        d.is_empty()
            || d == format!("{}.{}", rule.service, rule.method)
            || d == format!("{}/{}", rule.service, rule.method)
    })
}

fn http_rule_of(
    method: &MethodDescriptor,
    ext: Option<&prost_reflect::ExtensionDescriptor>,
) -> Option<v1::HttpRule> {
    let ext = ext?;
    let options = method.options();
    let rule = if options.has_extension(ext) {
        options.get_extension(ext).into_owned()
    } else {
        // The set was decoded without the extension known: re-decode the raw options with it.
        let raw = options.encode_to_vec();
        let mut with_ext = DynamicMessage::new(ext.containing_message());
        with_ext.merge(raw.as_slice()).ok()?;
        if !with_ext.has_extension(ext) {
            return None;
        }
        with_ext.get_extension(ext).into_owned()
    };
    let Value::Message(rule) = rule else {
        return None;
    };
    let (method, path) = rule_pattern(&rule)?;
    let additional_bindings = match rule.get_field_by_name("additional_bindings").as_deref() {
        Some(Value::List(items)) => items
            .iter()
            .filter_map(|item| match item {
                Value::Message(m) => {
                    let (method, path) = rule_pattern(m)?;
                    Some(v1::HttpBinding {
                        method,
                        path,
                        body: string_field(m, "body"),
                        response_body: string_field(m, "response_body"),
                    })
                }
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    };
    Some(v1::HttpRule {
        method,
        path,
        body: string_field(&rule, "body"),
        response_body: string_field(&rule, "response_body"),
        additional_bindings,
    })
}

fn rule_pattern(rule: &DynamicMessage) -> Option<(String, String)> {
    for (field, verb) in [
        ("get", "GET"),
        ("put", "PUT"),
        ("post", "POST"),
        ("delete", "DELETE"),
        ("patch", "PATCH"),
    ] {
        if rule.has_field_by_name(field) {
            if let Some(Value::String(path)) = rule.get_field_by_name(field).as_deref() {
                return Some((verb.to_owned(), path.clone()));
            }
        }
    }
    if rule.has_field_by_name("custom") {
        if let Some(Value::Message(custom)) = rule.get_field_by_name("custom").as_deref() {
            let kind = string_field(custom, "kind")?;
            let path = string_field(custom, "path")?;
            return Some((kind.to_ascii_uppercase(), path));
        }
    }
    None
}

fn string_field(msg: &DynamicMessage, name: &str) -> Option<String> {
    match msg.get_field_by_name(name).as_deref() {
        Some(Value::String(s)) if !s.is_empty() => Some(s.clone()),
        _ => None,
    }
}

/// The default API id of an RPC: `<service short name without "Service">.<method>`, lowercased.
pub fn default_id(service: &str, method: &str) -> String {
    let short = service.rsplit('.').next().unwrap_or(service);
    let short = match short.strip_suffix("Service") {
        Some(s) if !s.is_empty() => s,
        _ => short,
    };
    format!("{short}.{method}").to_ascii_lowercase()
}

/// The API id an import gives an RPC.
pub fn id_for(rule: &MethodRule, options: &ImportOptions) -> String {
    let slash = format!("{}/{}", rule.service, rule.method);
    let dot = format!("{}.{}", rule.service, rule.method);
    options
        .ids
        .get(&slash)
        .or_else(|| options.ids.get(&dot))
        .cloned()
        .unwrap_or_else(|| default_id(&rule.service, &rule.method))
}

/// The draft for an RPC. An existing draft keeps its policy, auth, description and timeout
/// unless the import sets them (a description that is only the gRPC name, as earlier imports
/// wrote it, becomes the [`merchant_description`]); its HTTP rule and gRPC target are replaced.
pub fn draft_for(
    id: &str,
    rule: &MethodRule,
    sha256: &str,
    cluster: &str,
    options: &ImportOptions,
    existing: Option<&v1::ApiDefinition>,
) -> v1::ApiDefinition {
    let grpc = v1::GrpcBackend {
        service: rule.service.clone(),
        method: rule.method.clone(),
        descriptor: sha256.to_owned(),
    };
    match existing {
        Some(old) => {
            let mut def = old.clone();
            def.id = id.to_owned();
            def.http = rule.http.clone();
            def.backend.cluster = cluster.to_owned();
            def.backend.grpc = Some(grpc);
            def.backend.http = None;
            if let Some(t) = options.timeout_ms {
                def.backend.timeout_ms = t;
            }
            if let Some(auth) = options.auth {
                def.auth = auth;
            }
            if is_grpc_name(def.description.as_deref(), rule) {
                def.description = Some(merchant_description(id, rule));
            }
            def
        }
        None => v1::ApiDefinition {
            id: id.to_owned(),
            version: 0,
            http: rule.http.clone(),
            backend: v1::Backend {
                cluster: cluster.to_owned(),
                timeout_ms: options.timeout_ms.unwrap_or(v1::DEFAULT_TIMEOUT_MS),
                grpc: Some(grpc),
                http: None,
            },
            auth: options.auth.unwrap_or_default(),
            policy: v1::Policy::default(),
            description: Some(merchant_description(id, rule)),
            request_schema: None,
            response_schema: None,
            owner: None,
        },
    }
}

/// 400 unless `addr` is `host:port` (a port from 1 to 65535 after the last `:`, a host before
/// it): what cannot name a backend is the caller's mistake, not an unreachable backend (502).
fn check_host_port(addr: &str) -> ApiResult<()> {
    let ok = addr.rsplit_once(':').is_some_and(|(host, port)| {
        !host.is_empty()
            && !host
                .chars()
                .any(|c| c.is_whitespace() || c.is_control() || c == '/')
            && port.parse::<u16>().is_ok_and(|p| p > 0)
    });
    if ok {
        Ok(())
    } else {
        Err(ApiError::bad_request(format!(
            "addr {addr:?}: must be host:port (or a URL) of the gRPC backend"
        )))
    }
}

/// Fetches the descriptors of a running backend's services by gRPC server reflection (v1, or
/// v1alpha when v1 is not served), with every file they depend on, as an encoded set.
pub async fn fetch_by_reflection(addr: &str, services: Option<&[String]>) -> ApiResult<Vec<u8>> {
    let uri = if addr.contains("://") {
        addr.to_owned()
    } else {
        check_host_port(addr)?;
        format!("http://{addr}")
    };
    let endpoint = tonic::transport::Endpoint::from_shared(uri.clone())
        .map_err(|e| ApiError::bad_request(format!("addr {addr:?}: {e}")))?
        .connect_timeout(Duration::from_secs(5))
        .timeout(Duration::from_secs(15));
    // The address is the author's: through the egress policy, connecting to the checked
    // addresses only (docs/operations/egress.md, "Egress policy").
    let parsed: http::Uri = uri
        .parse()
        .map_err(|e| ApiError::bad_request(format!("addr {addr:?}: {e}")))?;
    let host = parsed
        .host()
        .ok_or_else(|| ApiError::bad_request(format!("addr {addr:?}: no host")))?;
    let port = parsed
        .port_u16()
        .unwrap_or(if parsed.scheme_str() == Some("https") {
            443
        } else {
            80
        });
    let addrs = portico_control::egress::global()
        .resolve(host, port)
        .await
        .map_err(|e| {
            if e.by_policy() {
                tracing::warn!(addr, error = %e, "egress: reflection import refused");
                ApiError::bad_request(format!("addr {addr:?}: {e}"))
            } else {
                ApiError::bad_gateway(format!("cannot connect to {uri}: {e}"))
            }
        })?;
    let channel = endpoint
        .connect_with_connector(crate::egress::Pinned(addrs))
        .await
        .map_err(|e| ApiError::bad_gateway(format!("cannot connect to {uri}: {e}")))?;
    let fetched = tokio::time::timeout(Duration::from_secs(30), async {
        match reflect_v1(channel.clone(), services).await {
            Err(ReflectError::Unimplemented) => reflect_v1alpha(channel, services).await,
            other => other,
        }
    })
    .await
    .map_err(|_| ApiError::bad_gateway(format!("reflection on {uri} timed out")))?;
    let files = fetched.map_err(|e| match e {
        ReflectError::Unimplemented => ApiError::bad_gateway(format!(
            "{uri} does not serve gRPC server reflection (grpc.reflection.v1 or v1alpha)"
        )),
        ReflectError::Other(msg) => ApiError::bad_gateway(format!("reflection on {uri}: {msg}")),
    })?;
    // An encoded FileDescriptorSet is `repeated FileDescriptorProto file = 1`: the files' bytes
    // are framed as they are, so options (and the google.api.http extension) survive.
    let mut set = Vec::new();
    for bytes in files.values() {
        prost::encoding::encode_key(1, prost::encoding::WireType::LengthDelimited, &mut set);
        prost::encoding::encode_varint(bytes.len() as u64, &mut set);
        set.extend_from_slice(bytes);
    }
    Ok(set)
}

enum ReflectError {
    Unimplemented,
    Other(String),
}

macro_rules! reflect_impl {
    ($name:ident, $pb:path) => {
        async fn $name(
            channel: tonic::transport::Channel,
            services: Option<&[String]>,
        ) -> Result<BTreeMap<String, Vec<u8>>, ReflectError> {
            use pb::server_reflection_client::ServerReflectionClient;
            use pb::server_reflection_request::MessageRequest;
            use pb::server_reflection_response::MessageResponse;
            use $pb as pb;

            let mut client = ServerReflectionClient::new(channel);
            let (tx, rx) = tokio::sync::mpsc::channel::<pb::ServerReflectionRequest>(4);
            let send = |tx: &tokio::sync::mpsc::Sender<pb::ServerReflectionRequest>,
                        req: MessageRequest| {
                let tx = tx.clone();
                async move {
                    tx.send(pb::ServerReflectionRequest {
                        host: String::new(),
                        message_request: Some(req),
                    })
                    .await
                    .map_err(|_| ReflectError::Other("reflection stream closed".to_owned()))
                }
            };
            // The first request goes in before the call so the stream opens with it.
            send(&tx, MessageRequest::ListServices(String::new())).await?;
            let mut responses = client
                .server_reflection_info(tokio_stream::wrappers::ReceiverStream::new(rx))
                .await
                .map_err(|status| {
                    if status.code() == tonic::Code::Unimplemented {
                        ReflectError::Unimplemented
                    } else {
                        ReflectError::Other(status.to_string())
                    }
                })?
                .into_inner();
            async fn next_message(
                responses: &mut tonic::codec::Streaming<pb::ServerReflectionResponse>,
            ) -> Result<MessageResponse, ReflectError> {
                match responses.message().await {
                    Ok(Some(r)) => match r.message_response {
                        Some(MessageResponse::ErrorResponse(e)) => Err(ReflectError::Other(
                            format!("error {}: {}", e.error_code, e.error_message),
                        )),
                        Some(other) => Ok(other),
                        None => Err(ReflectError::Other("empty reflection response".to_owned())),
                    },
                    Ok(None) => Err(ReflectError::Other("reflection stream ended".to_owned())),
                    Err(status) if status.code() == tonic::Code::Unimplemented => {
                        Err(ReflectError::Unimplemented)
                    }
                    Err(status) => Err(ReflectError::Other(status.to_string())),
                }
            }
            let listed = match next_message(&mut responses).await? {
                MessageResponse::ListServicesResponse(list) => list
                    .service
                    .into_iter()
                    .map(|s| s.name)
                    .filter(|n| {
                        !n.starts_with("grpc.reflection.") && !n.starts_with("grpc.health.")
                    })
                    .collect::<Vec<_>>(),
                _ => {
                    return Err(ReflectError::Other(
                        "unexpected answer to list_services".to_owned(),
                    ))
                }
            };
            let targets: Vec<String> = match services {
                Some(wanted) => {
                    for w in wanted {
                        if !listed.contains(w) {
                            return Err(ReflectError::Other(format!(
                                "service {w:?} is not served (served: {})",
                                listed.join(", ")
                            )));
                        }
                    }
                    wanted.to_vec()
                }
                None => listed,
            };
            if targets.is_empty() {
                return Err(ReflectError::Other(
                    "the server lists no services".to_owned(),
                ));
            }
            let mut files: BTreeMap<String, Vec<u8>> = BTreeMap::new();
            let mut wanted_files: Vec<String> = Vec::new();
            let absorb = |resp: MessageResponse,
                          files: &mut BTreeMap<String, Vec<u8>>,
                          wanted_files: &mut Vec<String>|
             -> Result<(), ReflectError> {
                let MessageResponse::FileDescriptorResponse(fd) = resp else {
                    return Err(ReflectError::Other(
                        "unexpected reflection answer".to_owned(),
                    ));
                };
                for bytes in fd.file_descriptor_proto {
                    let file = prost_types::FileDescriptorProto::decode(bytes.as_slice())
                        .map_err(|e| ReflectError::Other(format!("bad file descriptor: {e}")))?;
                    let name = file.name.clone().unwrap_or_default();
                    for dep in file.dependency {
                        if !files.contains_key(&dep) && !wanted_files.contains(&dep) {
                            wanted_files.push(dep);
                        }
                    }
                    wanted_files.retain(|w| *w != name);
                    files.insert(name, bytes);
                }
                Ok(())
            };
            for service in targets {
                send(&tx, MessageRequest::FileContainingSymbol(service)).await?;
                let resp = next_message(&mut responses).await?;
                absorb(resp, &mut files, &mut wanted_files)?;
            }
            while let Some(dep) = wanted_files.pop() {
                if files.contains_key(&dep) {
                    continue;
                }
                send(&tx, MessageRequest::FileByFilename(dep.clone())).await?;
                let resp = next_message(&mut responses).await?;
                absorb(resp, &mut files, &mut wanted_files)?;
                if !files.contains_key(&dep) {
                    return Err(ReflectError::Other(format!(
                        "dependency {dep:?} not returned"
                    )));
                }
            }
            drop(tx);
            Ok(files)
        }
    };
}

reflect_impl!(reflect_v1, tonic_reflection::pb::v1);
reflect_impl!(reflect_v1alpha, tonic_reflection::pb::v1alpha);

#[cfg(test)]
mod tests {
    use super::*;

    const DEMO: &str = r#"
syntax = "proto3";
package shop.v1;
import "google/api/annotations.proto";
service CartService {
  // Fetches a cart
  // by its id.
  rpc GetCart(GetCartRequest) returns (Cart) {
    option (google.api.http) = { get: "/v1/carts/{cart_id}" additional_bindings { get: "/v1/users/{user}/cart" } };
  }
  rpc AddItem(AddItemRequest) returns (Cart) {
    option (google.api.http) = { post: "/v1/carts/{cart_id}/items" body: "*" };
  }
  rpc Internal(GetCartRequest) returns (Cart);
  rpc Watch(GetCartRequest) returns (stream Cart) { option (google.api.http) = { get: "/v1/watch" }; }
}
message GetCartRequest { string cart_id = 1; string user = 2; }
message AddItemRequest { string cart_id = 1; string sku = 2; }
message Cart { string cart_id = 1; repeated string skus = 2; }
"#;

    /// Found by schemathesis (`POST /reflection` with `"addr": "j"` answered 502): an address
    /// that names no backend is a 400; a well-formed one that cannot be reached stays a 502.
    #[tokio::test]
    async fn reflection_addresses_that_name_no_backend_are_400() {
        for addr in [
            "j",
            "",
            ":50051",
            "host:",
            "host:0",
            "host:70000",
            "a b:1",
            "h:x",
        ] {
            let e = fetch_by_reflection(addr, None).await.unwrap_err();
            assert_eq!(e.status.as_u16(), 400, "{addr:?}: {e}");
        }
        assert!(check_host_port("127.0.0.1:50051").is_ok());
        assert!(check_host_port("[::1]:50051").is_ok());
        assert!(check_host_port("backend.internal:443").is_ok());
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        // Nothing listens there now: reachable in form, not in fact.
        let e = fetch_by_reflection(&format!("127.0.0.1:{port}"), None)
            .await
            .unwrap_err();
        assert_eq!(e.status.as_u16(), 502, "{e}");
    }

    #[test]
    fn compiles_and_finds_http_rules() {
        let files = BTreeMap::from([("shop/cart.proto".to_owned(), DEMO.to_owned())]);
        let bytes = compile_sources(&files).unwrap();
        let a = analyze(&bytes, None).unwrap();
        assert_eq!(
            a.bytes, bytes,
            "a compiled set is self-contained and stored as is"
        );
        assert_eq!(a.services, ["shop.v1.CartService"]);
        assert_eq!(a.methods.len(), 2);
        let get = &a.methods[0];
        assert_eq!(get.method, "GetCart");
        assert_eq!(get.http.method, "GET");
        assert_eq!(get.http.path, "/v1/carts/{cart_id}");
        assert_eq!(
            get.http.additional_bindings[0].path,
            "/v1/users/{user}/cart"
        );
        assert_eq!(a.methods[1].http.body.as_deref(), Some("*"));
        assert_eq!(a.skipped.len(), 2);
        assert_eq!(default_id("shop.v1.CartService", "GetCart"), "cart.getcart");
        assert_eq!(default_id("x.Service", "Ping"), "service.ping");
    }

    /// Merchants read the RPC's leading comment, or a sentence made from the API id: never
    /// the gRPC service or method name (docs/operations/portal.md, "The merchants' portal").
    #[test]
    fn drafts_describe_themselves_in_merchant_words() {
        let files = BTreeMap::from([("shop/cart.proto".to_owned(), DEMO.to_owned())]);
        let a = analyze(&compile_sources(&files).unwrap(), None).unwrap();
        let options = ImportOptions::default();
        let (get, add) = (&a.methods[0], &a.methods[1]);
        assert_eq!(get.comment.as_deref(), Some("Fetches a cart by its id."));
        assert_eq!(add.comment, None);
        let draft = |rule: &MethodRule, old: Option<&v1::ApiDefinition>| {
            draft_for(&id_for(rule, &options), rule, "sha", "c", &options, old)
        };
        let d = draft(get, None);
        assert_eq!(d.description.as_deref(), Some("Fetches a cart by its id."));
        let d = draft(add, None);
        assert_eq!(d.description.as_deref(), Some("The cart.additem API."));
        // An earlier import's gRPC-name description is replaced; an owner's own words stay.
        let mut old = draft(get, None);
        for grpc_name in ["shop.v1.CartService.GetCart", "shop.v1.CartService/GetCart"] {
            old.description = Some(grpc_name.to_owned());
            let d = draft(get, Some(&old));
            assert_eq!(d.description.as_deref(), Some("Fetches a cart by its id."));
        }
        old.description = Some("Your cart, as it stands.".to_owned());
        assert_eq!(
            draft(get, Some(&old)).description.as_deref(),
            Some("Your cart, as it stands.")
        );
        // Without source info (reflection usually serves none): the neutral default.
        let mut compiler = protox::Compiler::with_file_resolver(SourceFiles {
            files,
            google: protox::file::GoogleFileResolver::new(),
        });
        compiler.include_imports(true).include_source_info(false);
        compiler.open_files(["shop/cart.proto"]).unwrap();
        let set = compiler.encode_file_descriptor_set();
        let bare = analyze(&set, None).unwrap();
        assert_eq!(bare.methods[0].comment, None);
        let d = draft(&bare.methods[0], None);
        assert_eq!(d.description.as_deref(), Some("The cart.getcart API."));
    }

    #[test]
    fn incomplete_set_is_completed_with_vendored_google_api() {
        let files = BTreeMap::from([("shop/cart.proto".to_owned(), DEMO.to_owned())]);
        let bytes = compile_sources(&files).unwrap();
        // Keep only the cart file: it imports google/api/annotations.proto without carrying it.
        let pool = DescriptorPool::decode(bytes.as_slice()).unwrap();
        let cart = pool
            .get_file_by_name("shop/cart.proto")
            .unwrap()
            .encode_to_vec();
        let mut set = Vec::new();
        prost::encoding::encode_key(1, prost::encoding::WireType::LengthDelimited, &mut set);
        prost::encoding::encode_varint(cart.len() as u64, &mut set);
        set.extend_from_slice(&cart);
        assert!(DescriptorPool::decode(set.as_slice()).is_err());
        let a = analyze(&set, None).unwrap();
        assert!(DescriptorPool::decode(a.bytes.as_slice()).is_ok());
        assert_eq!(a.methods.len(), 2);
    }

    #[test]
    fn compile_errors_name_the_file() {
        let files = BTreeMap::from([(
            "bad.proto".to_owned(),
            "syntax = \"proto3\"; message {".to_owned(),
        )]);
        let e = compile_sources(&files).unwrap_err();
        assert_eq!(e.code, "VALIDATION_FAILED");
        assert!(e.message.contains("bad.proto:1:28"), "{}", e.message);
    }
}
