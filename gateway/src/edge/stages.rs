//! The seven edge stages of one snapshot, built together in request order (`pipeline.rs`
//! runs them). Apart from `mod.rs`, which holds what every stage is built and answers with
//! ([`Stage`], [`Carried`]), so that the stages' files use it and it does not use them.

use super::auth::AuthStage;
use super::cache::CacheStage;
use super::degrade::DegradeStage;
use super::ip_acl::IpAclStage;
use super::permit::PermitStage;
use super::rate_limit::RateLimitStage;
use super::route::RouteStage;
use super::{Carried, Stage};
use portico_control::Snapshot;

/// The seven edge stages, built from one snapshot.
pub struct Stages {
    pub ip_acl: IpAclStage,
    pub route: RouteStage,
    pub auth: AuthStage,
    pub permit: PermitStage,
    pub rate_limit: RateLimitStage,
    pub degrade: DegradeStage,
    pub cache: CacheStage,
}

impl Stages {
    /// Builds every stage from `snapshot` ([`Stage::build`]), in request order.
    pub fn build(snapshot: &Snapshot, carried: &Carried) -> Stages {
        Stages {
            ip_acl: IpAclStage::build(snapshot, carried),
            route: RouteStage::build(snapshot, carried),
            auth: AuthStage::build(snapshot, carried),
            permit: PermitStage::build(snapshot, carried),
            rate_limit: RateLimitStage::build(snapshot, carried),
            degrade: DegradeStage::build(snapshot, carried),
            cache: CacheStage::build(snapshot, carried),
        }
    }
}
