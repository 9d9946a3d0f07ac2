//! `bare-pingora-proxy` with jemalloc (tikv-jemallocator): the allocator knob of
//! `portico-bench knobs`. Otherwise identical to the baseline (see `common.rs`).

#[path = "common.rs"]
mod common;

#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() {
    common::main()
}
