//! HTTP/JSON ⇄ gRPC message mapping by the `google.api.http` rules (googleapis'
//! `google/api/http.proto`), on prost-reflect dynamic messages.
//!
//! Request (HTTP → the method's input message), in this order:
//!
//! 1. the body, by the matched binding's `body`: `"*"` = the JSON body is the whole
//!    message; `"<field>"` = the JSON body is that top-level field; none = the body is not
//!    read. An empty (or all-whitespace) body is an empty message / an unset field.
//! 2. the path variables (field path → value, as the route stage captured and
//!    percent-decoded them) into their (nested) fields, overriding whatever the body set;
//! 3. unless the body is `"*"`, every query parameter that names a field not bound by the
//!    path or the body: nested by dotted path (`filter.min_total_cents=1`), repeated by
//!    repetition (`tags=a&tags=b`), maps as `labels[key]=value`, fields by proto name or
//!    lowerCamelCase JSON name, enums by name or number, scalars parsed by type, and the
//!    well-known types by their JSON string form (Timestamp, Duration, FieldMask, wrappers).
//!    Parameters naming no field are ignored (so are `method=` of the router style and
//!    anything a client adds for its own use); a parameter given twice for a singular field
//!    keeps the last value.
//!
//! The open-platform router style (`POST /router?method=<api_id>`, `binding == None`) takes
//! the JSON body as the whole request message and ignores the query.
//!
//! JSON is proto3 JSON (prost-reflect's serde support): 64-bit integers are accepted as
//! strings or numbers and written as strings, enums are accepted by name or number and
//! written by name, the well-known types use their JSON forms, unknown JSON fields are
//! ignored, fields with default values are left out of answers. A body nested deeper than
//! [`MAX_JSON_DEPTH`] is refused by a byte scan before any parsing, so no input can
//! exhaust the stack.
//!
//! Every mistake of the caller is a [`TranscodeErrorKind::BadRequest`] (the gateway answers
//! `400 BAD_REQUEST`) whose message names the field, e.g.
//! `field "qty": invalid value "abc" for int32`.
//!
//! Reply (gRPC → HTTP): the whole reply message as JSON, or, when the binding has a
//! `response_body`, only that top-level field's JSON value.
//!
//! Everything that depends only on the API and its descriptor (the method, the body and
//! response fields of every binding) is resolved once, when the snapshot is built, into a
//! [`MethodPlan`]. Field paths are resolved by `portico_control::fieldpath`, the resolver
//! that validation uses too.

use crate::error::{TranscodeError, TranscodeErrorKind};
use crate::proto_json;
use crate::reply_json::{NotFast, ReplyWriter};
use crate::request_json::{put_field_value, JsonCodecs, RequestEncoder};
use portico_control::fieldpath::{self, FieldPath, Syntax};
use portico_control::Api;
use prost::Message as _;
use prost_reflect::{
    DeserializeOptions, DynamicMessage, FieldDescriptor, Kind, MapKey, MessageDescriptor,
    MethodDescriptor, SerializeOptions, Value,
};
use std::borrow::Cow;
use std::sync::Arc;

/// The deepest JSON nesting (objects and arrays) a request body may have.
pub const MAX_JSON_DEPTH: usize = 64;

/// The longest rendering of an offending value quoted in an error message.
const MAX_QUOTED: usize = 64;

/// The HTTP side of one binding, as in `google.api.HttpRule`: what its body and response
/// body are. (The path template is the route stage's business.)
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BindingSpec {
    /// `None`: no body; `"*"`: the whole message; otherwise a top-level field name.
    pub body: Option<String>,
    /// A top-level field of the reply to answer instead of the whole reply.
    pub response_body: Option<String>,
}

#[derive(Debug, Clone)]
enum BodyPlan {
    /// The binding has no body: it is not read.
    None,
    /// `body: "*"`.
    Whole,
    /// `body: "<field>"`, with the one-pass encoder of the field's type when it is a
    /// singular message.
    Field(FieldDescriptor, Option<Arc<RequestEncoder>>),
}

#[derive(Debug, Clone)]
struct BindingPlan {
    body: BodyPlan,
    response: Option<FieldDescriptor>,
}

/// Everything needed to transcode calls of one API's gRPC method, resolved once per
/// snapshot: the input and output types and, per binding, the body and response fields.
#[derive(Debug, Clone)]
pub struct MethodPlan {
    input: MessageDescriptor,
    output: MessageDescriptor,
    /// Parallel to `Api::bindings`.
    bindings: Vec<BindingPlan>,
    /// The `/router?method=` style: whole-message body, whole reply.
    router: BindingPlan,
    /// Writes whole replies as JSON straight from their bytes (`None`: the type has
    /// groups, every reply goes through a `DynamicMessage`).
    reply: Option<Arc<ReplyWriter>>,
    /// Encodes whole-message JSON bodies in one pass (`None`: the type has groups).
    request: Option<Arc<RequestEncoder>>,
}

impl MethodPlan {
    /// Resolves the plan of `method` for the given bindings (main binding first, then the
    /// additional ones, as in `Api::bindings`). Fails, naming the binding and field, when a
    /// `body` or `response_body` names no top-level field of the request or reply.
    pub fn new(
        method: &MethodDescriptor,
        bindings: &[BindingSpec],
    ) -> Result<Self, TranscodeError> {
        Self::with_codecs(method, bindings, &mut JsonCodecs::default())
    }

    /// [`MethodPlan::new`], sharing the request encoders and reply writer of its types with
    /// the other plans made with `codecs` (one per descriptor pool).
    pub fn with_codecs(
        method: &MethodDescriptor,
        bindings: &[BindingSpec],
        codecs: &mut JsonCodecs,
    ) -> Result<Self, TranscodeError> {
        let input = method.input();
        let output = method.output();
        let mut plans = Vec::with_capacity(bindings.len());
        for (i, spec) in bindings.iter().enumerate() {
            let body = match spec.body.as_deref().map(str::trim) {
                None | Some("") => BodyPlan::None,
                Some("*") => BodyPlan::Whole,
                Some(name) => match fieldpath::lookup(&input, name, Syntax::Request) {
                    Some(fd) => {
                        let encoder = match fd.kind() {
                            Kind::Message(md) if !fd.is_list() && !fd.is_map() => {
                                codecs.request(&md)
                            }
                            _ => None,
                        };
                        BodyPlan::Field(fd, encoder)
                    }
                    None => {
                        return Err(TranscodeError::bad_binding(format!(
                            "binding {i}: body \"{name}\" is not a field of {}",
                            input.full_name()
                        )))
                    }
                },
            };
            let response = match spec.response_body.as_deref().map(str::trim) {
                None | Some("") => None,
                Some(name) => match fieldpath::lookup(&output, name, Syntax::Request) {
                    Some(fd) => Some(fd),
                    None => {
                        return Err(TranscodeError::bad_binding(format!(
                            "binding {i}: response_body \"{name}\" is not a field of {}",
                            output.full_name()
                        )))
                    }
                },
            };
            plans.push(BindingPlan { body, response });
        }
        Ok(MethodPlan {
            reply: codecs.reply(&output),
            request: codecs.request(&input),
            input,
            output,
            bindings: plans,
            router: BindingPlan {
                body: BodyPlan::Whole,
                response: None,
            },
        })
    }

    /// The plan of `method` for an API's bindings.
    pub fn for_api(method: &MethodDescriptor, api: &Api) -> Result<Self, TranscodeError> {
        Self::for_api_with(method, api, &mut JsonCodecs::default())
    }

