//! Portico's gateway: a Pingora edge (`edge/`), the invoke tier (`invoke/`), observation
//! (`observe/`), the one snapshot (`runtime`), the pipeline (`pipeline`) and its rescue point
//! (`proxy`), the reload loop (`reload`), the admin listener (`admin`) and the TLS
//! certificate of the traffic listeners (`tls`).
//!
//! Modules only import modules below them (docs/ARCHITECTURE.md, "Gateway layers"):
//! `listener → proxy → pipeline → runtime → edge | invoke | notify → model, fleet → observe, error,
//! request_id, tls`, with `admin` and `reload` beside `listener`, over `runtime`. `fleet`
//! is what the node knows of the other gateways (membership, Redis).

pub mod admin;
pub mod deadline;
pub mod edge;
pub mod error;
pub mod fleet;
pub mod invoke;
pub mod listener;
pub mod model;
pub mod notify;
pub mod observe;
pub mod pipeline;
pub mod proxy;
pub mod reload;
pub mod request_id;
pub mod runtime;
pub mod tls;

#[cfg(test)]
mod testing;
