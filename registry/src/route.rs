//! The description of a route of `/api/v1`: where it is, what it does, what it takes and
//! answers, and its handler. [`crate::api`] lists every route once; both the router
//! ([`crate::server`]) and the OpenAPI document ([`crate::openapi`]) are built from that one
//! list, so they cannot drift apart.
//!
//! Resources that exist in the live tree and in the sandbox (clusters, switches, the IP ACL,
//! descriptors, apps) are described once, env-neutral, and turned into both variants by
//! [`in_each_env`]: the sandbox variant is the same route under `/sandbox`, and the handler
//! learns its env from an `Extension<Env>` added to each variant.

use crate::state::Shared;
use crate::zk_store::Env;
use axum::http::Method;
use axum::routing::MethodRouter;
use axum::Extension;

/// What a request body is, for the OpenAPI document.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Body {
    /// No body.
    None,
    /// JSON of the named component schema.
    Json(&'static str),
    /// JSON of the named schema, or `multipart/form-data` (proto uploads).
    JsonOrMultipart(&'static str),
    /// JSON of the named schema, or `application/octet-stream` (descriptor sets).
    JsonOrBinary(&'static str),
}

/// What a successful response is, for the OpenAPI document.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reply {
    /// JSON of the named component schema, with this status.
    Json(u16, &'static str),
    /// `application/octet-stream`.
    Binary,
    /// 200 with JSON of the named component schema, or `text/html` (`?format=html`).
    JsonOrHtml(&'static str),
    /// 204 No Content.
    Empty,
}

/// What a query parameter takes, for the OpenAPI document (the handler checks it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Param {
    /// Free text.
    Text,
    /// A document name (1-128 of `[A-Za-z0-9._-]`, [`crate::input::check_name`]).
    Name,
    /// A flag: empty, `true` or `1` turn it on ([`crate::input::flag`]).
    Flag,
    /// A whole number of at least 0 (handlers clamp it into their range).
    Count,
    /// One of these words.
    OneOf(&'static [&'static str]),
}

/// One query parameter of a route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueryParam {
    /// Its name.
    pub name: &'static str,
    /// What it does, for the OpenAPI document.
    pub description: &'static str,
    /// What it takes.
    pub param: Param,
}

/// One route: where, what it does, and its handler.
#[derive(Clone)]
pub struct Route {
    /// The HTTP method.
    pub method: Method,
    /// Path under `/api/v1`, axum/OpenAPI syntax (`/apis/{id}`).
    pub path: String,
    /// One line for the OpenAPI document. In an env-neutral description (see
    /// [`in_each_env`]), `{env}` stands for `live` or `sandbox`.
    pub summary: String,
    /// The OpenAPI tag (the console's and the document's grouping).
    pub tag: &'static str,
    /// The request body.
    pub body: Body,
    /// The successful response.
    pub reply: Reply,
    /// Query parameters.
    pub query: Vec<QueryParam>,
    /// Reachable without the admin token.
    pub public: bool,
    /// Whether the route takes `If-Match` / `If-None-Match`.
    pub conditional: bool,
    /// For a `POST` that creates a resource: where the new resource's id is, as an OpenAPI
    /// runtime expression (`$response.body#/id`). The OpenAPI document then links this route
    /// to the routes under `path/{param}` ([`Route::creates`]).
    pub created_id: Option<&'static str>,
    /// Whether the route calls out, to a gateway or a backend (502 `UPSTREAM_ERROR` when that
    /// call fails).
    pub calls_out: bool,
    /// The handler, for this route's method.
    pub handler: MethodRouter<Shared>,
}

impl Route {
    /// A route answering `Reply::Json(200, "Any")`, without body, query or preconditions.
    pub fn new(
        method: Method,
        path: impl Into<String>,
        tag: &'static str,
        summary: impl Into<String>,
        handler: MethodRouter<Shared>,
    ) -> Route {
        Route {
            method,
            path: path.into(),
            summary: summary.into(),
            tag,
            body: Body::None,
            reply: Reply::Json(200, "Any"),
            query: Vec::new(),
            public: false,
            conditional: false,
            created_id: None,
            calls_out: false,
            handler,
        }
    }