    /// [`MethodPlan::for_api`] with shared codecs ([`MethodPlan::with_codecs`]).
    pub fn for_api_with(
        method: &MethodDescriptor,
        api: &Api,
        codecs: &mut JsonCodecs,
    ) -> Result<Self, TranscodeError> {
        let specs: Vec<BindingSpec> = api
            .bindings
            .iter()
            .map(|b| BindingSpec {
                body: b.body.clone(),
                response_body: b.response_body.clone(),
            })
            .collect();
        Self::with_codecs(method, &specs, codecs)
    }

    /// The request message type.
    pub fn input(&self) -> &MessageDescriptor {
        &self.input
    }

    /// The reply message type.
    pub fn output(&self) -> &MessageDescriptor {
        &self.output
    }

    fn binding(&self, binding: Option<usize>) -> Result<&BindingPlan, TranscodeError> {
        match binding {
            None => Ok(&self.router),
            Some(i) => self
                .bindings
                .get(i)
                .ok_or_else(|| TranscodeError::bad_binding(format!("no binding {i} for this API"))),
        }
    }

    /// Builds the request message from the HTTP request: `binding` as matched by the route
    /// stage (`None` for the router style), its path variables (field path → decoded
    /// value), the raw query and the body.
    pub fn request(
        &self,
        binding: Option<usize>,
        vars: &[(String, String)],
        query: Option<&str>,
        body: &[u8],
    ) -> Result<DynamicMessage, TranscodeError> {
        let plan = self.binding(binding)?;

        // 1. The body.
        let mut msg = match &plan.body {
            BodyPlan::None => DynamicMessage::new(self.input.clone()),
            _ if is_blank(body) => DynamicMessage::new(self.input.clone()),
            BodyPlan::Whole => {
                check_json_depth(body, MAX_JSON_DEPTH)?;
                parse_message(&self.input, body, "")?
            }
            BodyPlan::Field(fd, _) => {
                check_json_depth(body, MAX_JSON_DEPTH)?;
                parse_body_field(&self.input, fd, body)?
            }
        };
        self.bind_path_and_query(&mut msg, plan, binding, vars, query, false)?;
        Ok(msg)
    }

    /// The request message's protobuf bytes (as [`MethodPlan::request`] builds it, encoded):
    /// the JSON body encoded in one pass ([`RequestEncoder`]) when it can be, then the
    /// path variables and query parameters as a second message after it, which a decoder
    /// merges into the first (a later value of a field replaces an earlier one; messages
    /// merge), just as they override the body here. A body the one-pass encoder leaves to
    /// the reference, or path variables that a merge would not override the same way
    /// (a default value, a message-typed field), go through [`MethodPlan::request`].
    pub fn request_bytes(
        &self,
        binding: Option<usize>,
        vars: &[(String, String)],
        query: Option<&str>,
        body: &[u8],
    ) -> Result<Vec<u8>, TranscodeError> {
        if let Ok(bytes) = self.request_in_one_pass(binding, vars, query, body) {
            return Ok(bytes);
        }
        Ok(self.request(binding, vars, query, body)?.encode_to_vec())
    }

    fn request_in_one_pass(
        &self,
        binding: Option<usize>,
        vars: &[(String, String)],
        query: Option<&str>,
        body: &[u8],
    ) -> Result<Vec<u8>, NotFast> {
        let plan = self.binding(binding).map_err(|_| NotFast)?;
        let mut out = Vec::with_capacity(body.len() + 32);
        match &plan.body {
            BodyPlan::None => {}
            _ if is_blank(body) => {}
            BodyPlan::Whole => {
                check_json_depth(body, MAX_JSON_DEPTH).map_err(|_| NotFast)?;
                let encoder = self.request.as_ref().ok_or(NotFast)?;
                encoder.encode(body, &mut out)?;
            }
            BodyPlan::Field(fd, Some(encoder)) => {
                check_json_depth(body, MAX_JSON_DEPTH).map_err(|_| NotFast)?;
                encoder.encode_as_field(fd.number(), body, &mut out)?;
            }
            BodyPlan::Field(_, None) => return Err(NotFast),
        }
        let query_used = !matches!(plan.body, BodyPlan::Whole)
            && binding.is_some()
            && query.is_some_and(|q| !q.is_empty());
        if !query_used {
            // Path variables only: each encoded where it stands (a scalar, maybe nested).
            for (path, value) in vars {
                let target =
                    fieldpath::resolve(&self.input, path, Syntax::Request).map_err(|_| NotFast)?;
                let leaf = target.leaf();
                if leaf.is_list() || leaf.is_map() || matches!(leaf.kind(), Kind::Message(_)) {
                    return Err(NotFast);
                }
                let value = parse_text(&leaf.kind(), value).map_err(|_| NotFast)?;
                if !out.is_empty() && value == leaf.default_value() {
                    return Err(NotFast); // would not override the body's value
                }
                put_field_value(target.parents(), leaf, &value, &mut out)?;
            }
            return Ok(out);
        }
        let mut rest = DynamicMessage::new(self.input.clone());
        let careful = !out.is_empty();
        match self.bind_path_and_query(&mut rest, plan, binding, vars, query, careful) {
            Ok(false) => {}
            _ => return Err(NotFast),
        }
        rest.encode(&mut out).map_err(|_| NotFast)?;
        Ok(out)
    }

    /// Steps 2 and 3 of a request (module docs): the path variables, then the query
    /// parameters, into `msg`. With `careful`, answers whether a path variable sets a
    /// message-typed field or a field to its default value (which an encoded message
    /// appended to a body's would not override as setting it here does).
    fn bind_path_and_query(
        &self,
        msg: &mut DynamicMessage,
        plan: &BindingPlan,
        binding: Option<usize>,
        vars: &[(String, String)],
        query: Option<&str>,
        careful: bool,
    ) -> Result<bool, TranscodeError> {
        let mut needs_care = false;
        // 2. The path variables.
        let mut bound: Vec<String> = Vec::with_capacity(vars.len());
        for (path, value) in vars {
            let Ok(target) = fieldpath::resolve(&self.input, path, Syntax::Request) else {
                return Err(TranscodeError::bad_binding(format!(
                    "path variable \"{path}\" names no field of {}",
                    self.input.full_name()
                )));
            };
            if target.leaf().is_list() || target.leaf().is_map() || target.map_key().is_some() {
                return Err(TranscodeError::bad_binding(format!(
                    "path variable \"{path}\" names a repeated or map field"
                )));
            }
            set_at(msg, &target, value)?;
            if careful {
                let leaf = target.leaf();
                needs_care |= matches!(leaf.kind(), Kind::Message(_))
                    || parse_text(&leaf.kind(), value).map_or(true, |v| v == leaf.default_value());
            }
            bound.push(target.proto_path());
        }

        // 3. The query parameters.
        if matches!(plan.body, BodyPlan::Whole) || binding.is_none() {
            return Ok(needs_care);
        }
        let Some(query) = query.filter(|q| !q.is_empty()) else {
            return Ok(needs_care);
        };
        let body_field = match &plan.body {
            BodyPlan::Field(fd, _) => Some(fd.name()),
            _ => None,
        };
        for part in query.split('&').filter(|p| !p.is_empty()) {
            let (raw_name, raw_value) = part.split_once('=').unwrap_or((part, ""));
            let name = decode_query_component(raw_name)?;
            let Ok(target) = fieldpath::resolve(&self.input, &name, Syntax::Request) else {
                continue; // Not a field: ignored.
            };
            let proto_path = target.proto_path();
            if body_field == Some(target.first().name()) {
                continue; // Bound by the body.
            }
            if bound.iter().any(|b| overlaps(b, &proto_path)) {
                continue; // Bound by the path.
            }
            let value = decode_query_component(raw_value)?;
            set_at(msg, &target, &value)?;
        }
        Ok(needs_care)
    }

