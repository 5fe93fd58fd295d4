//! Link options for optimised builds (the `release` and `dist` profiles): identical code
//! folding (`--icf=all`), which merges functions whose machine code is the same (generic code
//! instantiated for types of one layout, above all): 318 KB of the shipped binary
//! (BENCHMARKS.md "size of the shipped binary"). Only where rustc links with its own lld (x86_64 Linux,
//! GNU: the default since Rust 1.90); other linkers may not know the option. `--icf=safe`
//! folds nothing here (rustc emits no address-significance tables), and Rust gives function
//! addresses no identity to rely on. In profiles of such a binary, folded functions show
//! under one of their names.
fn main() {
    println!("cargo:rerun-if-changed=src/build.rs");
    let release = std::env::var("PROFILE").is_ok_and(|p| p == "release");
    let target = std::env::var("TARGET").unwrap_or_default();
    if release && target == "x86_64-unknown-linux-gnu" {
        println!("cargo:rustc-link-arg-bins=-Wl,--icf=all");
    }
}
