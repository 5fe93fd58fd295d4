use std::collections::BTreeMap;

use serde::Deserialize;

use super::*;

fn decode<T: de::DeserializeOwned>(text: &str) -> Result<(T, Vec<Vec<Step>>), String> {
    let tree = Tree::read(text).map_err(|e| format!("line {}: {}", e.line, e.message))?;
    let mut ignored = Vec::new();
    match tree.decode::<T>(&mut ignored) {
        Ok(v) => Ok((v, ignored)),
        Err(e) => Err(match e.node {
            Some(n) => format!(
                "line {} {}: {}",
                tree.line(n),
                super::super::super::field_path::Path(&tree.path(n)),
                e.message
            ),
            None => format!("top: {}", e.message),
        }),
    }
}

#[derive(Debug, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
struct Spec {
    name: String,
    #[serde(default)]
    port: Option<u16>,
    #[serde(default)]
    ratio: Option<f64>,
    #[serde(default)]
    enabled: Option<bool>,
    #[serde(default)]
    kind: Option<Kind>,
    #[serde(default)]
    items: Vec<Item>,
    #[serde(default)]
    labels: BTreeMap<String, String>,
}

#[derive(Debug, Deserialize, PartialEq)]
enum Kind {
    Exact,
    PathPrefix,
}

#[derive(Debug, Deserialize, PartialEq)]
struct Item {
    value: i64,
}

#[test]
fn typed_scalars_read_quoted_and_plain_alike() {
    let (s, ignored): (Spec, _) = decode(
        "name: 80\nport: \"8080\"\nratio: 0.5\nenabled: yes\nkind: PathPrefix\n\
         labels: {a: true, b: 1, c: ~x}\n",
    )
    .unwrap();
    assert_eq!(s.name, "80");
    assert_eq!(s.port, Some(8080));
    assert_eq!(s.ratio, Some(0.5));
    assert_eq!(s.enabled, Some(true));
    assert_eq!(s.kind, Some(Kind::PathPrefix));
    assert_eq!(s.labels["a"], "true");
    assert_eq!(s.labels["b"], "1");
    assert_eq!(s.labels["c"], "~x");
    assert!(ignored.is_empty());
}

#[test]
fn null_means_none_or_an_empty_collection_never_a_string() {
    let (s, _): (Spec, _) = decode("name: a\nport: ~\nitems:\nlabels: null\n").unwrap();
    assert_eq!((s.port, s.items.len(), s.labels.len()), (None, 0, 0));
    let e = decode::<Spec>("name:\n").unwrap_err();
    assert!(e.starts_with("line 1 name: invalid type: null"), "{e}");
}

#[test]
fn errors_name_the_innermost_value_its_path_and_line() {
    let e = decode::<Spec>("name: a\nitems:\n- value: 1\n- value: one\n").unwrap_err();
    assert_eq!(
        e,
        "line 4 items[1].value: invalid type: string \"one\", expected i64"
    );
    let e = decode::<Spec>("name: a\nkind: Prefixx\n").unwrap_err();
    assert!(
        e.starts_with("line 2 kind: unknown variant `Prefixx`, expected `Exact` or"),
        "{e}"
    );
    let e = decode::<Spec>("name: a\nport: 70000\n").unwrap_err();
    assert_eq!(
        e,
        "line 2 port: invalid value: integer `70000`, expected u16"
    );
    let e = decode::<Spec>("port: 1\n").unwrap_err();
    assert_eq!(e, "line 1 : missing field `name`");
}

#[test]
fn unknown_fields_are_reported_by_path() {
    let (_, ignored): (Spec, _) =
        decode("name: a\nitems:\n- value: 1\n  valu: 2\nlabelz: {}\n").unwrap();
    assert_eq!(
        ignored,
        vec![
            vec![
                Step::Key("items".into()),
                Step::Index(0),
                Step::Key("valu".into())
            ],
            vec![Step::Key("labelz".into())],
        ]
    );
}

#[test]
fn untyped_targets_get_yaml_types_from_plain_scalars() {
    let (v, _): (serde_json::Value, _) = decode(
        "a: 1\nb: \"1\"\nc: true\nd: 'true'\ne: 1.5\nf: ~\ng: text\nh: -3\ni: 0x10\nj: .inf\n\
         k: !!str 2\n",
    )
    .unwrap();
    assert_eq!(
        v,
        serde_json::json!({
            "a": 1, "b": "1", "c": true, "d": "true", "e": 1.5, "f": null, "g": "text",
            "h": -3, "i": 16, "j": ".inf", "k": "2"
        })
    );
}

#[test]
fn aliases_and_merge_keys_are_expanded_with_their_own_paths() {
    let text = "base: &b {value: 1}\nitems:\n- *b\n- <<: *b\n  value: 2\n- <<: [*b]\n";
    let (v, _): (BTreeMap<String, serde_json::Value>, _) = decode(text).unwrap();
    assert_eq!(
        v["items"],
        serde_json::json!([{"value": 1}, {"value": 2}, {"value": 1}])
    );
    // An error in an alias's copy names the path it is read at.
    #[derive(Debug, Deserialize)]
    struct Items {
        #[allow(dead_code)]
        items: Vec<Item>,
    }
    let e = decode::<Items>("x: &b {value: one}\nitems:\n- *b\n").unwrap_err();
    assert!(e.starts_with("line 1 items[0].value: invalid type"), "{e}");
}

#[test]
fn an_alias_bomb_stops_at_the_node_bound() {
    let mut text = String::from("x0: &x0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n");
    for i in 1..12 {
        let p = i - 1;
        text.push_str(&format!(
            "x{i}: &x{i} [*x{p}, *x{p}, *x{p}, *x{p}, *x{p}, *x{p}, *x{p}, *x{p}, *x{p}, *x{p}]\n"
        ));
    }
    let e = Tree::read(&text).err().expect("refused");
    assert!(e.message.contains("250000 nodes"), "{}", e.message);
}

#[test]
fn deep_nesting_is_refused() {
    let text = format!("{}{}", "[".repeat(100), "]".repeat(100));
    let e = Tree::read(&text).err().expect("refused");
    assert!(e.message.contains("deeper than 64"), "{}", e.message);
}

#[test]
fn externally_tagged_enums_read_as_single_entry_maps() {
    #[derive(Debug, Deserialize, PartialEq)]
    enum E {
        Unit,
        New(u8),
        Struct { a: u8 },
    }
    let (v, _): (Vec<E>, _) = decode("- Unit\n- New: 3\n- Struct: {a: 4}\n").unwrap();
    assert_eq!(v, vec![E::Unit, E::New(3), E::Struct { a: 4 }]);
}

#[test]
fn scalar_rules() {
    assert_eq!(parse_int("1_000"), Some(1000));
    assert_eq!(parse_int("-0x1f"), Some(-31));
    assert_eq!(parse_int("0o17"), Some(15));
    assert_eq!(parse_int("1e3"), None);
    assert_eq!(parse_int("_1"), None);
    assert_eq!(parse_int(""), None);
    assert_eq!(parse_float("1e3"), Some(1000.0));
    assert_eq!(parse_float("inf"), None);
    assert_eq!(parse_float("nan"), None);
    assert_eq!(parse_float("-.inf"), Some(f64::NEG_INFINITY));
    assert_eq!(parse_bool("Off"), Some(false));
    assert_eq!(parse_bool("maybe"), None);
}
