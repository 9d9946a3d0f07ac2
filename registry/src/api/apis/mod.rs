//! APIs: drafts in the sandbox ([`drafts`]), imports that make drafts from a backend's
//! interface ([`imports`]), and the publishing workflow — publish → history → rollback — into
//! the live tree ([`published`]).

pub mod drafts;
pub mod imports;
pub mod paths;
pub mod published;

use crate::route::Route;

/// The routes: published APIs, drafts, imports.
pub fn routes() -> Vec<Route> {
    [published::routes(), drafts::routes(), imports::routes()].concat()
}
