//! Gateway API v1.7's shape of a route rule's `sessionPersistence` (GEP-1619), read into the
//! v1.6 shape pier's generated types have: v1.7 drops `sessionName` and names the carrier in
//! `cookie: {name, path, lifetimeType}` or `header: {name}`; pier keeps its `sessionName` and
//! `cookieConfig.lifetimeType`. Both shapes are read, whichever CRDs the cluster has:
//!
//! ```text
//! v1.7: sessionPersistence: {type: Cookie, cookie: {name: s, lifetimeType: Permanent}}
//! v1.6: sessionPersistence: {type: Cookie, sessionName: s, cookieConfig: {lifetimeType: Permanent}}
//! v1.7: sessionPersistence: {type: Header, header: {name: x-session}}
//! v1.6: sessionPersistence: {type: Header, sessionName: x-session}
//! ```
//!
//! A name written both ways keeps the v1.6 one. `cookie.path` is not applied: pier's session
//! cookie has `Path=/`, which a client sends on the path asked for too.

use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

/// The v1.7 fields of one rule's `sessionPersistence`.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
pub struct Shape {
    #[serde(default)]
    pub cookie: Option<CookieShape>,
    #[serde(default)]
    pub header: Option<HeaderShape>,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct CookieShape {
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub lifetime_type: Option<String>,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
pub struct HeaderShape {
    #[serde(default)]
    pub name: Option<String>,
}

/// Only `spec.rules[].sessionPersistence`'s v1.7 fields of an HTTPRoute or GRPCRoute.
#[derive(Default, Deserialize)]
pub struct RoutesDoc {
    #[serde(default)]
    spec: RoutesSpec,
}

#[derive(Default, Deserialize)]
struct RoutesSpec {
    #[serde(default)]
    rules: Vec<RuleDoc>,
}

#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct RuleDoc {
    #[serde(default)]
    session_persistence: Option<Shape>,
}

impl RoutesDoc {
    /// Each rule's shape (`None`: no `sessionPersistence`, or no v1.7 field in it).
    pub fn shapes(self) -> Vec<Option<Shape>> {
        let some = |s: Shape| (s != Shape::default()).then_some(s);
        self.spec
            .rules
            .into_iter()
            .map(|r| r.session_persistence.and_then(some))
            .collect()
    }
}

/// Folds `shape` into a v1.6 `sessionPersistence` object.
fn fold(sp: &mut Map<String, Value>, shape: &Shape) {
    let name = (shape.cookie.as_ref().and_then(|c| c.name.clone()))
        .or_else(|| shape.header.as_ref().and_then(|h| h.name.clone()));
    if let Some(name) = name
        && !sp.contains_key("sessionName")
    {
        sp.insert("sessionName".into(), Value::String(name));
    }
    if let Some(lifetime) = shape.cookie.as_ref().and_then(|c| c.lifetime_type.clone()) {
        let config = sp
            .entry("cookieConfig")
            .or_insert_with(|| Value::Object(Map::new()));
        if let Some(config) = config.as_object_mut() {
            config
                .entry("lifetimeType")
                .or_insert(Value::String(lifetime));
        }
    }
}

/// Only `spec.sessionPersistence`'s v1.7 fields of an XBackendTrafficPolicy.
#[derive(Default, Deserialize)]
pub struct PolicyDoc {
    #[serde(default)]
    spec: PolicySpec,
}

#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct PolicySpec {
    #[serde(default)]
    session_persistence: Option<Shape>,
}

impl PolicyDoc {
    /// Its shape (`None`: no `sessionPersistence`, or no v1.7 field in it).
    pub fn shape(self) -> Option<Shape> {
        (self.spec.session_persistence).filter(|s| *s != Shape::default())
    }
}

/// An XBackendTrafficPolicy as JSON: its `spec.sessionPersistence`'s v1.7 fields folded into
/// the v1.6 ones, before the typed decoding.
pub fn normalize_policy(policy: &mut Value) {
    if let Some(sp) = policy
        .pointer_mut("/spec/sessionPersistence")
        .and_then(Value::as_object_mut)
    {
        let shape: Shape = serde_json::from_value(Value::Object(sp.clone())).unwrap_or_default();
        fold(sp, &shape);
    }
}

