//! Reading manifests: splitting, kinds, versions, defaults, errors with positions.

use super::*;

fn parse(text: &str) -> (Resources, Result<Vec<SkippedKind>, ManifestError>) {
    let mut r = Resources::default();
    let out = parse_manifests(text, &mut r);
    (r, out)
}

#[test]
fn documents_split_on_exact_separator_lines_only() {
    let text = "---\napiVersion: v1\nkind: Namespace\nmetadata: {name: a}\n---\n\
                apiVersion: v1\nkind: Namespace\nmetadata:\n  name: b\n  annotations: {x: \"---\"}\n";
    let (r, out) = parse(text);
    assert!(out.unwrap().is_empty());
    assert_eq!(r.namespaces.keys().collect::<Vec<_>>(), vec!["a", "b"]);
}

#[test]
fn comment_only_and_empty_documents_are_ignored() {
    let (r, out) = parse(
        "# header\n---\n\n---\napiVersion: v1\nkind: Namespace\nmetadata: {name: a}\n---\n# trailing\n",
    );
    assert!(out.is_ok());
    assert_eq!(r.namespaces.len(), 1);
}

#[test]
fn unknown_kinds_are_skipped_not_errors() {
    let (_, out) = parse(
        "apiVersion: v1\nkind: Namespace\nmetadata: {name: a}\n---\napiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d}\n",
    );
    let skipped = out.unwrap();
    assert_eq!(
        skipped,
        vec![SkippedKind {
            document: 2,
            line: 5,
            api_version: "apps/v1".into(),
            kind: "Deployment".into()
        }]
    );
    assert_eq!(skipped[0].to_string(), "apps/v1/Deployment");
}

#[test]
fn reference_grant_is_read_in_v1beta1_and_v1() {
    let grant = |v: &str, name: &str| {
        format!(
            "apiVersion: gateway.networking.k8s.io/{v}\nkind: ReferenceGrant\n\
             metadata: {{name: {name}, namespace: ns}}\n\
             spec: {{from: [{{group: g, kind: k, namespace: n}}], to: [{{group: \"\", kind: Service}}]}}\n"
        )
    };
    let (r, out) = parse(&format!(
        "{}---\n{}",
        grant("v1beta1", "a"),
        grant("v1", "b")
    ));
    out.unwrap();
    assert_eq!(r.reference_grants.len(), 2);
}

#[test]
fn unsupported_gateway_api_version_is_an_error() {
    let (_, out) = parse(
        "apiVersion: gateway.networking.k8s.io/v1alpha2\nkind: HTTPRoute\nmetadata: {name: r}\nspec: {}\n",
    );
    assert!(matches!(out, Err(ManifestError::ApiVersion { .. })));
}

#[test]
fn namespaced_objects_default_to_the_default_namespace() {
    let (r, out) = parse(
        "apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {name: r}\nspec: {}\n",
    );
    out.unwrap();
    let (key, route) = r.http_routes.iter().next().unwrap();
    assert_eq!(key, &("default".to_string(), "r".to_string()));
    assert_eq!(route.metadata.namespace.as_deref(), Some("default"));
}

#[test]
fn secret_string_data_is_merged_into_data_and_wins() {
    let (r, out) = parse(
        "apiVersion: v1\nkind: Secret\nmetadata: {name: s, namespace: ns}\n\
         data: {a: YWFh, b: YmJi}\nstringData: {b: override, c: new}\n",
    );
    out.unwrap();
    let s = &r.secrets[&("ns".to_string(), "s".to_string())];
    let data = s.data.as_ref().unwrap();
    let get = |k: &str| String::from_utf8(data[k].0.clone()).unwrap();
    assert_eq!(
        (get("a"), get("b"), get("c")),
        ("aaa".into(), "override".into(), "new".into())
    );
    assert!(s.string_data.is_none());
}

