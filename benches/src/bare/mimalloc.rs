//! The baseline for Portico's benchmarks: a bare Pingora HTTP proxy with no stages, one
//! upstream, upstream keepalive, and the same allocator (mimalloc) and build settings as the
//! gateway. See `common.rs` for the flags.
//!
//! `bare-pingora-proxy --listen 127.0.0.1:PORT --upstream 127.0.0.1:PORT [--threads N]`

#[path = "common.rs"]
mod common;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    common::main()
}
