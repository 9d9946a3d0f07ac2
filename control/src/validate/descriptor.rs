//! `descriptors/<sha256>`: a binary FileDescriptorSet named by the SHA-256 of its bytes
//! (docs/operations/config-tree.md, "The configuration tree"); gRPC-backed APIs name it.

use prost_reflect::DescriptorPool;
use sha2::{Digest, Sha256};

pub(super) fn check_descriptor(name: &str, raw: &[u8]) -> Result<DescriptorPool, String> {
    if name.len() != 64 || !name.bytes().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f')) {
        return Err(
            "name: must be the 64 lower-case hex digits of the SHA-256 of its bytes".to_owned(),
        );
    }
    let sha = hex::encode(Sha256::digest(raw));
    if sha != name {
        return Err(format!("bytes: their SHA-256 is {sha}, not the name"));
    }
    DescriptorPool::decode(raw).map_err(|e| format!("bytes: not a FileDescriptorSet: {e}"))
}
