//! `bare-pingora-proxy` with the system allocator (glibc malloc): the allocator knob of
//! `portico-bench knobs`. Otherwise identical to the baseline (see `common.rs`).

#[path = "common.rs"]
mod common;

fn main() {
    common::main()
}