    /// Writes the reply, as the backend sent its bytes, as the HTTP answer's JSON body: a
    /// whole reply in one pass ([`ReplyWriter`]); a `response_body` field, or a reply the
    /// one-pass writer leaves to the reference, through a `DynamicMessage`
    /// ([`MethodPlan::response`]): the same JSON either way. A reply that does not decode
    /// is a [`TranscodeErrorKind::BadReply`].
    pub fn response_from_bytes(
        &self,
        binding: Option<usize>,
        reply: &[u8],
    ) -> Result<Vec<u8>, TranscodeError> {
        let plan = self.binding(binding)?;
        if let (None, Some(writer)) = (&plan.response, &self.reply) {
            let mut out = Vec::with_capacity(reply.len() * 2 + 64);
            if writer.write(reply, &mut out).is_ok() {
                return Ok(out);
            }
        }
        let message = DynamicMessage::decode(self.output.clone(), reply).map_err(|e| {
            TranscodeError::new(
                TranscodeErrorKind::BadReply,
                format!("the backend's reply does not decode: {e}"),
            )
        })?;
        self.response(binding, &message)
    }

    /// Writes the reply as the HTTP answer's JSON body: the whole message, or the binding's
    /// `response_body` field.
    pub fn response(
        &self,
        binding: Option<usize>,
        reply: &DynamicMessage,
    ) -> Result<Vec<u8>, TranscodeError> {
        let plan = self.binding(binding)?;
        let options = SerializeOptions::new();
        let mut out = Vec::with_capacity(256);
        let written = match &plan.response {
            None => proto_json::write_message(reply, &options, &mut out),
            Some(fd) => match fd.kind() {
                Kind::Message(md) if !fd.is_list() && !fd.is_map() => match reply.get_field(fd) {
                    Cow::Borrowed(Value::Message(m)) => {
                        proto_json::write_message(m, &options, &mut out)
                    }
                    _ => proto_json::write_message(&DynamicMessage::new(md), &options, &mut out),
                },
                _ => {
                    // A scalar, repeated or map field: write it in a message of its own.
                    let mut only = DynamicMessage::new(self.output.clone());
                    only.set_field(fd, reply.get_field(fd).into_owned());
                    let all = SerializeOptions::new().skip_default_fields(false);
                    let mut tmp = Vec::with_capacity(64);
                    proto_json::write_message(&only, &all, &mut tmp).map_err(reply_error)?;
                    let mut value: serde_json::Value =
                        serde_json::from_slice(&tmp).map_err(reply_error)?;
                    let field = value
                        .get_mut(fd.json_name())
                        .map(serde_json::Value::take)
                        .unwrap_or(serde_json::Value::Null);
                    serde_json::to_writer(&mut out, &field)
                }
            },
        };
        written.map_err(reply_error)?;
        Ok(out)
    }
}

fn reply_error(e: serde_json::Error) -> TranscodeError {
    TranscodeError::new(
        TranscodeErrorKind::BadReply,
        format!("the backend's reply cannot be written as JSON: {e}"),
    )
}

