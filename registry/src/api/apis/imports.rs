//! Imports: make draft APIs from a backend's interface — `.proto` sources (compiled here), an
//! encoded FileDescriptorSet, or gRPC server reflection. The descriptor set is stored in the
//! sandbox (`sandbox/descriptors/<sha256>`) and one draft is written per RPC that has a
//! `google.api.http` rule (the proto work itself is [`crate::protos`]).

use super::paths::api_rel;
use crate::api::audit::audit;
use crate::api::context::Ctx;
use crate::api::reply::json_response;
use crate::error::{ApiError, ApiResult, Detail};
use crate::input::{body_error, check_name, flag, parse_json};
use crate::protos::{self, Analysis, ImportOptions, MethodRule};
use crate::route::{Body, Param, Reply, Route};
use crate::state::Shared;
use crate::zk_store::{Env, Precondition, Store};
use axum::body::Bytes;
use axum::extract::{FromRequest, Multipart, Query, Request, State};
use axum::http::{header, Method, StatusCode};
use axum::response::Response;
use axum::routing::post;
use base64::Engine as _;
use portico_control::v1;
use serde::Deserialize;
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap};

/// The routes of imports.
pub fn routes() -> Vec<Route> {
    vec![
        Route::new(Method::POST, "/protos", "imports", "Compile .proto sources (JSON {files} or multipart) and make one draft per RPC with a google.api.http rule", post(import_protos))
            .body(Body::JsonOrMultipart("ProtoImport"))
            .reply(Reply::Json(200, "ImportResult"))
            .query_as("dry_run", DRY_RUN_DOC, Param::Flag)
            .query_as("overwrite", OVERWRITE_DOC, Param::Flag),
        Route::new(Method::POST, "/descriptors", "imports", "Upload a FileDescriptorSet (JSON with base64, or application/octet-stream with options in the query) and make drafts", post(import_descriptor_set))
            .body(Body::JsonOrBinary("DescriptorImport"))
            .reply(Reply::Json(200, "ImportResult"))
            .query_as("cluster", "octet-stream uploads: the drafts' cluster", Param::Name)
            .query_as("auth", "octet-stream uploads: signature or none", Param::OneOf(&["signature", "none"]))
            .query_as("timeout_ms", "octet-stream uploads: the drafts' backend deadline", Param::Count)
            .query("services", "octet-stream uploads: comma-separated service names to import")
            .query_as("dry_run", DRY_RUN_DOC, Param::Flag)
            .query_as("overwrite", OVERWRITE_DOC, Param::Flag),
        Route::new(Method::POST, "/reflection", "imports", "Fetch a running backend's descriptors by gRPC server reflection and make drafts", post(import_reflection))
            .body(Body::Json("ReflectionImport"))
            .reply(Reply::Json(200, "ImportResult"))
            .query_as("dry_run", DRY_RUN_DOC, Param::Flag)
            .query_as("overwrite", OVERWRITE_DOC, Param::Flag)
            .calls_out(),
    ]
}

/// The `dry_run` flag's description.
const DRY_RUN_DOC: &str = "preview only: answer what the import would do (each draft new, changed \
     or unchanged, and the routes other APIs own) and write nothing";
/// The `overwrite` flag's description.
const OVERWRITE_DOC: &str = "replace drafts that exist and differ; without it such an import \
     answers 409 WOULD_OVERWRITE listing them";

/// How an import is confirmed (docs/operations/registry.md, "Draft → sandbox → publish → rollback"):
/// `dry_run` previews, and a draft that exists and would change is only replaced with
/// `overwrite`. Query flags, or fields of a JSON body.
#[derive(Debug, Clone, Copy, Default, Deserialize)]
struct Confirm {
    #[serde(default)]
    dry_run: bool,
    #[serde(default)]
    overwrite: bool,
}

impl Confirm {
    /// The flags of the query, or of the body (either sets one).
    fn of(query: &HashMap<String, String>, body: Confirm) -> Confirm {
        Confirm {
            dry_run: body.dry_run || flag(query, "dry_run"),
            overwrite: body.overwrite || flag(query, "overwrite"),
        }
    }
}

