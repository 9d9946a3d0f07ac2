//! Each API described as operations, one per binding, with the schemas they take and answer
//! (docs/operations/portal.md, "The merchants' portal"): for a gRPC-backed API from its descriptor
//! ([`crate::portal::schema`]), through the same `MethodPlan` the gateway runs, so a binding
//! the gateway could not transcode is not described either; for an HTTP-backed API from the
//! `request_schema` / `response_schema` its owner attached, else "any JSON".

use super::paths::{
    is_single, multi_segment, openapi_path, path_parameter, text_example, wildcard_parameter,
};
use crate::portal::schema::{query_parameters, text_schema, QueryParam, Schemas, COMPONENTS};
use portico_control::fieldpath::{self, Syntax};
use portico_control::template::{PathTemplate, Rewrite};
use portico_control::{Api, BackendKind, Snapshot};
use portico_grpc_dynamic::transcode::{proto_type_name, MethodPlan};
use prost_reflect::{DescriptorPool, MessageDescriptor, MethodDescriptor};
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

pub(super) struct Builder<'s> {
    schemas: Schemas,
    pools: HashMap<String, Option<DescriptorPool>>,
    snapshot: &'s Snapshot,
}

/// An API, described.
pub(super) struct Described {
    pub(super) api: Arc<Api>,
    /// Whether a gRPC method backs it (its name is never shown).
    pub(super) grpc: bool,
    pub(super) operations: Vec<Operation>,
    /// The router-style body, when the API can be called that way.
    pub(super) router: Option<Value>,
    /// The router-style answer.
    pub(super) router_reply: Option<Value>,
    /// Component schemas of its own (an HTTP API's attached schemas).
    pub(super) extra_components: Vec<(String, Value)>,
}

/// One binding as an operation.
pub(super) struct Operation {
    pub(super) binding: usize,
    pub(super) method: String,
    pub(super) openapi_path: String,
    pub(super) template: PathTemplate,
    pub(super) parameters: Vec<Value>,
    /// Path variable → example value (decoded).
    pub(super) path_examples: Vec<(String, String)>,
    pub(super) body: Option<Value>,
    pub(super) body_required: bool,
    pub(super) reply: Value,
    pub(super) grpc: bool,
}

impl<'s> Builder<'s> {
    pub(super) fn new(snapshot: &'s Snapshot) -> Self {
        Builder {
            schemas: Schemas::default(),
            pools: HashMap::new(),
            snapshot,
        }
    }

    /// The component schemas of every message and enum reached while describing.
    pub(super) fn into_components(self) -> BTreeMap<String, Value> {
        self.schemas.into_components()
    }

    fn pool(&mut self, sha: &str) -> Option<DescriptorPool> {
        if let Some(p) = self.pools.get(sha) {
            return p.clone();
        }
        let pool = self
            .snapshot
            .descriptors
            .get(sha)
            .and_then(|bytes| DescriptorPool::decode(bytes.as_slice()).ok());
        self.pools.insert(sha.to_owned(), pool.clone());
        pool
    }

    fn method(&mut self, api: &Api) -> Option<MethodDescriptor> {
        let BackendKind::Grpc {
            service,
            method,
            descriptor,
        } = &api.backend
        else {
            return None;
        };
        let pool = self.pool(descriptor)?;
        let service = pool.get_service_by_name(service)?;
        let found = service.methods().find(|m| m.name() == method);
        found
    }

    pub(super) fn describe(&mut self, api: &Arc<Api>) -> Option<Described> {
        match &api.backend {
            BackendKind::Grpc { .. } => {
                let md = self.method(api)?;
                // What the gateway runs: a binding it cannot plan is not served, so not shown.
                MethodPlan::for_api(&md, api).ok()?;
                let input = md.input();
                let output = md.output();
                let mut operations = Vec::new();
                for (i, b) in api.bindings.iter().enumerate() {
                    operations.push(self.grpc_operation(api, i, b, &input, &output));
                }
                let router = Some(self.schemas.message(&input));
                let router_reply = Some(self.schemas.message(&output));
                Some(Described {
                    api: api.clone(),
                    grpc: true,
                    operations,
                    router,
                    router_reply,
                    extra_components: Vec::new(),
                })
            }
            BackendKind::Http { path } => {
                let def = &api.definition;
                let mut extra = Vec::new();
                let request = def.request_schema.as_ref().map(|s| {
                    let name = format!("{}.Request", api.id);
                    extra.push((name.clone(), rebase_refs(s, &name)));
                    json!({"$ref": format!("{COMPONENTS}{name}")})
                });
                let reply = match def.response_schema.as_ref() {
                    Some(s) => {
                        let name = format!("{}.Response", api.id);
                        extra.push((name.clone(), rebase_refs(s, &name)));
                        json!({"$ref": format!("{COMPONENTS}{name}")})
                    }
                    None => {
                        json!({"description": "The backend's answer (its owner has not described it)."})
                    }
                };
                let operations = api
                    .bindings
                    .iter()
                    .enumerate()
                    .map(|(i, b)| http_operation(i, b, request.clone(), reply.clone()))
                    .collect();
                let router_ok = match path {
                    None => true,
                    Some(p) => Rewrite::parse(p).is_ok_and(|r| r.fields().next().is_none()),
                };
                Some(Described {
                    api: api.clone(),
                    grpc: false,
                    operations,
                    router: router_ok.then(|| {
                        request.clone().unwrap_or_else(
                            || json!({"description": "Passed on to the backend as it is."}),
                        )
                    }),
                    router_reply: router_ok.then(|| reply.clone()),
                    extra_components: extra,
                })
            }
        }
    }

