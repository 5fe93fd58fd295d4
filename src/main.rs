//! The `pier` binary: the allocator, and `pier::start::main`, which does the rest (the library
//! holds it so that a build compiles it once).
#![forbid(unsafe_code)]

#[cfg(feature = "jemalloc")]
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> std::process::ExitCode {
    pier::start::main()
}