#[test]
fn errors_name_the_document_and_the_absolute_line() {
    let text = "apiVersion: v1\nkind: Namespace\nmetadata: {name: a}\n---\n\
                apiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata: {name: g}\n\
                spec:\n  gatewayClassName: pier\n  listeners:\n  - name: l\n    port: not-a-number\n    protocol: HTTP\n";
    let (_, out) = parse(text);
    let e = out.unwrap_err();
    match &e {
        ManifestError::Object {
            document,
            line,
            kind,
            ..
        } => {
            assert_eq!(*document, 2);
            assert_eq!(kind, "Gateway");
            assert_eq!(*line, 12, "{e}");
        }
        other => panic!("unexpected {other:?}"),
    }
    assert!(e.to_string().starts_with("document 2 (line 12)"), "{e}");
}

#[test]
fn missing_kind_or_name_is_an_error() {
    let (_, out) = parse("apiVersion: v1\nmetadata: {name: a}\n");
    assert!(matches!(out, Err(ManifestError::MissingKind { .. })));
    let (_, out) = parse("apiVersion: v1\nkind: Service\nmetadata: {}\n");
    assert!(matches!(out, Err(ManifestError::MissingName { .. })));
}

#[test]
fn non_mapping_document_is_not_a_kubernetes_object() {
    let (_, out) = parse("- just\n- a list\n");
    let e = out.unwrap_err();
    assert!(matches!(e, ManifestError::TypeMeta { .. }), "{e:?}");
    assert!(
        e.to_string()
            .starts_with("document 1 (line 1): not a Kubernetes object"),
        "{e}"
    );
}

/// Broken YAML is called that, with the parser's reason, at the line in the file (not in the
/// document), and says it once: the reason is not chained as a source too.
#[test]
fn yaml_syntax_error_is_invalid_yaml_with_its_reason_and_file_line() {
    let (_, out) = parse(
        "---\n# first\napiVersion: v1\nkind: Namespace\nmetadata: {name: a}\n---\n\
         apiVersion: v1\nkind: Namespace\nmetadata:\n  name: [b\n",
    );
    let e = out.unwrap_err();
    assert!(matches!(e, ManifestError::Syntax { .. }), "{e:?}");
    let text = e.to_string();
    assert!(
        text.starts_with("document 2 (line 10): invalid YAML: "),
        "{text}"
    );
    assert!(
        text.len() > "document 2 (line 10): invalid YAML: ".len(),
        "{text}"
    );
    assert!(!text.contains("line 4"), "a document-relative line: {text}");
    assert!(std::error::Error::source(&e).is_none());
}

#[test]
fn later_object_with_the_same_key_replaces_the_earlier() {
    let (r, out) = parse(
        "apiVersion: v1\nkind: Namespace\nmetadata: {name: a, labels: {v: \"1\"}}\n---\n\
         apiVersion: v1\nkind: Namespace\nmetadata: {name: a, labels: {v: \"2\"}}\n",
    );
    out.unwrap();
    assert_eq!(
        r.namespaces["a"].metadata.labels.as_ref().unwrap()["v"],
        "2"
    );
}

#[test]
fn every_read_kind_lands_in_its_map() {
    let text = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: c}
spec: {controllerName: x}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: g, namespace: n}
spec: {gatewayClassName: c, listeners: []}
---
apiVersion: v1
kind: Service
metadata: {name: s, namespace: n}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: e, namespace: n}
addressType: IPv4
endpoints: []
---
apiVersion: v1
kind: ConfigMap
metadata: {name: m, namespace: n}
data: {k: v}
"#;
    let (r, out) = parse(text);
    out.unwrap();
    assert_eq!(
        (
            r.gateway_classes.len(),
            r.gateways.len(),
            r.services.len(),
            r.endpoint_slices.len(),
            r.config_maps.len()
        ),
        (1, 1, 1, 1, 1)
    );
}