    fn grpc_operation(
        &mut self,
        api: &Api,
        index: usize,
        binding: &portico_control::Binding,
        input: &MessageDescriptor,
        output: &MessageDescriptor,
    ) -> Operation {
        let template = &binding.template;
        let (openapi_path, wildcards) = openapi_path(template);
        let (mut parameters, path_examples, bound) = grpc_path_parameters(template, input);
        parameters.extend(wildcards.iter().map(wildcard_parameter));
        let (body, body_field, star) = match binding.body.as_deref().map(str::trim) {
            None | Some("") => (None, None, false),
            Some("*") => (Some(self.schemas.message(input)), None, true),
            Some(name) => match fieldpath::lookup(input, name, Syntax::Request) {
                Some(fd) => (
                    Some(self.schemas.field(&fd)),
                    Some(fd.name().to_owned()),
                    false,
                ),
                None => (None, None, false),
            },
        };
        for q in query_parameters(input, &bound, body_field.as_deref(), star) {
            parameters.push(query_parameter(q));
        }
        let reply = match binding.response_body.as_deref().map(str::trim) {
            None | Some("") => self.schemas.message(output),
            Some(name) => match fieldpath::lookup(output, name, Syntax::Request) {
                Some(fd) => self.schemas.field(&fd),
                None => self.schemas.message(output),
            },
        };
        let _ = api;
        Operation {
            binding: index,
            method: binding.method.clone(),
            openapi_path,
            template: template.clone(),
            parameters,
            path_examples,
            body,
            body_required: false,
            reply,
            grpc: true,
        }
    }
}

/// A gRPC binding's path variables as parameters (typed by the fields they bind), their
/// example values, and the proto paths they bind (which are then no query parameters).
fn grpc_path_parameters(
    template: &PathTemplate,
    input: &MessageDescriptor,
) -> (Vec<Value>, Vec<(String, String)>, Vec<String>) {
    let mut parameters = Vec::new();
    let mut path_examples = Vec::new();
    let mut bound = Vec::new();
    for v in template.variables() {
        let leaf = fieldpath::resolve(input, &v.field_path, Syntax::Rule).ok();
        if let Some(l) = &leaf {
            bound.push(l.proto_path());
        }
        let single = is_single(template, v);
        let (schema, value) = match (&leaf, single) {
            (Some(l), true) => {
                let kind = l.leaf().kind();
                let schema = text_schema(&kind).unwrap_or_else(|| json!({"type": "string"}));
                let value = text_example(&schema, &v.field_path);
                (schema, value)
            }
            _ => multi_segment(template, v),
        };
        parameters.push(path_parameter(
            &v.field_path,
            schema,
            &value,
            leaf.map(|l| proto_type_name(&l.leaf().kind())),
        ));
        path_examples.push((v.field_path.clone(), value));
    }
    (parameters, path_examples, bound)
}

/// A query parameter of a gRPC binding: a repeated field sent by repetition (`form`), a map
/// as `name[key]=value` (`deepObject`).
fn query_parameter(q: QueryParam) -> Value {
    let mut p = json!({
        "name": q.name,
        "in": "query",
        "required": false,
        "description": format!("{} Proto field `{}`.", q.description, q.proto_path),
        "schema": q.schema,
    });
    if q.style == "deepObject" {
        p["style"] = json!("deepObject");
        p["explode"] = json!(true);
    } else if p["schema"]["type"] == "array" {
        p["style"] = json!("form");
        p["explode"] = json!(true);
    }
    p
}

/// An HTTP-backed API's binding: path variables as strings, the attached schemas.
fn http_operation(
    index: usize,
    binding: &portico_control::Binding,
    request: Option<Value>,
    reply: Value,
) -> Operation {
    let template = &binding.template;
    let (openapi_path, wildcards) = openapi_path(template);
    let mut parameters = Vec::new();
    let mut path_examples = Vec::new();
    for v in template.variables() {
        let (schema, value) = if is_single(template, v) {
            let schema = json!({"type": "string"});
            let value = text_example(&schema, &v.field_path);
            (schema, value)
        } else {
            multi_segment(template, v)
        };
        parameters.push(path_parameter(&v.field_path, schema, &value, None));
        path_examples.push((v.field_path.clone(), value));
    }
    parameters.extend(wildcards.iter().map(wildcard_parameter));
    let takes_body =
        matches!(binding.method.as_str(), "POST" | "PUT" | "PATCH") || binding.body.is_some();
    let body = match request {
        Some(schema) if takes_body || binding.body.is_some() => Some(schema),
        Some(_) => None,
        None if takes_body => Some(
            json!({"description": "Any JSON the backend takes (its owner has not described it)."}),
        ),
        None => None,
    };
    let body_required = body.as_ref().is_some_and(|b| b.get("$ref").is_some());
    Operation {
        binding: index,
        method: binding.method.clone(),
        openapi_path,
        template: template.clone(),
        parameters,
        path_examples,
        body,
        body_required,
        reply,
        grpc: false,
    }
}

/// Rewrites the local `$ref`s (`#/$defs/A`) of a schema placed at
/// `#/components/schemas/<name>` so they still point inside it.
fn rebase_refs(schema: &Value, name: &str) -> Value {
    match schema {
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| {
                    let v = match (k.as_str(), v) {
                        ("$ref" | "$dynamicRef", Value::String(r)) if r.starts_with('#') => {
                            Value::String(format!("{COMPONENTS}{name}{}", &r[1..]))
                        }
                        _ => rebase_refs(v, name),
                    };
                    (k.clone(), v)
                })
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(|v| rebase_refs(v, name)).collect()),
        other => other.clone(),
    }
}