#[derive(Debug, Deserialize)]
struct ProtoImport {
    files: BTreeMap<String, String>,
    #[serde(flatten)]
    confirm: Confirm,
    #[serde(flatten)]
    options: ImportOptions,
}

#[derive(Debug, Deserialize)]
struct DescriptorImport {
    /// The encoded FileDescriptorSet, base64 (standard alphabet).
    descriptor_set: String,
    #[serde(flatten)]
    confirm: Confirm,
    #[serde(flatten)]
    options: ImportOptions,
}

#[derive(Debug, Deserialize)]
struct ReflectionImport {
    /// The backend's gRPC address, `host:port`.
    addr: String,
    #[serde(flatten)]
    confirm: Confirm,
    #[serde(flatten)]
    options: ImportOptions,
}

fn content_type(req: &Request) -> String {
    req.headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_ascii_lowercase()
}

/// Import options from text fields (multipart parts, or the query of an octet-stream upload).
fn options_from_fields(fields: &HashMap<String, String>) -> ApiResult<ImportOptions> {
    let mut options = ImportOptions {
        cluster: fields.get("cluster").cloned(),
        ..ImportOptions::default()
    };
    if let Some(auth) = fields.get("auth") {
        options.auth = Some(match auth.as_str() {
            "signature" => v1::AuthMode::Signature,
            "none" => v1::AuthMode::None,
            other => {
                return Err(ApiError::bad_request(format!(
                    "auth: {other:?} is not signature or none"
                )))
            }
        });
    }
    if let Some(t) = fields.get("timeout_ms") {
        options.timeout_ms =
            Some(t.parse().map_err(|_| {
                ApiError::bad_request(format!("timeout_ms: {t:?} is not a number"))
            })?);
    }
    if let Some(s) = fields.get("services") {
        options.services = Some(
            s.split(',')
                .map(|x| x.trim().to_owned())
                .filter(|x| !x.is_empty())
                .collect(),
        );
    }
    if let Some(ids) = fields.get("ids") {
        options.ids = serde_json::from_str(ids).map_err(|e| {
            ApiError::bad_request(format!("ids: not a JSON object of strings: {e}"))
        })?;
    }
    Ok(options)
}

/// The `.proto` files (import path → source) and the options of a multipart upload: each file
/// part is a source, named by its part name when that is an import path (`demo/order.proto`),
/// else by its file name; text parts are options.
async fn multipart_sources(req: Request) -> ApiResult<(BTreeMap<String, String>, ImportOptions)> {
    let mut multipart = Multipart::from_request(req, &())
        .await
        .map_err(|e| body_error("multipart", e.status(), e))?;
    let mut files = BTreeMap::new();
    let mut fields = HashMap::new();
    while let Some(field) = multipart
        .next_field()
        .await
        .map_err(|e| body_error("multipart", e.status(), e))?
    {
        let name = field.name().unwrap_or("").to_owned();
        let file_name = field.file_name().map(str::to_owned);
        let text = field
            .text()
            .await
            .map_err(|e| body_error(&format!("multipart part {name:?}"), e.status(), e))?;
        match file_name {
            Some(f) if f.ends_with(".proto") => {
                let path = if name.ends_with(".proto") { name } else { f };
                files.insert(path, text);
            }
            _ if name.ends_with(".proto") => {
                files.insert(name, text);
            }
            _ => {
                fields.insert(name, text);
            }
        }
    }
    Ok((files, options_from_fields(&fields)?))
}

async fn import_protos(
    State(state): State<Shared>,
    Query(query): Query<HashMap<String, String>>,
    ctx: Ctx,
    req: Request,
) -> ApiResult<Response> {
    let (files, options, confirm) = if content_type(&req).starts_with("multipart/form-data") {
        let (files, options) = multipart_sources(req).await?;
        (files, options, Confirm::default())
    } else {
        let body = Bytes::from_request(req, &())
            .await
            .map_err(|e| body_error("body", e.status(), e))?;
        let (import, _) = parse_json::<ProtoImport>(&body, "proto import")?;
        (import.files, import.options, import.confirm)
    };
    let confirm = Confirm::of(&query, confirm);
    let bytes = protos::compile_sources(&files)?;
    let analysis = protos::analyze(&bytes, options.services.as_deref())?;
    let source = json!({"kind": "protos", "files": files.keys().collect::<Vec<_>>()});
    make_drafts(&state, &ctx, analysis, options, source, confirm).await
}

