use super::*;

fn report() -> Report {
    let mut r = Report::default();
    r.ok(Category::KubernetesApi, "api-server", "up");
    r.warn(Category::Rbac, "rbac/none-more", "too much", "bind less");
    r.fail(
        Category::PodNetwork,
        "reach/a/b/1.2.3.4:80",
        "refused",
        "route it",
    );
    r.skip(&[Category::Mesh], "no gateway");
    r
}

#[test]
fn text_marks_each_line_and_prints_hints_only_for_problems() {
    let text = report().text(false);
    assert_eq!(
        text,
        "kubernetes-api\n--------------\n✔ api-server: up\n\n\
         rbac\n----\n‼ rbac/none-more: too much\n    fix: bind less\n\n\
         pod-network\n-----------\n✖ reach/a/b/1.2.3.4:80: refused\n    fix: route it\n\n\
         mesh\n----\n· mesh: skipped: no gateway\n\n\
         ✖ 1 check(s) failed, 1 warning(s)\n"
    );
    assert!(!text.contains('\x1b'));
    assert!(report().text(true).contains("\x1b[31m✖\x1b[0m"));
}

#[test]
fn json_has_a_stable_schema() {
    let v: serde_json::Value = serde_json::from_str(&report().json()).unwrap();
    assert_eq!(v["schema"], JSON_SCHEMA);
    assert_eq!(v["passed"], false);
    assert_eq!(
        v["summary"],
        serde_json::json!({"ok": 1, "warn": 1, "fail": 1, "skipped": 1})
    );
    assert_eq!(
        v["checks"][0],
        serde_json::json!({
            "category": "kubernetes-api", "name": "api-server", "status": "ok",
            "message": "up", "hint": null,
        })
    );
    assert_eq!(v["checks"][2]["status"], "fail");
    assert_eq!(v["checks"][2]["hint"], "route it");
    assert_eq!(v["checks"][3]["status"], "skipped");
}

#[test]
fn warnings_and_skips_alone_pass() {
    let mut r = Report::default();
    r.warn(Category::Rbac, "x", "y", "z");
    assert!(r.passed());
    r.fail(Category::Rbac, "x", "y", "z");
    assert!(!r.passed());
}

#[test]
fn colour_only_on_a_terminal_without_no_color() {
    assert!(use_colour(true, None));
    assert!(use_colour(true, Some("".into())));
    assert!(!use_colour(true, Some("1".into())));
    assert!(!use_colour(false, None));
}

#[test]
fn bundle_versions_compare_numerically() {
    assert_eq!(parse_bundle_version("v1.5.1"), Some((1, 5, 1)));
    assert_eq!(parse_bundle_version("v1.10.0-rc.1"), Some((1, 10, 0)));
    assert_eq!(parse_bundle_version("1.5.1"), None);
    assert!(parse_bundle_version("v1.4.0") < parse_bundle_version("v1.5.1"));
    assert!(parse_bundle_version("v1.10.0") > parse_bundle_version("v1.5.1"));
}

#[test]
fn every_gateway_api_kind_pier_watches_has_a_crd_in_pier_crds() {
    let watched: std::collections::BTreeSet<String> = WatchKind::ALL
        .into_iter()
        .map(WatchKind::resource)
        .filter(|(g, _)| {
            [
                GATEWAY_GROUP,
                crate::translate::api::X_GATEWAY_GROUP,
                crate::translate::spiffe::PIER_GROUP,
            ]
            .contains(g)
        })
        .map(|(g, p)| format!("{p}.{g}"))
        .collect();
    let embedded: std::collections::BTreeSet<String> = crate::crds::bundle(false)
        .into_iter()
        .filter_map(|c| c.metadata.name)
        .collect();
    assert_eq!(watched, embedded);
}
