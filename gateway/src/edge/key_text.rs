//! A selector key as text: the byte joining its values (what `keys.rs` hashes and the
//! hot-key detector reports) and how operators are shown it. Apart from `keys.rs`, which
//! reads requests, so that the detector's state (`hot_keys.rs`, kept in `cache_store.rs`)
//! does not depend on the stage contract.

/// The byte written between two selector values when a key is hashed (and joined).
pub const KEY_SEPARATOR: u8 = 0x1f;

/// The key as shown to operators (`/status`, the registry): `\x1f` shown as `|`.
pub fn display_key(key: &str) -> String {
    key.replace('\x1f', "|")
}