async fn import_descriptor_set(
    State(state): State<Shared>,
    Query(query): Query<HashMap<String, String>>,
    ctx: Ctx,
    req: Request,
) -> ApiResult<Response> {
    let json_body = content_type(&req).starts_with("application/json");
    let body = Bytes::from_request(req, &())
        .await
        .map_err(|e| body_error("body", e.status(), e))?;
    let (bytes, options, confirm) = if json_body {
        let (import, _) = parse_json::<DescriptorImport>(&body, "descriptor import")?;
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(import.descriptor_set.trim())
            .map_err(|e| ApiError::bad_request(format!("descriptor_set: not base64: {e}")))?;
        (bytes, import.options, import.confirm)
    } else {
        (
            body.to_vec(),
            options_from_fields(&query)?,
            Confirm::default(),
        )
    };
    let confirm = Confirm::of(&query, confirm);
    if bytes.is_empty() {
        return Err(ApiError::bad_request("the FileDescriptorSet is empty"));
    }
    let analysis = protos::analyze(&bytes, options.services.as_deref())?;
    let source = json!({"kind": "descriptor_set"});
    make_drafts(&state, &ctx, analysis, options, source, confirm).await
}

async fn import_reflection(
    State(state): State<Shared>,
    Query(query): Query<HashMap<String, String>>,
    ctx: Ctx,
    body: Bytes,
) -> ApiResult<Response> {
    let (import, _) = parse_json::<ReflectionImport>(&body, "reflection import")?;
    let confirm = Confirm::of(&query, import.confirm);
    let services = import.options.services.as_deref();
    let bytes = protos::fetch_by_reflection(&import.addr, services).await?;
    let analysis = protos::analyze(&bytes, services)?;
    let source = json!({"kind": "reflection", "addr": import.addr});
    make_drafts(&state, &ctx, analysis, import.options, source, confirm).await
}

/// Stores the descriptor in the sandbox and writes one draft per RPC with an HTTP rule;
/// answers the drafts, the RPCs skipped, and the problems the drafts have in the sandbox as it
/// is (a missing sandbox cluster, say). First previews ([`preview`]): with `dry_run` it
/// answers the preview and writes nothing; a draft that exists and would change is replaced
/// only with `overwrite` (else 409 `WOULD_OVERWRITE` listing every such draft).
async fn make_drafts(
    state: &Shared,
    ctx: &Ctx,
    analysis: Analysis,
    options: ImportOptions,
    source: Value,
    confirm: Confirm,
) -> ApiResult<Response> {
    let cluster = options
        .cluster
        .clone()
        .ok_or_else(|| ApiError::bad_request("cluster: required (the cluster the drafts call)"))?;
    check_name("cluster", &cluster)?;
    let planned = plan_ids(&analysis, &options)?;
    let store = &state.store;
    let target = DraftTarget {
        sha256: &analysis.sha256,
        cluster: &cluster,
        options: &options,
    };
    let previewed = preview(store, &planned, &target, &analysis).await?;
    if confirm.dry_run {
        let body = json!({
            "dry_run": true,
            "descriptor": analysis.sha256,
            "descriptor_bytes": analysis.bytes.len(),
            "services": analysis.services,
            "drafts": previewed.drafts,
            "skipped": analysis.skipped,
            "problems": previewed.problems,
        });
        return Ok(json_response(StatusCode::OK, &body, None));
    }
    refuse_overwrite(&previewed.drafts, confirm.overwrite)?;
    let drel = Env::Sandbox.path(&format!("descriptors/{}", analysis.sha256));
    store_descriptor(store, &drel, &analysis.bytes).await?;
    let mut drafts = Vec::new();
    for (id, rule) in planned {
        let mut written = write_draft(store, &id, rule, &target).await?;
        if let Some(p) = previewed.drafts.iter().find(|p| p["id"] == id.as_str()) {
            written["state"] = p["state"].clone();
            written["conflicts"] = p["conflicts"].clone();
        }
        drafts.push(written);
    }
    let problems = sandbox_problems(store, &drafts).await?;
    let ids: Vec<Value> = drafts.iter().map(|d| d["id"].clone()).collect();
    let detail = json!({"source": source, "drafts": ids});
    audit(state, ctx, &ctx.actor(None), "api.import", &drel, detail).await;
    let body = json!({
        "descriptor": analysis.sha256,
        "descriptor_bytes": analysis.bytes.len(),
        "services": analysis.services,
        "drafts": drafts,
        "skipped": analysis.skipped,
        "problems": problems,
    });
    Ok(json_response(StatusCode::OK, &body, None))
}