#[test]
fn a_type_error_names_the_object_and_the_field_path() {
    let text = "apiVersion: v1\nkind: Namespace\nmetadata: {name: a}\n---\n\
                apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\n\
                metadata: {name: web, namespace: shop}\n\
                spec:\n  parentRefs: [{name: gw}]\n  rules:\n\
                \x20 - matches: [{path: {type: PathPrefix, value: /}}]\n\
                \x20 - matches:\n    - path: {type: Prefixx, value: /a}\n";
    let (_, out) = parse(text);
    let e = out.unwrap_err().to_string();
    assert!(
        e.starts_with("document 2 (line 13): invalid HTTPRoute shop/web: "),
        "{e}"
    );
    assert!(
        e.contains("spec.rules[1].matches[0].path.type: unknown variant"),
        "{e}"
    );
}

#[test]
fn a_type_error_in_a_gateway_names_the_field_path() {
    let text = "apiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata: {name: g}\n\
                spec:\n  gatewayClassName: pier\n  listeners:\n  - name: l\n    port: not-a-number\n    protocol: HTTP\n";
    let (_, out) = parse(text);
    let e = out.unwrap_err().to_string();
    assert!(e.contains("invalid Gateway default/g: "), "{e}");
    assert!(e.contains("spec.listeners[0].port: "), "{e}");
}

// === robustness: mutated manifests and alias bombs ===

/// Every YAML file of the examples, as seeds for mutation.
fn seeds() -> Vec<String> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("config/examples");
    let mut out = vec![];
    for dir in std::fs::read_dir(&root).unwrap() {
        let dir = dir.unwrap().path();
        if !dir.is_dir() {
            continue;
        }
        for f in std::fs::read_dir(&dir).unwrap() {
            let f = f.unwrap().path();
            if f.extension().is_some_and(|e| e == "yaml") {
                out.push(std::fs::read_to_string(&f).unwrap());
            }
        }
    }
    assert!(out.len() >= 10, "example manifests found: {}", out.len());
    out
}

/// One edit of a seed: a byte replaced, a byte removed, or a YAML token inserted.
#[derive(Debug, Clone)]
enum Edit {
    Replace(usize, u8),
    Remove(usize),
    Insert(usize, &'static str),
}

/// Mutated example manifests (bytes flipped, removed or inserted, YAML tokens spliced in,
/// truncated) are read or refused with an error, never a panic. `PROPTEST_CASES` sets the
/// number of cases (CI: the default below).
#[test]
fn mutated_manifests_are_read_or_refused_never_a_panic() {
    use proptest::prelude::*;
    use proptest::test_runner::{Config, TestRunner};
    let seeds = seeds();
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000);
    let token = prop::sample::select(vec![
        "{",
        "}",
        "[",
        "]",
        ":",
        ": ",
        "- ",
        "---\n",
        "\n",
        "\t",
        "'",
        "\"",
        "&a ",
        "*a",
        "!!binary ",
        "<<: *a\n",
        "? ",
        "|\n",
        ">-\n",
        "%YAML 1.2\n",
        "\u{feff}",
        "\0",
        "\\u0000",
        "~",
        "null",
        "0x1f",
        "1e999",
        "-.inf",
        "9999999999999999999999",
        "\u{e9}",
        "  ",
        "#",
    ]);
    let edit = prop_oneof![
        (any::<usize>(), any::<u8>()).prop_map(|(i, b)| Edit::Replace(i, b)),
        any::<usize>().prop_map(Edit::Remove),
        (any::<usize>(), token).prop_map(|(i, t)| Edit::Insert(i, t)),
    ];
    let strategy = (
        0..seeds.len(),
        prop::collection::vec(edit, 1..6),
        prop::option::of(any::<usize>()),
    );
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    });
    let refused = std::cell::Cell::new(0u32);
    runner
        .run(&strategy, |(seed, edits, cut)| {
            let mut bytes = seeds[seed].clone().into_bytes();
            for e in edits {
                match e {
                    Edit::Replace(i, b) if !bytes.is_empty() => {
                        let i = i % bytes.len();
                        bytes[i] = b;
                    }
                    Edit::Remove(i) if !bytes.is_empty() => {
                        bytes.remove(i % bytes.len());
                    }
                    Edit::Insert(i, t) => {
                        let i = i % (bytes.len() + 1);
                        bytes.splice(i..i, t.bytes());
                    }
                    _ => {}
                }
            }
            if let Some(c) = cut {
                bytes.truncate(c % (bytes.len() + 1));
            }
            // The files source reads UTF-8 text: other bytes never reach the parser.
            let text = String::from_utf8_lossy(&bytes);
            let _ = count_documents(&text);
            if let (_, Err(e)) = parse(&text) {
                prop_assert!(!e.to_string().is_empty());
                refused.set(refused.get() + 1);
            }
            Ok(())
        })
        .unwrap();
    // Some mutations must break the manifests, or the test proves little.
    let refused = refused.get();
    assert!(refused * 10 >= cases, "{refused} of {cases} refused");
}