/// An HTTPRoute or GRPCRoute as JSON (what the API server sends): every rule's v1.7
/// `sessionPersistence` fields folded into the v1.6 ones, before the typed decoding.
pub fn normalize(route: &mut Value) {
    let Some(rules) = route
        .pointer_mut("/spec/rules")
        .and_then(Value::as_array_mut)
    else {
        return;
    };
    for rule in rules {
        let Some(sp) = rule
            .get_mut("sessionPersistence")
            .and_then(Value::as_object_mut)
        else {
            continue;
        };
        let shape: Shape = serde_json::from_value(Value::Object(sp.clone())).unwrap_or_default();
        fold(sp, &shape);
    }
}

/// A typed rule's `sessionPersistence` with `shape` folded in (manifests: the typed decoding
/// already ran). Fails when the result does not decode (an unknown `lifetimeType`).
pub fn apply<T: serde::Serialize + DeserializeOwned>(
    sp: &mut Option<T>,
    shape: &Shape,
) -> Result<(), serde_json::Error> {
    let mut value = match sp {
        Some(t) => serde_json::to_value(&*t)?,
        None => Value::Object(Map::new()),
    };
    if let Some(map) = value.as_object_mut() {
        fold(map, shape);
    }
    *sp = Some(serde_json::from_value(value)?);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::translate::api::HttpRoute;

    fn route(sp: Value) -> Value {
        serde_json::json!({
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
            "metadata": {"name": "r", "namespace": "n"},
            "spec": {"rules": [{"sessionPersistence": sp}, {}]},
        })
    }

    fn typed(mut v: Value) -> HttpRoute {
        normalize(&mut v);
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn v17_cookie_and_header_read_as_v16_names_and_lifetimes() {
        let r = typed(route(serde_json::json!({
            "type": "Cookie", "absoluteTimeout": "1h",
            "cookie": {"name": "shop", "path": "/cart", "lifetimeType": "Permanent"},
        })));
        let sp = r.spec.rules.unwrap()[0]
            .session_persistence
            .clone()
            .unwrap();
        assert_eq!(sp.session_name.as_deref(), Some("shop"));
        assert!(format!("{:?}", sp.cookie_config.unwrap().lifetime_type).contains("Permanent"));
        let r = typed(route(serde_json::json!({
            "type": "Header", "header": {"name": "x-session"},
        })));
        let sp = r.spec.rules.unwrap()[0]
            .session_persistence
            .clone()
            .unwrap();
        assert_eq!(sp.session_name.as_deref(), Some("x-session"));
        // v1.6's name wins when both are written; a v1.6 rule stays as it was.
        let r = typed(route(serde_json::json!({
            "sessionName": "old", "cookie": {"name": "new"},
        })));
        let sp = r.spec.rules.unwrap()[0]
            .session_persistence
            .clone()
            .unwrap();
        assert_eq!(sp.session_name.as_deref(), Some("old"));
        let r = typed(route(serde_json::json!({"sessionName": "only"})));
        let rules = r.spec.rules.unwrap();
        assert_eq!(
            rules[0]
                .session_persistence
                .as_ref()
                .unwrap()
                .session_name
                .as_deref(),
            Some("only")
        );
        assert!(rules[1].session_persistence.is_none());
    }

    #[test]
    fn apply_folds_into_a_typed_rule_and_refuses_an_unknown_lifetime() {
        let mut r: HttpRoute = serde_json::from_value(route(serde_json::json!({}))).unwrap();
        let rules = r.spec.rules.as_mut().unwrap();
        let shape = Shape {
            cookie: Some(CookieShape {
                name: Some("shop".into()),
                lifetime_type: Some("Session".into()),
            }),
            header: None,
        };
        apply(&mut rules[0].session_persistence, &shape).unwrap();
        let sp = rules[0].session_persistence.as_ref().unwrap();
        assert_eq!(sp.session_name.as_deref(), Some("shop"));
        let bad = Shape {
            cookie: Some(CookieShape {
                name: None,
                lifetime_type: Some("Forever".into()),
            }),
            header: None,
        };
        assert!(apply(&mut rules[1].session_persistence, &bad).is_err());
    }
}
