//! The claims of a verified JWT, looked up by name for `claimToHeaders` and for
//! authorization rules (Envoy Gateway's `jwt.claims` and `jwt.scopes`).
//!
//! A name with dots (`a.b.c`) reaches into nested objects, as in Envoy. A top-level claim
//! whose own name has dots (`https://example.com/roles`, common for namespaced custom
//! claims) is found first by its exact name; only when there is none is the name split.

use serde_json::{Map, Value};

/// The payload of a token whose signature and time, issuer and audience checks passed.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Claims(Map<String, Value>);

impl Claims {
    pub fn new(map: Map<String, Value>) -> Claims {
        Claims(map)
    }

    pub fn as_map(&self) -> &Map<String, Value> {
        &self.0
    }

    pub fn into_map(self) -> Map<String, Value> {
        self.0
    }

    /// The claim at `name`: the top-level claim of that exact name, else the path of its
    /// dot-separated parts through nested objects.
    pub fn get(&self, name: &str) -> Option<&Value> {
        if let Some(value) = self.0.get(name) {
            return Some(value);
        }
        let mut parts = name.split('.');
        let first = self.0.get(parts.next()?)?;
        parts.try_fold(first, |value, part| value.as_object()?.get(part))
    }

    /// The claim at `name` as a header value: a string as it is, a number or boolean in its
    /// JSON text, an array of strings joined with `,`. `None` for other types, and for a
    /// value with a control character (CR, LF, NUL, ...; tab is allowed), which no header
    /// may carry.
    pub fn header_value(&self, name: &str) -> Option<String> {
        let text = match self.get(name)? {
            Value::String(s) => s.clone(),
            Value::Number(n) => n.to_string(),
            Value::Bool(b) => b.to_string(),
            Value::Array(items) => {
                let strings = strings_of(items)?;
                strings.join(",")
            }
            Value::Null | Value::Object(_) => return None,
        };
        (!text.chars().any(is_forbidden_in_header)).then_some(text)
    }

    /// The claim at `name` as strings: a string is one, an array of strings is each of
    /// them. `None` for a missing claim or another type.
    pub fn strings(&self, name: &str) -> Option<Vec<&str>> {
        match self.get(name)? {
            Value::String(s) => Some(vec![s.as_str()]),
            Value::Array(items) => strings_of(items),
            _ => None,
        }
    }

    /// The token's scopes: those of `scope` (RFC 8693: one space-separated string; an
    /// array of strings is taken too) and of `scp` (either form), together. Items that are
    /// not strings are ignored.
    pub fn scopes(&self) -> Vec<&str> {
        ["scope", "scp"]
            .into_iter()
            .filter_map(|name| self.0.get(name))
            .flat_map(scope_items)
            .collect()
    }

    /// The token has every scope of `required`.
    pub fn has_scopes<'a>(&self, required: impl IntoIterator<Item = &'a str>) -> bool {
        let scopes = self.scopes();
        required.into_iter().all(|r| scopes.contains(&r))
    }
}

fn strings_of(items: &[Value]) -> Option<Vec<&str>> {
    items.iter().map(Value::as_str).collect()
}

fn scope_items(value: &Value) -> Vec<&str> {
    match value {
        Value::String(s) => s.split(' ').filter(|s| !s.is_empty()).collect(),
        Value::Array(items) => items.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    }
}

fn is_forbidden_in_header(c: char) -> bool {
    c != '\t' && c.is_ascii_control()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn claims(value: Value) -> Claims {
        match value {
            Value::Object(map) => Claims::new(map),
            _ => panic!("not an object"),
        }
    }

    #[test]
    fn nested_names_reach_into_objects_and_exact_names_win() {
        let c = claims(json!({
            "a": {"b": {"c": "deep"}},
            "https://example.com/roles": ["admin"],
            "x.y": "flat",
            "x": {"y": "nested"},
        }));
        assert_eq!(c.get("a.b.c"), Some(&json!("deep")));
        assert_eq!(c.get("a.b.missing"), None);
        assert_eq!(c.get("a.b.c.d"), None, "a string has no members");
        assert_eq!(c.get("https://example.com/roles"), Some(&json!(["admin"])));
        assert_eq!(c.get("x.y"), Some(&json!("flat")));
        assert_eq!(c.get(""), None);
    }

    #[test]
    fn header_values_of_each_type() {
        let c = claims(json!({
            "s": "alice", "n": 42, "f": 1.5, "neg": -3, "t": true,
            "arr": ["a", "b"], "mixed": ["a", 1], "obj": {"k": 1}, "null": null,
            "crlf": "a\r\nInjected: 1", "tab": "a\tb", "utf8": "zoë",
        }));
        assert_eq!(c.header_value("s").as_deref(), Some("alice"));
        assert_eq!(c.header_value("n").as_deref(), Some("42"));
        assert_eq!(c.header_value("f").as_deref(), Some("1.5"));
        assert_eq!(c.header_value("neg").as_deref(), Some("-3"));
        assert_eq!(c.header_value("t").as_deref(), Some("true"));
        assert_eq!(c.header_value("arr").as_deref(), Some("a,b"));
        assert_eq!(c.header_value("mixed"), None);
        assert_eq!(c.header_value("obj"), None);
        assert_eq!(c.header_value("null"), None);
        assert_eq!(c.header_value("crlf"), None);
        assert_eq!(c.header_value("tab").as_deref(), Some("a\tb"));
        assert_eq!(c.header_value("utf8").as_deref(), Some("zoë"));
        assert_eq!(c.header_value("missing"), None);
    }

    #[test]
    fn strings_of_a_string_or_an_array() {
        let c = claims(json!({"g": ["dev", "ops"], "s": "one", "n": 1, "m": ["a", 2]}));
        assert_eq!(c.strings("g"), Some(vec!["dev", "ops"]));
        assert_eq!(c.strings("s"), Some(vec!["one"]));
        assert_eq!(c.strings("n"), None);
        assert_eq!(c.strings("m"), None);
    }

    #[test]
    fn scopes_from_scope_and_scp_in_either_form() {
        let c = claims(json!({"scope": "read  write", "scp": ["admin", 7]}));
        assert_eq!(c.scopes(), vec!["read", "write", "admin"]);
        assert!(c.has_scopes(["read", "admin"]));
        assert!(!c.has_scopes(["delete"]));
        let c = claims(json!({"scp": "a b"}));
        assert_eq!(c.scopes(), vec!["a", "b"]);
        let c = claims(json!({"scope": ["x"], "other": "y"}));
        assert_eq!(c.scopes(), vec!["x"]);
        assert!(claims(json!({"scope": 3})).scopes().is_empty());
        assert!(claims(json!({})).has_scopes([]));
    }
}
