//! `google.api.http` path templates. (Being written.)

/// A parsed path template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathTemplate {
    pub raw: String,
}
