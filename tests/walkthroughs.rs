//! The manual's walkthroughs run as written: `scripts/walkthroughs.sh` runs the ```sh blocks
//! of each chapter (getting started, manifests, mesh, the edge chapters and tracing, restarts), in
//! SUMMARY.md order, each chapter in one fresh bash from the top of a copy of the checkout,
//! with this build's `pier` on PATH, compares each block's output with the ```text block after
//! it, and checks that the chapter stopped every process it started and left no port bound.
//! The chapters it does not run are listed there with the reason (and the test that covers
//! them).
//!
//! The walkthroughs use fixed ports (8080, 9901, 18081, ...), so the script runs them in a
//! network namespace of its own: as root (`scripts/test`, CI) or in a user namespace. Where it
//! can create neither, it fails saying so, unless `PIER_WALKTHROUGHS_NETNS=host` asks to run in
//! this one (its ports must be free then); nothing is skipped. Needs curl, jq, openssl and
//! haproxy (`scripts/test` installs them) and the OpenTelemetry Collector that
//! `scripts/otelcol.sh build` makes (as tests/tracing.rs does) and the authorizer that
//! `scripts/extauthz.sh build` makes (as tests/ext_auth.rs does) and the OpenID Provider that
//! `scripts/oidc-provider.sh build` makes (as tests/oidc.rs does). About 20-40 s on two cores.

use std::path::Path;
use std::process::Command;
use std::time::Instant;

#[test]
fn the_manuals_walkthroughs_run_as_written_and_clean_up() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let started = Instant::now();
    let out = Command::new("bash")
        .arg(repo.join("scripts/walkthroughs.sh"))
        .arg("--pier")
        .arg(env!("CARGO_BIN_EXE_pier"))
        .current_dir(repo)
        .output()
        .expect("run bash scripts/walkthroughs.sh");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "scripts/walkthroughs.sh failed ({}) after {:.0?}: a walkthrough of the manual does not \
         run as written; the chapter, the block (docs/src/FILE:LINE), the command and its \
         output are below. Rerun one chapter with `scripts/walkthroughs.sh --pier \
         target/debug/pier CHAPTER.md`.\n{stdout}{stderr}",
        out.status,
        started.elapsed(),
    );
    // Each chapter says ok; print the run (with --nocapture) for the record.
    eprintln!("{stderr}");
    for chapter in [
        "getting-started.md",
        "manifests.md",
        "mesh.md",
        "edge/ext-auth.md",
        "edge/oidc.md",
        "edge/rate-limits.md",
        "edge/compression.md",
        "edge/fault-injection.md",
        "edge/timeouts.md",
        "edge/load-balancing.md",
        "edge/health-checks.md",
        "edge/proxy-protocol.md",
        "edge/frontend-mtls.md",
        "edge/example.md",
        "edge/trusted-proxies.md",
        "edge/tracing.md",
        "operations/restarts.md",
    ] {
        assert!(
            stderr.contains(&format!("walkthroughs: {chapter}: ok")),
            "{chapter} did not run:\n{stderr}"
        );
    }
}