    /// Sets the request body.
    pub fn body(mut self, body: Body) -> Route {
        self.body = body;
        self
    }

    /// Sets the successful response.
    pub fn reply(mut self, reply: Reply) -> Route {
        self.reply = reply;
        self
    }

    /// Adds a query parameter of free text.
    pub fn query(self, name: &'static str, description: &'static str) -> Route {
        self.query_as(name, description, Param::Text)
    }

    /// Adds a query parameter that takes `param`.
    pub fn query_as(
        mut self,
        name: &'static str,
        description: &'static str,
        param: Param,
    ) -> Route {
        self.query.push(QueryParam {
            name,
            description,
            param,
        });
        self
    }

    /// Marks the route as calling out (a gateway, or a backend for gRPC reflection): it answers
    /// 502 `UPSTREAM_ERROR` when what it calls cannot be reached or read.
    pub fn calls_out(mut self) -> Route {
        self.calls_out = true;
        self
    }

    /// Says where the id of the resource this route creates is (an OpenAPI runtime expression,
    /// e.g. `$response.body#/id` or `$request.body#/name`): the OpenAPI document links the
    /// route to the routes under `path/{param}` with it (for clients and for stateful testing).
    pub fn creates(mut self, id: &'static str) -> Route {
        self.created_id = Some(id);
        self
    }

    /// Makes the route reachable without the admin token.
    pub fn public(mut self) -> Route {
        self.public = true;
        self
    }

    /// Marks the route as taking `If-Match` / `If-None-Match`.
    pub fn conditional(mut self) -> Route {
        self.conditional = true;
        self
    }

    /// This env-neutral route in `env`: under `/sandbox` for the sandbox (tagged `sandbox`),
    /// `{env}` of the summary replaced by the env's name, and the handler given
    /// `Extension(env)`.
    pub fn in_env(&self, env: Env) -> Route {
        let (path, tag) = match env {
            Env::Live => (self.path.clone(), self.tag),
            Env::Sandbox => (format!("/sandbox{}", self.path), "sandbox"),
        };
        Route {
            path,
            tag,
            summary: self.summary.replace("{env}", env.name()),
            handler: self.handler.clone().layer(Extension(env)),
            ..self.clone()
        }
    }
}

/// The live variants of env-neutral `routes`, then their sandbox variants.
pub fn in_each_env(routes: &[Route]) -> Vec<Route> {
    [Env::Live, Env::Sandbox]
        .into_iter()
        .flat_map(|env| routes.iter().map(move |r| r.in_env(env)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::routing::get;

    #[test]
    fn env_variants_differ_only_in_place_tag_and_summary() {
        let neutral = [
            Route::new(
                Method::GET,
                "/clusters",
                "clusters",
                "List clusters ({env})",
                get(|| async {}),
            )
            .query_as("force", "x", Param::Flag)
            .conditional(),
            Route::new(Method::GET, "/ipacl", "ipacl", "IP ACL", get(|| async {})),
        ];
        let all = in_each_env(&neutral);
        let shape: Vec<(String, &str, String)> = all
            .iter()
            .map(|r| (r.path.clone(), r.tag, r.summary.clone()))
            .collect();
        assert_eq!(
            shape,
            [
                (
                    "/clusters".into(),
                    "clusters",
                    "List clusters (live)".into()
                ),
                ("/ipacl".into(), "ipacl", "IP ACL".into()),
                (
                    "/sandbox/clusters".into(),
                    "sandbox",
                    "List clusters (sandbox)".into()
                ),
                ("/sandbox/ipacl".into(), "sandbox", "IP ACL".into()),
            ]
        );
        assert!(all[2].conditional);
        assert_eq!(
            all[2].query,
            [QueryParam {
                name: "force",
                description: "x",
                param: Param::Flag
            }]
        );
    }
}
