//! Where an API's documents are in the tree: `apis/<id>` (in the live tree when published, in
//! the sandbox as a draft) and its published versions, `history/<id>/<version>` (live tree).

/// The tree path of an API, relative to its env.
pub fn api_rel(id: &str) -> String {
    format!("apis/{id}")
}

/// The folder of an API's published versions.
pub fn history_dir(id: &str) -> String {
    format!("history/{id}")
}

/// One published version of an API.
pub fn history_rel(id: &str, version: u64) -> String {
    format!("history/{id}/{version}")
}