/// The API id of each RPC; 400 for an id that is not a valid name or that two RPCs would share.
fn plan_ids<'a>(
    analysis: &'a Analysis,
    options: &ImportOptions,
) -> ApiResult<Vec<(String, &'a MethodRule)>> {
    let mut planned: Vec<(String, &MethodRule)> = Vec::new();
    for rule in &analysis.methods {
        let id = protos::id_for(rule, options);
        check_name("api id", &id)?;
        if planned.iter().any(|(other, _)| *other == id) {
            return Err(ApiError::bad_request(format!(
                "two RPCs would get the API id {id:?}: name them with `ids`"
            )));
        }
        planned.push((id, rule));
    }
    Ok(planned)
}

/// Stores a descriptor set unless it is there (a concurrent import storing it too is fine: the
/// name is the content's hash).
async fn store_descriptor(store: &Store, drel: &str, bytes: &[u8]) -> ApiResult<()> {
    if store.stat(drel).await?.is_some() {
        return Ok(());
    }
    match store.put(drel, bytes, Precondition::Absent).await {
        Ok(_) => Ok(()),
        Err(e) if e.code == "CONFLICT" => Ok(()),
        Err(e) => Err(e),
    }
}

/// What every draft of one import calls.
struct DraftTarget<'a> {
    sha256: &'a str,
    cluster: &'a str,
    options: &'a ImportOptions,
}

/// Writes (creates, or updates over the version read) the draft of one RPC; answers its entry
/// of the import result.
async fn write_draft(
    store: &Store,
    id: &str,
    rule: &MethodRule,
    target: &DraftTarget<'_>,
) -> ApiResult<Value> {
    let rel = Env::Sandbox.path(&api_rel(id));
    let existing = store.get(&rel).await?;
    let existing_def = existing
        .as_ref()
        .and_then(|d| serde_json::from_slice::<v1::ApiDefinition>(&d.data).ok());
    let def = protos::draft_for(
        id,
        rule,
        target.sha256,
        target.cluster,
        target.options,
        existing_def.as_ref(),
    );
    let data = serde_json::to_vec(&def).map_err(|e| ApiError::internal(e.to_string()))?;
    let pre = match &existing {
        Some(d) => Precondition::Version(d.stat.version),
        None => Precondition::Absent,
    };
    let written = store.put(&rel, &data, pre).await?;
    Ok(json!({
        "id": id,
        "rpc": format!("{}/{}", rule.service, rule.method),
        "created": written.created,
        "etag": written.stat.version.to_string(),
        "http": def.http,
    }))
}

/// How the drafts fare in the sandbox as it is now: the rejections of those drafts.
async fn sandbox_problems(store: &Store, drafts: &[Value]) -> ApiResult<Vec<Value>> {
    let tree = store.tree(Env::Sandbox).await?;
    let snapshot = portico_control::build_snapshot(&tree, None);
    let is_draft = |path: &str| {
        drafts
            .iter()
            .any(|d| d["id"].as_str().is_some_and(|id| path == api_rel(id)))
    };
    Ok(snapshot
        .rejected
        .iter()
        .filter(|r| is_draft(&r.path))
        .map(|r| json!({"path": Env::Sandbox.path(&r.path), "reason": r.reason}))
        .collect())
}