/// A "billion laughs" document (nested aliases that expand exponentially) is refused, quickly
/// and without the expansion's memory: the YAML parser's alias budget stops it.
#[test]
fn an_alias_bomb_is_refused() {
    let mut text =
        String::from("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: bomb, namespace: a}\n");
    text.push_str("x0: &x0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n");
    for i in 1..12 {
        let p = i - 1;
        text.push_str(&format!(
            "x{i}: &x{i} [*x{p}, *x{p}, *x{p}, *x{p}, *x{p}, *x{p}, *x{p}, *x{p}, *x{p}, *x{p}]\n"
        ));
    }
    text.push_str("data: {a: b}\n");
    let (_, out) = parse(&text);
    let err = out.expect_err("10^12 expanded nodes must not be accepted");
    assert!(!err.to_string().is_empty());
}

// === kinds of groups pier reads ===

/// `(group, kind as written, nearest kind pier reads)`.
macro_rules! nearest {
    ($name:ident, group = $group:expr, kind = $kind:expr, expected = $expected:expr) => {
        #[test]
        fn $name() {
            assert_eq!(nearest_kind($group, $kind), $expected, "{}", $kind);
        }
    };
}

nearest!(
    a_missing_letter_is_one_edit,
    group = GATEWAY_GROUP,
    kind = "HTTPRout",
    expected = Some("HTTPRoute")
);
nearest!(
    case_is_not_an_edit,
    group = GATEWAY_GROUP,
    kind = "HttpRoute",
    expected = Some("HTTPRoute")
);
nearest!(
    a_plural_is_one_edit,
    group = GATEWAY_GROUP,
    kind = "Gateways",
    expected = Some("Gateway")
);
nearest!(
    a_swap_of_adjacent_letters_is_one_edit,
    group = GATEWAY_GROUP,
    kind = "HTTPRotue",
    expected = Some("HTTPRoute")
);
nearest!(
    two_edits_are_still_suggested,
    group = GATEWAY_GROUP,
    kind = "GatwayClas",
    expected = Some("GatewayClass")
);
nearest!(
    three_edits_are_too_far,
    group = GATEWAY_GROUP,
    kind = "HTPRut",
    expected = None
);
nearest!(
    a_short_kind_takes_one_edit,
    group = "",
    kind = "Pdo",
    expected = Some("Pod")
);
nearest!(
    a_short_kind_takes_no_more_than_one_edit,
    group = "",
    kind = "Pxx",
    expected = None
);
nearest!(
    only_kinds_of_the_same_group_are_suggested,
    group = GATEWAY_GROUP,
    kind = "Servce",
    expected = None
);
nearest!(
    a_group_without_kinds_suggests_none,
    group = PIER_GROUP,
    kind = "Gateway",
    expected = None
);

#[test]
fn edit_distance_counts_insertions_deletions_substitutions_and_swaps() {
    for (a, b, d) in [
        ("", "", 0),
        ("", "abc", 3),
        ("abc", "", 3),
        ("abc", "abc", 0),
        ("abc", "abd", 1),
        ("abc", "acb", 1),
        ("abc", "ab", 1),
        ("ca", "abc", 3),
        ("httproute", "grpcroute", 4),
    ] {
        assert_eq!(edit_distance(a, b), d, "{a} -> {b}");
        assert_eq!(edit_distance(b, a), d, "{b} -> {a}");
    }
}