/// Refuses JSON nested deeper than `max` levels, by a byte scan that skips strings: cheap,
/// and run before any parser can recurse.
pub fn check_json_depth(body: &[u8], max: usize) -> Result<(), TranscodeError> {
    let mut depth = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    for &b in body {
        if in_string {
            if escaped {
                escaped = false;
            } else if b == b'\\' {
                escaped = true;
            } else if b == b'"' {
                in_string = false;
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'{' | b'[' => {
                depth += 1;
                if depth > max {
                    return Err(TranscodeError::bad_request(format!(
                        "JSON body nested deeper than {max} levels"
                    )));
                }
            }
            b'}' | b']' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    Ok(())
}

fn is_blank(body: &[u8]) -> bool {
    body.iter().all(u8::is_ascii_whitespace)
}

fn deserialize_options() -> DeserializeOptions {
    DeserializeOptions::new().deny_unknown_fields(false)
}

/// Parses a JSON body as a whole `desc` message; on failure, finds the field to blame.
fn parse_message(
    desc: &MessageDescriptor,
    body: &[u8],
    prefix: &str,
) -> Result<DynamicMessage, TranscodeError> {
    proto_json::read_message(desc, body, &deserialize_options()).map_err(|e| {
        // Explained as prost-reflect reads it: with the forms it does not read rewritten
        // (proto_json), so that a field in such a form is not the one blamed.
        let fixed = proto_json::corrected_request(desc, body);
        TranscodeError::bad_request(diagnose(desc, fixed.as_deref().unwrap_or(body), prefix, &e))
    })
}

/// Parses a JSON body as the value of the top-level field `fd` of `input`.
fn parse_body_field(
    input: &MessageDescriptor,
    fd: &FieldDescriptor,
    body: &[u8],
) -> Result<DynamicMessage, TranscodeError> {
    if let (Kind::Message(md), false, false) = (fd.kind(), fd.is_list(), fd.is_map()) {
        let sub = parse_message(&md, body, fd.name())?;
        let mut msg = DynamicMessage::new(input.clone());
        msg.set_field(fd, Value::Message(sub));
        return Ok(msg);
    }
    // A repeated, map or scalar field: parse the value, then read it as that field.
    let value: serde_json::Value = serde_json::from_slice(body)
        .map_err(|e| TranscodeError::bad_request(format!("invalid JSON body: {e}")))?;
    let as_field = |value: serde_json::Value| {
        let mut wrapper = serde_json::Map::with_capacity(1);
        wrapper.insert(fd.name().to_owned(), value);
        let wrapper = serde_json::Value::Object(wrapper);
        let read = DynamicMessage::deserialize_with_options(
            input.clone(),
            &wrapper,
            &deserialize_options(),
        );
        (read, wrapper)
    };
    let (mut read, mut wrapper) = as_field(value);
    if read.is_err() {
        // Once more with the forms prost-reflect does not read rewritten (proto_json).
        let fixed = proto_json::corrected_field(fd, body)
            .and_then(|fixed| serde_json::from_slice::<serde_json::Value>(&fixed).ok());
        if let Some(fixed) = fixed {
            (read, wrapper) = as_field(fixed);
        }
    }
    read.map_err(|e| {
        let why = find_bad_field(input, &wrapper, "")
            .unwrap_or_else(|| (fd.name().to_owned(), strip_position(&e.to_string())));
        TranscodeError::bad_request(format!("field \"{}\": {}", why.0, why.1))
    })
}

/// Explains why `body` is not a `desc` message: a JSON syntax error, or the field whose
/// value does not fit.
fn diagnose(
    desc: &MessageDescriptor,
    body: &[u8],
    prefix: &str,
    err: &serde_json::Error,
) -> String {
    let value: serde_json::Value = match serde_json::from_slice(body) {
        Ok(v) => v,
        Err(e) => return format!("invalid JSON body: {e}"),
    };
    if !value.is_object() {
        let what = if prefix.is_empty() {
            "the request body".to_owned()
        } else {
            format!("field \"{prefix}\"")
        };
        return format!("{what} must be a JSON object, not {}", json_type(&value));
    }
    match find_bad_field(desc, &value, prefix) {
        Some((path, why)) => format!("field \"{path}\": {why}"),
        None => format!("invalid request body: {}", strip_position(&err.to_string())),
    }
}

/// Walks `value` (a JSON object meant as a `desc` message) to the deepest field whose
/// value does not deserialize. Returns its path and what is wrong.
fn find_bad_field(
    desc: &MessageDescriptor,
    value: &serde_json::Value,
    prefix: &str,
) -> Option<(String, String)> {
    let obj = value.as_object()?;
    let options = deserialize_options();
    for (key, v) in obj {
        let Some(fd) = fieldpath::lookup(desc, key, Syntax::Request) else {
            continue; // Unknown fields are ignored.
        };
        let path = join_path(prefix, fd.name());
        let mut one = serde_json::Map::with_capacity(1);
        one.insert(key.clone(), v.clone());
        let one = serde_json::Value::Object(one);
        let Err(e) = DynamicMessage::deserialize_with_options(desc.clone(), &one, &options) else {
            continue;
        };
        let detail = strip_position(&e.to_string());
        let elem_kind = if fd.is_map() {
            match fd.kind() {
                Kind::Message(entry) => entry.map_entry_value_field().kind(),
                k => k,
            }
        } else {
            fd.kind()
        };
        // Narrow down into lists, maps and nested messages.
        if fd.is_list() {
            if let serde_json::Value::Array(items) = v {
                for (i, item) in items.iter().enumerate() {
                    let item_path = format!("{path}[{i}]");
                    let mut probe = serde_json::Map::with_capacity(1);
                    probe.insert(key.clone(), serde_json::Value::Array(vec![item.clone()]));
                    let probe = serde_json::Value::Object(probe);
                    if DynamicMessage::deserialize_with_options(desc.clone(), &probe, &options)
                        .is_ok()
                    {
                        continue;
                    }
                    return Some(leaf_or_deeper(&elem_kind, item, item_path, &detail));
                }
            }
        } else if fd.is_map() {
            if let serde_json::Value::Object(entries) = v {
                for (k, item) in entries {
                    let item_path = format!("{path}[{k}]");
                    let mut inner = serde_json::Map::with_capacity(1);
                    inner.insert(k.clone(), item.clone());
                    let mut probe = serde_json::Map::with_capacity(1);
                    probe.insert(key.clone(), serde_json::Value::Object(inner));
                    let probe = serde_json::Value::Object(probe);
                    if DynamicMessage::deserialize_with_options(desc.clone(), &probe, &options)
                        .is_ok()
                    {
                        continue;
                    }
                    return Some(leaf_or_deeper(&elem_kind, item, item_path, &detail));
                }
            }
        }
        return Some(leaf_or_deeper(&elem_kind, v, path, &detail));
    }
    None
}

/// Blames a nested field if `kind` is a plain message and one of its fields is wrong;
/// otherwise blames `path` itself.
fn leaf_or_deeper(
    kind: &Kind,
    value: &serde_json::Value,
    path: String,
    detail: &str,
) -> (String, String) {
    if let Kind::Message(md) = kind {
        if !fieldpath::is_well_known(md) {
            if let serde_json::Value::Object(_) = value {
                if let Some(deeper) = find_bad_field(md, value, &path) {
                    return deeper;
                }
            } else if !value.is_null() {
                return (
                    path,
                    format!(
                        "expected a JSON object ({}), not {}",
                        md.full_name(),
                        json_type(value)
                    ),
                );
            }
        }
    }
    let why = if value.is_object() || value.is_array() {
        format!(
            "{} is not a valid {}: {detail}",
            json_type(value),
            kind_name(kind)
        )
    } else {
        format!(
            "invalid value {} for {} ({detail})",
            quote(value),
            kind_name(kind)
        )
    };
    (path, why)
}

fn json_type(v: &serde_json::Value) -> &'static str {
    match v {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "an array",
        serde_json::Value::Object(_) => "an object",
    }
}

fn quote(v: &serde_json::Value) -> String {
    let s = v.to_string();
    if s.len() <= MAX_QUOTED {
        return s;
    }
    let mut end = MAX_QUOTED;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

/// serde_json appends " at line L column C"; the field path says more.
fn strip_position(s: &str) -> String {
    match s.rfind(" at line ") {
        Some(i) if s[i..].contains(" column ") => s[..i].to_owned(),
        _ => s.to_owned(),
    }
}

fn join_path(prefix: &str, name: &str) -> String {
    if prefix.is_empty() {
        name.to_owned()
    } else {
        format!("{prefix}.{name}")
    }
}

/// A proto type's name as a `.proto` file writes it (`int64`, `pkg.Message`, `pkg.Enum`);
/// the developer portal documents fields with it.
pub fn proto_type_name(kind: &Kind) -> String {
    match kind {
        Kind::Double => "double".into(),
        Kind::Float => "float".into(),
        Kind::Int32 => "int32".into(),
        Kind::Int64 => "int64".into(),
        Kind::Uint32 => "uint32".into(),
        Kind::Uint64 => "uint64".into(),
        Kind::Sint32 => "sint32".into(),
        Kind::Sint64 => "sint64".into(),
        Kind::Fixed32 => "fixed32".into(),
        Kind::Fixed64 => "fixed64".into(),
        Kind::Sfixed32 => "sfixed32".into(),
        Kind::Sfixed64 => "sfixed64".into(),
        Kind::Bool => "bool".into(),
        Kind::String => "string".into(),
        Kind::Bytes => "bytes".into(),
        Kind::Message(md) => md.full_name().to_owned(),
        Kind::Enum(ed) => ed.full_name().to_owned(),
    }
}

/// The type name used in error messages.
fn kind_name(kind: &Kind) -> String {
    match kind {
        Kind::Enum(ed) => format!("enum {}", ed.full_name()),
        other => proto_type_name(other),
    }
}

/// Whether field paths `a` and `b` are the same field or one contains the other: a query
/// parameter at one is ignored when a path variable binds the other (the developer portal
/// leaves such parameters out by the same rule).
pub fn overlaps(a: &str, b: &str) -> bool {
    let within = |outer: &str, inner: &str| {
        inner.len() > outer.len()
            && inner.starts_with(outer)
            && inner.as_bytes().get(outer.len()) == Some(&b'.')
    };
    a == b || within(a, b) || within(b, a)
}

/// Percent-decodes a query name or value (`+` is a space, as in forms).
fn decode_query_component(raw: &str) -> Result<String, TranscodeError> {
    let spaced: Cow<'_, str> = if raw.contains('+') {
        Cow::Owned(raw.replace('+', " "))
    } else {
        Cow::Borrowed(raw)
    };
    percent_encoding::percent_decode_str(&spaced)
        .decode_utf8()
        .map(Cow::into_owned)
        .map_err(|_| TranscodeError::bad_request(format!("query parameter \"{raw}\" is not UTF-8")))
}

/// Sets the field at `target` in `msg` from its text form (a path variable or a query
/// value); a repeated field gets the value appended, a map field the entry inserted.
fn set_at(msg: &mut DynamicMessage, target: &FieldPath, text: &str) -> Result<(), TranscodeError> {
    let path = target.proto_path();
    let bad = |why: String| TranscodeError::bad_request(format!("field \"{path}\": {why}"));
    let leaf = target.leaf();
    let mut current = msg;
    for fd in target.parents() {
        current = match current.get_field_mut(fd) {
            Value::Message(m) => m,
            _ => return Err(bad("not a message".into())),
        };
    }
    if leaf.is_map() {
        let Kind::Message(entry) = leaf.kind() else {
            return Err(bad("not a map".into()));
        };
        let Some(key_text) = target.map_key() else {
            return Err(bad("a map field is set as name[key]=value".into()));
        };
        let key_field = entry.map_entry_key_field();
        let value_field = entry.map_entry_value_field();
        let key = map_key(&key_field.kind(), key_text).map_err(&bad)?;
        let value = parse_text(&value_field.kind(), text).map_err(&bad)?;
        if let Value::Map(map) = current.get_field_mut(leaf) {
            map.insert(key, value);
        }
        return Ok(());
    }
    let value = parse_text(&leaf.kind(), text).map_err(&bad)?;
    if leaf.is_list() {
        if let Value::List(list) = current.get_field_mut(leaf) {
            list.push(value);
        }
    } else {
        current.set_field(leaf, value);
    }
    Ok(())
}

fn invalid(text: &str, kind: &Kind) -> String {
    format!(
        "invalid value {} for {}",
        quote(&serde_json::Value::String(text.to_owned())),
        kind_name(kind)
    )
}

fn map_key(kind: &Kind, text: &str) -> Result<MapKey, String> {
    let err = || invalid(text, kind);
    Ok(match kind {
        Kind::String => MapKey::String(text.to_owned()),
        Kind::Bool => MapKey::Bool(parse_bool(text).ok_or_else(err)?),
        Kind::Int32 | Kind::Sint32 | Kind::Sfixed32 => {
            MapKey::I32(text.trim().parse().map_err(|_| err())?)
        }
        Kind::Int64 | Kind::Sint64 | Kind::Sfixed64 => {
            MapKey::I64(text.trim().parse().map_err(|_| err())?)
        }
        Kind::Uint32 | Kind::Fixed32 => MapKey::U32(text.trim().parse().map_err(|_| err())?),
        Kind::Uint64 | Kind::Fixed64 => MapKey::U64(text.trim().parse().map_err(|_| err())?),
        _ => return Err(err()),
    })
}

fn parse_bool(text: &str) -> Option<bool> {
    match text.trim() {
        "true" | "True" | "TRUE" | "1" | "t" | "T" => Some(true),
        "false" | "False" | "FALSE" | "0" | "f" | "F" => Some(false),
        _ => None,
    }
}

fn parse_float(text: &str) -> Option<f64> {
    match text.trim() {
        "Infinity" => Some(f64::INFINITY),
        "-Infinity" => Some(f64::NEG_INFINITY),
        "NaN" => Some(f64::NAN),
        t => t.parse().ok(),
    }
}

/// Parses the text form of one value of `kind` (a path variable or query value).
fn parse_text(kind: &Kind, text: &str) -> Result<Value, String> {
    let err = || invalid(text, kind);
    let t = text.trim();
    Ok(match kind {
        Kind::String => Value::String(text.to_owned()),
        Kind::Bool => Value::Bool(parse_bool(t).ok_or_else(err)?),
        Kind::Int32 | Kind::Sint32 | Kind::Sfixed32 => Value::I32(t.parse().map_err(|_| err())?),
        Kind::Int64 | Kind::Sint64 | Kind::Sfixed64 => Value::I64(t.parse().map_err(|_| err())?),
        Kind::Uint32 | Kind::Fixed32 => Value::U32(t.parse().map_err(|_| err())?),
        Kind::Uint64 | Kind::Fixed64 => Value::U64(t.parse().map_err(|_| err())?),
        Kind::Double => Value::F64(parse_float(t).ok_or_else(err)?),
        #[allow(clippy::cast_possible_truncation)]
        Kind::Float => Value::F32(parse_float(t).ok_or_else(err)? as f32),
        Kind::Bytes => Value::Bytes(base64_decode(t).ok_or_else(err)?.into()),
        Kind::Enum(ed) => match ed.get_value_by_name(t) {
            Some(v) => Value::EnumNumber(v.number()),
            None => Value::EnumNumber(t.parse().map_err(|_| err())?),
        },
        Kind::Message(md) => {
            if !fieldpath::is_well_known(md) {
                return Err(format!(
                    "a {} message cannot be given as text (set its fields instead)",
                    md.full_name()
                ));
            }
            // Well-known types take their JSON form: a string (Timestamp, Duration,
            // FieldMask, the wrappers of strings, bytes and numbers) or a boolean.
            let json = if md.full_name() == "google.protobuf.BoolValue" {
                serde_json::Value::Bool(parse_bool(t).ok_or_else(err)?)
            } else {
                serde_json::Value::String(text.to_owned())
            };
            let m =
                DynamicMessage::deserialize_with_options(md.clone(), json, &deserialize_options())
                    .map_err(|e| format!("{} ({})", err(), strip_position(&e.to_string())))?;
            Value::Message(m)
        }
    })
}

/// Decodes standard or URL-safe base64, padded or not (as proto3 JSON accepts).
fn base64_decode(text: &str) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(text.len() * 3 / 4);
    let mut acc: u32 = 0;
    let mut bits = 0u32;
    for c in text.bytes() {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' | b'-' => 62,
            b'/' | b'_' => 63,
            b'=' => break,
            _ => return None,
        };
        acc = (acc << 6) | u32::from(v);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push(((acc >> bits) & 0xff) as u8);
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost_reflect::DescriptorPool;
    use serde_json::json;

    /// The demo services, compiled from the repository's `.proto` sources (the demo crate
    /// depends on this one, so its compiled set is not used here).
    fn pool() -> DescriptorPool {
        let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../protos");
        protox::Compiler::new([root])
            .unwrap()
            .open_files(["demo/order.proto", "demo/product.proto"])
            .unwrap()
            .descriptor_pool()
    }

    fn method(service: &str, name: &str) -> MethodDescriptor {
        pool()
            .get_service_by_name(service)
            .unwrap()
            .methods()
            .find(|m| m.name() == name)
            .unwrap()
    }

    fn spec(body: Option<&str>, response_body: Option<&str>) -> BindingSpec {
        BindingSpec {
            body: body.map(str::to_owned),
            response_body: response_body.map(str::to_owned),
        }
    }

    fn plan(service: &str, name: &str, specs: &[BindingSpec]) -> MethodPlan {
        MethodPlan::new(&method(service, name), specs).unwrap()
    }

    const ORDER: &str = "demo.order.v1.OrderService";
    const PRODUCT: &str = "demo.product.v1.ProductService";

    fn vars(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(a, b)| ((*a).to_owned(), (*b).to_owned()))
            .collect()
    }

    /// The message as proto3 JSON (defaults left out), for comparisons.
    fn to_json(msg: &DynamicMessage) -> serde_json::Value {
        serde_json::to_value(msg).unwrap()
    }

    fn bad(r: Result<DynamicMessage, TranscodeError>) -> String {
        let e = match r {
            Ok(m) => panic!("expected an error, got {}", to_json(&m)),
            Err(e) => e,
        };
        assert_eq!(e.kind, TranscodeErrorKind::BadRequest, "{e}");
        e.message
    }

    #[test]
    fn path_variables_fill_fields_and_nested_fields() {
        let p = plan(ORDER, "GetOrder", &[spec(None, None), spec(None, None)]);
        let m = p
            .request(Some(0), &vars(&[("order_id", "42")]), None, b"")
            .unwrap();
        assert_eq!(to_json(&m), json!({"orderId": "42"}));
        let m = p
            .request(
                Some(1),
                &vars(&[("shop.id", "s 1"), ("order_id", "7")]),
                None,
                b"",
            )
            .unwrap();
        assert_eq!(to_json(&m), json!({"orderId": "7", "shop": {"id": "s 1"}}));
    }

    #[test]
    fn resource_name_and_double_star_captures_are_plain_strings() {
        let p = plan(PRODUCT, "GetProduct", &[spec(None, None)]);
        let m = p
            .request(
                Some(0),
                &vars(&[("name", "shops/s1/products/p1")]),
                None,
                b"",
            )
            .unwrap();
        assert_eq!(to_json(&m), json!({"name": "shops/s1/products/p1"}));
        let p = plan(PRODUCT, "GetFile", &[spec(None, None)]);
        let m = p
            .request(
                Some(0),
                &vars(&[("path", "images/2024/a%2Fb.png")]),
                None,
                b"",
            )
            .unwrap();
        assert_eq!(to_json(&m), json!({"path": "images/2024/a%2Fb.png"}));
    }

    #[test]
    fn body_star_is_the_whole_message_and_path_vars_override_it() {
        let p = plan(ORDER, "CancelOrder", &[spec(Some("*"), None)]);
        let body = br#"{"orderId": "from-body", "reason": "late", "refund": true, "unknown": 1}"#;
        let m = p
            .request(
                Some(0),
                &vars(&[("order_id", "42")]),
                Some("reason=query"),
                body,
            )
            .unwrap();
        // Path wins over body; the query is not used with body "*"; unknown fields ignored.
        assert_eq!(
            to_json(&m),
            json!({"orderId": "42", "reason": "late", "refund": true})
        );
    }

    #[test]
    fn empty_body_is_an_empty_message() {
        let p = plan(ORDER, "CreateOrder", &[spec(Some("*"), None)]);
        assert_eq!(
            to_json(&p.request(Some(0), &[], None, b"  \n").unwrap()),
            json!({})
        );
    }

    #[test]
    fn body_field_takes_the_json_body_and_the_rest_from_query() {
        let p = plan(ORDER, "UpdateOrder", &[spec(Some("order"), None)]);
        let body = br#"{"orderId": "ignored", "item": "pen", "qty": 3}"#;
        let m = p
            .request(
                Some(0),
                &vars(&[("order.order_id", "42")]),
                Some("update_mask=item,qty&order.item=from-query"),
                body,
            )
            .unwrap();
        assert_eq!(
            to_json(&m),
            json!({"order": {"orderId": "42", "item": "pen", "qty": 3}, "updateMask": "item,qty"})
        );
    }

    #[test]
    fn body_field_of_a_resource_name_path() {
        let p = plan(PRODUCT, "UpdateProduct", &[spec(Some("product"), None)]);
        let m = p
            .request(
                Some(0),
                &vars(&[("product.name", "shops/s1/products/p1")]),
                None,
                br#"{"title": "T", "priceCents": 12, "stock": "18446744073709551615"}"#,
            )
            .unwrap();
        assert_eq!(
            to_json(&m),
            json!({"product": {"name": "shops/s1/products/p1", "title": "T",
                               "priceCents": "12", "stock": "18446744073709551615"}})
        );
    }

    #[test]
    fn query_parameters_fill_every_other_field() {
        let p = plan(ORDER, "ListOrders", &[spec(None, None), spec(None, None)]);
        let q = "shop.id=s1&statuses=ORDER_STATUS_PAID&statuses=4&tags=a&tags=b+c\
                 &pageSize=10&filter.min_total_cents=100&filter.createdAfter=2026-01-01T00:00:00Z\
                 &filter.min_price.units=-5&include_cancelled=true&after_sequence=18446744073709551615\
                 &ids=1&ids=-2&min_rating=4.5&descending=1&unknown.field=x&method=order.list";
        let m = p.request(Some(0), &[], Some(q), b"").unwrap();
        assert_eq!(
            to_json(&m),
            json!({
                "shop": {"id": "s1"},
                "statuses": ["ORDER_STATUS_PAID", "ORDER_STATUS_CANCELLED"],
                "tags": ["a", "b c"],
                "pageSize": 10,
                "filter": {"minTotalCents": "100", "createdAfter": "2026-01-01T00:00:00Z",
                           "minPrice": {"units": "-5"}},
                "includeCancelled": true,
                "afterSequence": "18446744073709551615",
                "ids": ["1", "-2"],
                "minRating": 4.5,
                "descending": true,
            })
        );
    }

    #[test]
    fn query_parameters_bound_by_the_path_are_ignored() {
        let p = plan(ORDER, "ListOrders", &[spec(None, None), spec(None, None)]);
        let m = p
            .request(
                Some(1),
                &vars(&[("shop.id", "path")]),
                Some("shop.id=query&shop.name=n"),
                b"",
            )
            .unwrap();
        assert_eq!(to_json(&m), json!({"shop": {"id": "path", "name": "n"}}));
        let p = plan(ORDER, "GetOrder", &[spec(None, None)]);
        let m = p
            .request(
                Some(0),
                &vars(&[("order_id", "42")]),
                Some("orderId=43"),
                b"",
            )
            .unwrap();
        assert_eq!(to_json(&m), json!({"orderId": "42"}));
    }

    #[test]
    fn query_maps_bytes_and_wrappers() {
        let p = plan(ORDER, "CreateOrder", &[spec(None, None)]);
        let m = p
            .request(
                Some(0),
                &[],
                Some("labels[k1]=v1&labels%5Bk2%5D=v%202&note=hi&ship_within=1.5s"),
                b"",
            )
            .unwrap();
        assert_eq!(
            to_json(&m),
            json!({"labels": {"k1": "v1", "k2": "v 2"}, "note": "hi", "shipWithin": "1.500s"})
        );
        assert_eq!(base64_decode("aGk=").unwrap(), b"hi");
        assert_eq!(base64_decode("_-8").unwrap(), vec![0xff, 0xef]);
    }

    #[test]
    fn query_errors_name_the_field() {
        let p = plan(ORDER, "ListOrders", &[spec(None, None)]);
        let e = bad(p.request(Some(0), &[], Some("page_size=abc"), b""));
        assert_eq!(e, r#"field "page_size": invalid value "abc" for int32"#);
        let e = bad(p.request(Some(0), &[], Some("statuses=NOPE"), b""));
        assert!(
            e.contains(r#"field "statuses""#) && e.contains("demo.order.v1.OrderStatus"),
            "{e}"
        );
        let e = bad(p.request(Some(0), &[], Some("filter.created_after=yesterday"), b""));
        assert!(
            e.starts_with(r#"field "filter.created_after": invalid value "yesterday""#),
            "{e}"
        );
        let e = bad(p.request(Some(0), &[], Some("filter=x"), b""));
        assert!(e.starts_with(r#"field "filter": "#), "{e}");
        let e = bad(p.request(Some(0), &[], Some("ids=1.5"), b""));
        assert_eq!(e, r#"field "ids": invalid value "1.5" for int64"#);
    }

    #[test]
    fn path_variable_errors_name_the_field() {
        let p = plan(ORDER, "ListOrders", &[spec(None, None)]);
        let e = bad(p.request(Some(0), &vars(&[("page_size", "x")]), None, b""));
        assert_eq!(e, r#"field "page_size": invalid value "x" for int32"#);
    }

    #[test]
    fn proto3_json_in_the_body() {
        let p = plan(ORDER, "CreateOrder", &[spec(Some("*"), None)]);
        let body = br#"{
            "item": "book", "qty": "2", "shop": {"id": "s1"}, "status": 2,
            "total_cents": 9007199254740993, "sequence": "18446744073709551615",
            "shipWithin": "3600s", "attributes": {"a": [1, {"b": null}], "c": "d"},
            "note": "n", "tags": ["x"], "labels": {"k": "v"},
            "items": [{"sku": "s", "qty": 1, "unitPrice": {"units": "-3"}}],
            "createdAt": "2026-01-02T03:04:05.5+01:00"
        }"#;
        let m = p.request(Some(0), &[], None, body).unwrap();
        assert_eq!(
            to_json(&m),
            json!({
                "item": "book", "qty": 2, "shop": {"id": "s1"}, "status": "ORDER_STATUS_PAID",
                "totalCents": "9007199254740993", "sequence": "18446744073709551615",
                "shipWithin": "3600s", "attributes": {"a": [1.0, {"b": null}], "c": "d"},
                "note": "n", "tags": ["x"], "labels": {"k": "v"},
                "items": [{"sku": "s", "qty": 1, "unitPrice": {"units": "-3"}}],
                "createdAt": "2026-01-02T02:04:05.500Z"
            })
        );
    }

    #[test]
    fn integers_in_a_floats_form_in_the_body() {
        // proto3 JSON forms prost-reflect does not read itself (proto_json), in a whole body
        // and as a message, repeated or scalar body field.
        let p = plan(ORDER, "CreateOrder", &[spec(Some("*"), None)]);
        let body = br#"{"qty": "2e0", "totalCents": "-1.5e3", "items": [{"qty": "1E1"}]}"#;
        assert_eq!(
            to_json(&p.request(Some(0), &[], None, body).unwrap()),
            json!({"qty": 2, "totalCents": "-1500", "items": [{"qty": 10}]})
        );
        let bytes = p.request_bytes(Some(0), &[], None, body).unwrap();
        let m = DynamicMessage::decode(p.input().clone(), bytes.as_slice()).unwrap();
        assert_eq!(
            to_json(&m),
            json!({"qty": 2, "totalCents": "-1500", "items": [{"qty": 10}]})
        );
        let e = bad(p.request(Some(0), &[], None, br#"{"qty": "2.5e0"}"#));
        assert!(e.starts_with(r#"field "qty": "#), "{e}");
        // The mistake is blamed, not a field in such a form before it.
        let body = br#"{"items": [{"qty": "1e1"}], "shop": {"id": 5}}"#;
        let e = bad(p.request(Some(0), &[], None, body));
        assert!(e.starts_with(r#"field "shop.id": "#), "{e}");

        let p = plan(ORDER, "UpdateOrder", &[spec(Some("order"), None)]);
        let m = p.request(Some(0), &[], None, br#"{"qty": "3e0"}"#).unwrap();
        assert_eq!(to_json(&m), json!({"order": {"qty": 3}}));
        let p = plan(ORDER, "ListOrders", &[spec(Some("ids"), None)]);
        let m = p.request(Some(0), &[], None, br#"["1e2", 2]"#).unwrap();
        assert_eq!(to_json(&m), json!({"ids": ["100", "2"]}));
        let p = plan(ORDER, "ListOrders", &[spec(Some("page_size"), None)]);
        let m = p.request(Some(0), &[], None, br#""5e1""#).unwrap();
        assert_eq!(to_json(&m), json!({"pageSize": 50}));
        let e = bad(p.request(Some(0), &[], None, br#""5e10""#));
        assert!(e.starts_with(r#"field "page_size": "#), "{e}");
    }

    #[test]
    fn body_errors_name_the_field() {
        let p = plan(ORDER, "CreateOrder", &[spec(Some("*"), None)]);
        let e = bad(p.request(Some(0), &[], None, br#"{"item": "book", "qty": "abc"}"#));
        assert!(
            e.starts_with(r#"field "qty": invalid value "abc" for int32"#),
            "{e}"
        );
        let e = bad(p.request(Some(0), &[], None, br#"{"shop": {"id": 5}}"#));
        assert!(
            e.starts_with(r#"field "shop.id": invalid value 5 for string"#),
            "{e}"
        );
        let e = bad(p.request(Some(0), &[], None, br#"{"items": [{}, {"qty": true}]}"#));
        assert!(
            e.starts_with(r#"field "items[1].qty": invalid value true for int32"#),
            "{e}"
        );
        let e = bad(p.request(Some(0), &[], None, br#"{"labels": {"a": "x", "b": 1}}"#));
        assert!(
            e.starts_with(r#"field "labels[b]": invalid value 1 for string"#),
            "{e}"
        );
        // An unknown enum name is ignored like an unknown field (proto3 JSON with
        // ignore-unknown); an unknown number is kept (open enums).
        let m = p
            .request(Some(0), &[], None, br#"{"status": "NOPE"}"#)
            .unwrap();
        assert_eq!(to_json(&m), json!({}));
        let e = bad(p.request(Some(0), &[], None, br#"{"status": true}"#));
        assert!(
            e.starts_with(r#"field "status": invalid value true for enum"#),
            "{e}"
        );
        let e = bad(p.request(Some(0), &[], None, br#"{"createdAt": "yesterday"}"#));
        assert!(
            e.starts_with(r#"field "created_at": invalid value "yesterday""#),
            "{e}"
        );
        let e = bad(p.request(Some(0), &[], None, br#"{"qty": 99999999999}"#));
        assert!(
            e.starts_with(r#"field "qty": invalid value 99999999999 for int32"#),
            "{e}"
        );
        let e = bad(p.request(Some(0), &[], None, br#"{"shop": "s1"}"#));
        assert!(
            e.starts_with(r#"field "shop": expected a JSON object"#),
            "{e}"
        );
        let e = bad(p.request(Some(0), &[], None, br#"{"item": "book""#));
        assert!(e.starts_with("invalid JSON body"), "{e}");
        let e = bad(p.request(Some(0), &[], None, br#"[1, 2]"#));
        assert!(
            e.starts_with("the request body must be a JSON object"),
            "{e}"
        );
        let e = bad(p.request(Some(0), &[], None, br#"{"item": "a"} {"qty": 1}"#));
        assert!(e.starts_with("invalid JSON body"), "{e}");

        let p = plan(ORDER, "UpdateOrder", &[spec(Some("order"), None)]);
        let e = bad(p.request(Some(0), &[], None, br#"{"qty": "x"}"#));
        assert!(
            e.starts_with(r#"field "order.qty": invalid value "x" for int32"#),
            "{e}"
        );
    }

    #[test]
    fn deep_json_is_refused_before_parsing() {
        let p = plan(ORDER, "CreateOrder", &[spec(Some("*"), None)]);
        let mut deep = String::from(r#"{"attributes": {"a": "#);
        deep.push_str(&"[".repeat(100_000));
        deep.push_str(&"]".repeat(100_000));
        deep.push_str("}}");
        let e = bad(p.request(Some(0), &[], None, deep.as_bytes()));
        assert!(e.contains("nested deeper than 64"), "{e}");
        // Brackets inside strings do not count.
        let body = format!(r#"{{"item": "{}"}}"#, "[{".repeat(1000));
        p.request(Some(0), &[], None, body.as_bytes()).unwrap();
        // Deep but allowed nesting parses on a small stack, as a worker thread has (a
        // Struct stops at prost's recursion limit, ~48 levels: a 400, not a crash).
        let mut ok = String::from(r#"{"attributes": {"a": "#);
        ok.push_str(&"[".repeat(40));
        ok.push_str(&"]".repeat(40));
        ok.push_str("}}");
        let handle = std::thread::Builder::new()
            .stack_size(2 * 1024 * 1024)
            .spawn(move || p.request(Some(0), &[], None, ok.as_bytes()).map(|_| ()))
            .unwrap();
        handle.join().unwrap().unwrap();
    }

    #[test]
    fn router_style_takes_the_body_as_the_message_and_ignores_the_query() {
        let p = plan(ORDER, "GetOrder", &[spec(None, None)]);
        let m = p
            .request(
                None,
                &[],
                Some("method=order.get&order_id=9"),
                br#"{"order_id": "42"}"#,
            )
            .unwrap();
        assert_eq!(to_json(&m), json!({"orderId": "42"}));
    }

    #[test]
    fn bad_body_or_response_field_is_refused_at_build_time() {
        let e = MethodPlan::new(&method(ORDER, "UpdateOrder"), &[spec(Some("nope"), None)])
            .unwrap_err();
        assert_eq!(e.kind, TranscodeErrorKind::BadBinding);
        assert!(e.message.contains("body \"nope\""), "{e}");
        let e =
            MethodPlan::new(&method(ORDER, "GetOrder"), &[spec(None, Some("nope"))]).unwrap_err();
        assert!(e.message.contains("response_body \"nope\""), "{e}");
    }

    fn sample_order() -> DynamicMessage {
        let desc = method(ORDER, "GetOrder").output();
        DynamicMessage::deserialize(
            desc,
            json!({"orderId": "42", "status": "ORDER_STATUS_PAID", "totalCents": "0",
                   "sequence": "18446744073709551615", "createdAt": "2026-01-02T03:04:05Z",
                   "shop": {"id": "s1"}, "tags": ["a"], "qty": 0}),
        )
        .unwrap()
    }

    #[test]
    fn replies_are_proto3_json_without_defaults() {
        let p = plan(ORDER, "GetOrder", &[spec(None, None)]);
        let out = p.response(Some(0), &sample_order()).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(
            v,
            json!({"orderId": "42", "status": "ORDER_STATUS_PAID",
                   "sequence": "18446744073709551615", "createdAt": "2026-01-02T03:04:05Z",
                   "shop": {"id": "s1"}, "tags": ["a"]})
        );
        // The router style answers the whole reply too.
        assert_eq!(p.response(None, &sample_order()).unwrap(), out);
    }

    #[test]
    fn response_body_selects_one_field() {
        let specs = [
            spec(None, Some("status")),
            spec(None, Some("shop")),
            spec(None, Some("tags")),
            spec(None, Some("total_cents")),
            spec(None, Some("items")),
        ];
        let p = plan(ORDER, "GetOrderStatus", &specs);
        let order = sample_order();
        let text = |i| String::from_utf8(p.response(Some(i), &order).unwrap()).unwrap();
        assert_eq!(text(0), r#""ORDER_STATUS_PAID""#);
        assert_eq!(text(1), r#"{"id":"s1"}"#);
        assert_eq!(text(2), r#"["a"]"#);
        assert_eq!(text(3), r#""0""#);
        assert_eq!(text(4), "[]");
    }

    #[test]
    fn replies_from_bytes_say_what_the_decoded_reply_says() {
        use prost::Message as _;
        let specs = [
            spec(None, None),
            spec(None, Some("status")),
            spec(None, Some("shop")),
        ];
        let p = plan(ORDER, "GetOrderStatus", &specs);
        let mut order = sample_order();
        // Everything the demo's answers carry: well-known types, a map, nested lists.
        let extra = DynamicMessage::deserialize(
            p.output().clone(),
            json!({"shipWithin": "86400s", "attributes": {"gift": true, "note": ["x", 1]},
                   "note": "leave at door", "labels": {"tier": "gold"},
                   "items": [{"sku": "A-1", "qty": 2, "unitPrice": {"currencyCode": "EUR", "units": "3", "nanos": 500000000}}]}),
        )
        .unwrap();
        order.merge(extra.encode_to_vec().as_slice()).unwrap();
        let bytes = order.encode_to_vec();
        for binding in [None, Some(0), Some(1), Some(2)] {
            assert_eq!(
                String::from_utf8(p.response_from_bytes(binding, &bytes).unwrap()).unwrap(),
                String::from_utf8(p.response(binding, &order).unwrap()).unwrap(),
                "binding {binding:?}"
            );
        }
        // Bytes that do not decode are the backend's fault.
        let e = p.response_from_bytes(Some(0), &[0x0a, 0x05]).unwrap_err();
        assert_eq!(e.kind, TranscodeErrorKind::BadReply);
        assert!(e.message.contains("does not decode"), "{}", e.message);
        // An unusual encoding (fields out of order) goes the reference's way: same JSON.
        let mut reordered = DynamicMessage::new(p.output().clone());
        reordered.set_field_by_name("qty", Value::I32(3));
        let mut backwards = reordered.encode_to_vec();
        backwards.extend_from_slice(&[0x0a, 0x01, b'7']); // order_id after qty
        assert_eq!(
            String::from_utf8(p.response_from_bytes(Some(0), &backwards).unwrap()).unwrap(),
            r#"{"orderId":"7","qty":3}"#
        );
    }

    #[test]
    fn request_bytes_decode_to_the_request_message() {
        use prost::Message as _;
        let specs_of = |name: &str| -> Vec<BindingSpec> {
            match name {
                "UpdateOrder" => vec![spec(Some("order"), None)],
                "CreateOrder" | "CancelOrder" => vec![spec(Some("*"), None)],
                _ => vec![spec(None, None), spec(None, None)],
            }
        };
        // (method, binding, path variables, query, body)
        type Case<'a> = (
            &'a str,
            Option<usize>,
            &'a [(&'a str, &'a str)],
            Option<&'a str>,
            &'a str,
        );
        let cases: &[Case] = &[
            ("GetOrder", Some(0), &[("order_id", "42")], None, ""),
            ("GetOrder", Some(1), &[("shop.id", "s1"), ("order_id", "42")], Some("x=1"), ""),
            ("ListOrders", Some(0), &[], Some("statuses=ORDER_STATUS_PAID&tags=a&tags=b&filter.min_total_cents=100&pageSize=0"), ""),
            ("CreateOrder", Some(0), &[], Some("item=ignored"), r#"{"item": "pen", "qty": 2, "shop": {"id": "s1"}, "labels": {"a": "b"}, "createdAt": "2026-01-01T00:00:00Z", "attributes": {"k": [1]}}"#),
            ("CreateOrder", None, &[], None, r#"{"item": "pen", "tags": ["x", "y"], "items": [{"sku": "A", "qty": 1}]}"#),
            ("CreateOrder", Some(0), &[], None, "  "),
            // The path overrides the body, also with an empty value or a zero.
            ("CancelOrder", Some(0), &[("order_id", "42")], None, r#"{"orderId": "ignored", "reason": "late", "refund": true}"#),
            ("CancelOrder", Some(0), &[("order_id", "")], None, r#"{"orderId": "from-body", "reason": "late"}"#),
            ("UpdateOrder", Some(0), &[("order.order_id", "42")], Some("update_mask=item,qty&order.item=from-query"), r#"{"orderId": "ignored", "item": "pen", "qty": 3}"#),
            ("UpdateOrder", Some(0), &[("order.order_id", "")], None, r#"{"orderId": "from-body"}"#),
            ("UpdateOrder", Some(0), &[("order.order_id", "7")], None, "{}"),
            // Left to the reference: a body field given twice.
            ("CreateOrder", Some(0), &[], None, r#"{"qty": 1, "qty": 0}"#),
        ];
        for (name, binding, vs, query, body) in cases {
            let p = plan(ORDER, name, &specs_of(name));
            let vs = vars(vs);
            let reference = p.request(*binding, &vs, *query, body.as_bytes()).unwrap();
            let bytes = p
                .request_bytes(*binding, &vs, *query, body.as_bytes())
                .unwrap();
            let decoded = DynamicMessage::decode(p.input().clone(), bytes.as_slice()).unwrap();
            assert_eq!(
                to_json(&decoded),
                to_json(&reference),
                "{name} {vs:?} {query:?} {body}"
            );
            assert_eq!(
                DynamicMessage::decode(p.input().clone(), reference.encode_to_vec().as_slice())
                    .unwrap(),
                decoded,
                "{name} {vs:?} {query:?} {body}"
            );
        }
        // A caller's mistake is the reference's diagnosis.
        let p = plan(ORDER, "CreateOrder", &specs_of("CreateOrder"));
        let e = p
            .request_bytes(Some(0), &[], None, br#"{"qty": "many"}"#)
            .unwrap_err();
        assert_eq!(e.kind, TranscodeErrorKind::BadRequest);
        assert!(e.message.contains("qty"), "{}", e.message);
    }

    #[test]
    fn overlapping_paths() {
        assert!(overlaps("shop", "shop.id"));
        assert!(overlaps("shop.id", "shop"));
        assert!(overlaps("shop.id", "shop.id"));
        assert!(!overlaps("shop", "shopping"));
        assert!(!overlaps("shop.id", "shop.name"));
    }
}