/// What an import would do, before it writes: each draft with its `state` (`new`, `changed`:
/// it exists and differs, `unchanged`) and its `conflicts` (routes another API owns), and the
/// problems the sandbox would have with the drafts.
struct Preview {
    drafts: Vec<Value>,
    problems: Vec<Value>,
}

/// Builds each draft as the import would write it, and the sandbox and live trees as they
/// would be with the drafts (and the descriptor) in them, with the gateways' own validation
/// (`build_snapshot`): a route another API binds is a conflict naming that API (in the
/// sandbox: the sandbox refuses one of the two; live: publishing would be refused).
async fn preview(
    store: &Store,
    planned: &[(String, &MethodRule)],
    target: &DraftTarget<'_>,
    analysis: &Analysis,
) -> ApiResult<Preview> {
    let mut sandbox = store.tree(Env::Sandbox).await?;
    let mut live = store.tree(Env::Live).await?;
    let drel = format!("descriptors/{}", target.sha256);
    let mut drafts = Vec::new();
    for (id, rule) in planned {
        let rel = api_rel(id);
        let existing = sandbox.docs.get(&rel).cloned();
        let existing_def = existing
            .as_deref()
            .and_then(|d| serde_json::from_slice::<v1::ApiDefinition>(d).ok());
        let def = protos::draft_for(
            id,
            rule,
            target.sha256,
            target.cluster,
            target.options,
            existing_def.as_ref(),
        );
        let data = serde_json::to_vec(&def).map_err(|e| ApiError::internal(e.to_string()))?;
        let state = match &existing {
            None => "new",
            Some(old) if same_document(old, &data) => "unchanged",
            Some(_) => "changed",
        };
        sandbox.docs.insert(rel.clone(), data.clone());
        live.docs.insert(rel, data);
        drafts.push(json!({
            "id": id,
            "rpc": format!("{}/{}", rule.service, rule.method),
            "state": state,
            "created": state == "new",
            "http": def.http,
            "conflicts": [],
        }));
    }
    for tree in [&mut sandbox, &mut live] {
        tree.docs
            .entry(drel.clone())
            .or_insert_with(|| analysis.bytes.clone());
    }
    let ids: Vec<&str> = planned.iter().map(|(id, _)| id.as_str()).collect();
    let sandbox_snap = portico_control::build_snapshot(&sandbox, None);
    let live_snap = portico_control::build_snapshot(&live, None);
    for (env, snap) in [(Env::Sandbox, &sandbox_snap), (Env::Live, &live_snap)] {
        for r in &snap.rejected {
            let Some((mine, conflict)) = route_conflict(&r.path, &r.reason, &ids) else {
                continue;
            };
            if let Some(d) = drafts.iter_mut().find(|d| d["id"] == mine.as_str()) {
                let mut c = conflict;
                c["env"] = json!(env.name());
                if let Some(list) = d["conflicts"].as_array_mut() {
                    list.push(c);
                }
            }
        }
    }
    let problems = sandbox_snap
        .rejected
        .iter()
        .filter(|r| ids.iter().any(|id| r.path == api_rel(id)))
        .map(|r| json!({"path": Env::Sandbox.path(&r.path), "reason": r.reason}))
        .collect();
    Ok(Preview { drafts, problems })
}

/// Two stored API documents are the same but for formatting.
fn same_document(a: &[u8], b: &[u8]) -> bool {
    match (
        serde_json::from_slice::<Value>(a),
        serde_json::from_slice::<Value>(b),
    ) {
        (Ok(x), Ok(y)) => x == y,
        _ => a == b,
    }
}