fn skipped(api_version: &str, kind: &str) -> SkippedKind {
    SkippedKind {
        document: 1,
        line: 1,
        api_version: api_version.into(),
        kind: kind.into(),
    }
}

/// A kind of a group pier reads that it does not read is a mistake to report, with the kind it
/// likely meant; a kind of another group (a Deployment next to the routes) is not.
#[test]
fn an_unknown_kind_of_a_group_pier_reads_is_a_mistake_with_the_nearest_kind() {
    let gw = "gateway.networking.k8s.io/v1";
    let m = skipped(gw, "HTTPRout").mistake().unwrap();
    assert_eq!(
        m.to_string(),
        "HTTPRout is not a kind of gateway.networking.k8s.io that pier reads (did you mean \
         HTTPRoute?); the object is ignored"
    );
    let m = skipped(gw, "Frobnicator").mistake().unwrap();
    assert!(
        m.to_string()
            .contains("(GatewayClass, Gateway, HTTPRoute, GRPCRoute, TLSRoute"),
        "{m}"
    );
    let m = skipped(gw, "BackendLBPolicy").mistake().unwrap();
    assert_eq!(
        m.to_string(),
        "pier does not serve BackendLBPolicy (gateway.networking.k8s.io); the object is ignored"
    );
    let m = skipped("pier.dev/v1", "SPIFFEWorkloadAPI")
        .mistake()
        .unwrap();
    assert!(
        m.to_string().contains(
            "not a kind of pier.dev that pier reads (SecurityPolicy, BackendTrafficPolicy, ClientTrafficPolicy)"
        ),
        "{m}"
    );
    assert_eq!(skipped("apps/v1", "Deployment").mistake(), None);
    assert_eq!(skipped("v1", "ServiceAccount").mistake(), None);
    assert_eq!(
        skipped("gateway.networking.x-k8s.io/v1alpha1", "XMesh").mistake(),
        None
    );
}

#[test]
fn every_kind_pier_reads_is_a_suggestion() {
    for group in [
        GATEWAY_GROUP,
        "",
        "discovery.k8s.io",
        CERTIFICATES_GROUP,
        PIER_GROUP,
    ] {
        for kind in KIND_NAMES.iter().filter(|k| Kind::of(group, k).is_some()) {
            assert_eq!(nearest_kind(group, kind), Some(*kind));
        }
    }
    let read = [
        GATEWAY_GROUP,
        "",
        "discovery.k8s.io",
        CERTIFICATES_GROUP,
        PIER_GROUP,
    ]
    .iter()
    .map(|g| kinds_read(g).len())
    .sum::<usize>();
    assert_eq!(read, KIND_NAMES.len());
}

/// The unknown fields `text` has, as shown.
fn unknown_fields(text: &str) -> (Resources, Vec<String>) {
    let mut r = Resources::default();
    let m = parse_manifests_placed(text, &mut r).unwrap();
    let shown = m.unknown.iter().map(ToString::to_string).collect();
    (r, shown)
}

#[test]
fn a_misspelt_field_is_named_with_its_path_and_the_field_meant() {
    let (r, shown) = unknown_fields(
        "apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\n\
         metadata: {name: web, namespace: shop}\n\
         spec:\n  hostname: [a.example]\n  rules:\n  - backendRefs: [{name: a, port: 80}]\n  \
         - backendRef: [{name: b, port: 80}]\n    timeouts: {request: 1s, bakend: 2s}\n",
    );
    assert_eq!(
        shown,
        vec![
            "HTTPRoute shop/web: unknown fields spec.hostname (did you mean hostnames?), \
             spec.rules[1].backendRef (did you mean backendRefs?), \
             spec.rules[1].timeouts.bakend; they are ignored"
        ]
    );
    let key = ("HTTPRoute".to_string(), ("shop".into(), "web".into()));
    assert_eq!(r.unknown_fields[&key].len(), 3);
}

