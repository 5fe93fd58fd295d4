//! `config/crds/` is `pier::crds` written as YAML (the Gateway API CRDs at the top, the mesh
//! variant in `mesh/`, pier's own in `pier/`). This test fails when they differ;
//! `PIER_BLESS=1 cargo test --test crds` rewrites the files. Whether the real API server
//! accepts them is tested in `tests/apiserver.rs`.

use std::path::{Path, PathBuf};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;

fn crds_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("config/crds")
}

/// The files and what they should hold.
fn expected() -> Vec<(PathBuf, String)> {
    let dir = crds_dir();
    let mut files: Vec<(PathBuf, String)> = pier::crds::all()
        .iter()
        .map(|crd| (dir.join(format!("{}.yaml", plural(crd))), render(crd)))
        .collect();
    files.push((
        dir.join("mesh/gateway-with-mesh.yaml"),
        render(&pier::crds::gateway_with_mesh()),
    ));
    files.extend(pier::crds::own().iter().map(|crd| {
        (
            dir.join(format!("pier/{}.yaml", plural(crd))),
            render_own(crd),
        )
    }));
    files
}

fn plural(crd: &CustomResourceDefinition) -> &str {
    &crd.spec.names.plural
}

fn render(crd: &CustomResourceDefinition) -> String {
    format!(
        "# Generated from pier::crds (gateway-api crate types, Gateway API {} {} channel).\n\
         # Do not edit: change src/crds.rs and run `PIER_BLESS=1 cargo test --test crds`.\n{}",
        pier::crds::BUNDLE_VERSION,
        pier::crds::CHANNEL,
        serde_saphyr::to_string(crd).expect("a CRD serializes to YAML")
    )
}

/// pier's own CRDs (`pier.dev`) come from pier's types, not from a Gateway API release.
fn render_own(crd: &CustomResourceDefinition) -> String {
    format!(
        "# Generated from pier::crds::own() (pier's own API, {}/{}).\n\
         # Do not edit: change the types and run `PIER_BLESS=1 cargo test --test crds`.\n{}",
        crd.spec.group,
        crd.spec.versions[0].name,
        serde_saphyr::to_string(crd).expect("a CRD serializes to YAML")
    )
}

#[test]
fn config_crds_match_generated() {
    let bless = std::env::var_os("PIER_BLESS").is_some();
    let mut stale = vec![];
    for (path, want) in expected() {
        let have = std::fs::read_to_string(&path).unwrap_or_default();
        if have == want {
            continue;
        }
        if bless {
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, want).unwrap();
        } else {
            stale.push(path.display().to_string());
        }
    }
    assert!(
        stale.is_empty(),
        "stale CRD files (PIER_BLESS=1 cargo test --test crds to rewrite): {stale:?}"
    );
}

/// The YAML reads back as the same CRD (checked on the rendered text, so it does not race the
/// blessing test above).
#[test]
fn rendered_yaml_round_trips() {
    let crds = pier::crds::all()
        .into_iter()
        .chain([pier::crds::gateway_with_mesh()]);
    for crd in crds {
        let back: CustomResourceDefinition = serde_saphyr::from_str(&render(&crd))
            .unwrap_or_else(|e| panic!("{}: {e}", plural(&crd)));
        assert_eq!(back, crd);
    }
    for crd in pier::crds::own() {
        let back: CustomResourceDefinition = serde_saphyr::from_str(&render_own(&crd))
            .unwrap_or_else(|e| panic!("{}: {e}", plural(&crd)));
        assert_eq!(back, crd);
    }
}