/// A rejection that is a route bound twice, between a draft of this import (`ids`) and
/// another API: `(the draft's id, {api, route})`. The gateways keep the first API (in path
/// order) on a route and refuse the other, so the refused one may be either.
fn route_conflict(path: &str, reason: &str, ids: &[&str]) -> Option<(String, Value)> {
    const BOUND: &str = " is already bound by API ";
    let rejected = path.strip_prefix("apis/")?;
    let at = reason.find(BOUND)?;
    let route = reason[..at]
        .split_once(": ")
        .map_or(&reason[..at], |(_, r)| r)
        .to_owned();
    let rest = &reason[at + BOUND.len()..];
    let owner = rest.split_once(" (").map_or(rest, |(o, _)| o);
    if ids.contains(&rejected) && !ids.contains(&owner) {
        Some((rejected.to_owned(), json!({"api": owner, "route": route})))
    } else if ids.contains(&owner) && !ids.contains(&rejected) {
        Some((owner.to_owned(), json!({"api": rejected, "route": route})))
    } else {
        None
    }
}

/// 409 `WOULD_OVERWRITE` listing every draft that exists and would change, unless
/// `overwrite` confirms it.
fn refuse_overwrite(drafts: &[Value], overwrite: bool) -> ApiResult<()> {
    let changed: Vec<Detail> = drafts
        .iter()
        .filter(|d| d["state"] == "changed")
        .map(|d| Detail {
            path: Some(Env::Sandbox.path(&api_rel(d["id"].as_str().unwrap_or_default()))),
            field: None,
            reason: format!(
                "the draft exists and the import would replace it (from {})",
                d["rpc"].as_str().unwrap_or_default()
            ),
        })
        .collect();
    if overwrite || changed.is_empty() {
        return Ok(());
    }
    let names: Vec<&str> = drafts
        .iter()
        .filter(|d| d["state"] == "changed")
        .filter_map(|d| d["id"].as_str())
        .collect();
    Err(ApiError::new(
        StatusCode::CONFLICT,
        "WOULD_OVERWRITE",
        format!(
            "the import would overwrite {} existing draft(s): {}; preview with dry_run, then \
             confirm with overwrite",
            names.len(),
            names.join(", ")
        ),
    )
    .with_details(changed))
}

#[cfg(test)]
mod preview_tests {
    use super::*;

    #[test]
    fn route_conflicts_name_the_other_api_whichever_the_gateways_refuse() {
        let ids = ["orderservice.createorder"];
        let reason =
            "http.path: POST /v1/orders is already bound by API order.create (POST /v1/orders)";
        let (mine, c) =
            route_conflict("apis/orderservice.createorder", reason, &ids).expect("a conflict");
        assert_eq!(mine, "orderservice.createorder");
        assert_eq!(
            c,
            json!({"api": "order.create", "route": "POST /v1/orders"})
        );
        let reason = "http.path: POST /v1/orders is already bound by API orderservice.createorder (POST /v1/orders)";
        let (mine, c) = route_conflict("apis/order.create", reason, &ids).expect("a conflict");
        assert_eq!(mine, "orderservice.createorder");
        assert_eq!(c["api"], "order.create");
        assert!(route_conflict("apis/x", "backend.cluster: no cluster", &ids).is_none());
    }

    #[test]
    fn changed_drafts_need_overwrite_and_are_all_listed() {
        let drafts = [
            json!({"id": "a", "state": "changed", "rpc": "s/A"}),
            json!({"id": "b", "state": "new", "rpc": "s/B"}),
            json!({"id": "c", "state": "changed", "rpc": "s/C"}),
            json!({"id": "d", "state": "unchanged", "rpc": "s/D"}),
        ];
        let e = refuse_overwrite(&drafts, false).unwrap_err();
        assert_eq!(e.status, StatusCode::CONFLICT);
        assert_eq!(e.code, "WOULD_OVERWRITE");
        assert_eq!(e.details.len(), 2);
        assert!(e.message.contains("a, c"), "{}", e.message);
        refuse_overwrite(&drafts, true).unwrap();
        refuse_overwrite(&drafts[1..2], false).unwrap();
        assert!(same_document(br#"{"a":1, "b":2}"#, br#"{"b":2,"a":1}"#));
    }
}