#[test]
fn a_misspelt_field_of_pier_s_own_policies_is_named() {
    let (_, shown) = unknown_fields(
        "apiVersion: pier.dev/v1alpha1\nkind: BackendTrafficPolicy\n\
         metadata: {name: limit, namespace: shop}\n\
         spec:\n  targetRefs: [{group: gateway.networking.k8s.io, kind: Gateway, name: gw}]\n  \
         rateLimit:\n    local:\n      rules:\n      - limit: {requests: 1, unit: Second}\n        \
         shard: true\n",
    );
    assert_eq!(
        shown,
        vec![
            "BackendTrafficPolicy shop/limit: unknown field spec.rateLimit.local.rules[0].shard \
             (did you mean shared?); it is ignored"
        ]
    );
}

#[test]
fn known_fields_of_every_kind_are_not_unknown() {
    // apiVersion, kind, status and metadata's fields are known; a Pod is read for one field
    // by design, the rest of it is not "unknown".
    let (r, shown) = unknown_fields(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\n\
         spec: {serviceAccountName: web, containers: [{name: c, image: x}]}\n---\n\
         apiVersion: v1\nkind: Secret\nmetadata: {name: s, labels: {a: b}}\ntype: Opaque\n\
         stringData: {x: y}\n---\n\
         apiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\n\
         metadata: {name: g, annotations: {a: b}}\n\
         spec:\n  gatewayClassName: pier\n  listeners: [{name: h, port: 80, protocol: HTTP}]\n  \
         mesh: {selector: {matchLabels: {m: y}}, trustBundle: {name: ca}}\n\
         status: {conditions: []}\n",
    );
    assert_eq!(shown, Vec::<String>::new());
    assert!(r.unknown_fields.is_empty());
}

#[test]
fn unknown_fields_of_the_gateway_and_its_mesh_stanza_are_named() {
    let (_, shown) = unknown_fields(
        "apiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata: {name: g}\n\
         spec:\n  gatewayClassName: pier\n  listeners: []\n  infrastucture: {}\n  \
         mesh: {selectr: {matchLabels: {m: y}}, trustBundle: {name: ca}}\n",
    );
    assert_eq!(
        shown,
        vec![
            "Gateway default/g: unknown fields spec.infrastucture (did you mean infrastructure?), \
             spec.mesh.selectr; they are ignored"
        ]
    );
}

#[test]
fn a_later_copy_without_unknown_fields_clears_them() {
    let bad = "apiVersion: v1\nkind: Namespace\nmetadata: {name: a}\nspc: {}\n";
    let good = "apiVersion: v1\nkind: Namespace\nmetadata: {name: a}\n";
    let (r, shown) = unknown_fields(bad);
    assert_eq!(
        shown,
        vec!["Namespace a: unknown field spc (did you mean spec?); it is ignored"]
    );
    assert_eq!(r.unknown_fields.len(), 1);
    let (r, _) = unknown_fields(&format!("{bad}---\n{good}"));
    assert!(r.unknown_fields.is_empty());
}

/// Gateway API v1.7's `sessionPersistence` fields (`cookie`, `header`) are read into the typed
/// rule and are not reported as unknown; a field that is unknown beside them still is.
#[test]
fn v17_session_persistence_fields_are_read_not_reported_unknown() {
    let text = "apiVersion: gateway.networking.k8s.io/v1\nkind: GRPCRoute\n\
                metadata: {name: g, namespace: shop}\n\
                spec:\n  rules:\n  - sessionPersistence: {type: Header, header: {name: x-s}, extra: 1}\n";
    let mut r = Resources::default();
    let out = parse_manifests_placed(text, &mut r).unwrap();
    let route = &r.grpc_routes[&("shop".to_string(), "g".to_string())];
    let sp = route.spec.rules.as_ref().unwrap()[0]
        .session_persistence
        .as_ref()
        .unwrap();
    assert_eq!(sp.session_name.as_deref(), Some("x-s"));
    let unknown: Vec<String> = out
        .unknown
        .iter()
        .flat_map(|u| u.fields.iter().map(ToString::to_string))
        .collect();
    assert_eq!(unknown, ["spec.rules[0].sessionPersistence.extra"]);
}
