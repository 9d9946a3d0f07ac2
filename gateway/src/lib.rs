//! Portico's gateway: a Pingora edge (`edge/`), the invoke tier (`invoke/`), observation
//! (`observe/`), the one snapshot (`runtime`), the pipeline (`pipeline`) and its rescue point
//! (`proxy`).

pub mod admin;
pub mod config;
pub mod edge;
pub mod error;
pub mod invoke;
pub mod listener;
pub mod observe;
pub mod pipeline;
pub mod proxy;
pub mod request_id;
pub mod runtime;
