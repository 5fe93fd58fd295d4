//! Why a configuration serves nothing: which step of "GatewayClass with pier's controllerName
//! -> Gateway of that class -> `--gateway` -> listeners" left nothing, in words an operator can
//! act on. Pure, like the rest of `translate`; the publisher logs it.

use std::collections::BTreeSet;

use super::{Resources, Settings};
use crate::model::ObjectRef;

/// At most this many names are listed in a reason.
const LIST: usize = 5;

/// Why translating `resources` with `settings` gives no listener.
pub fn why_nothing_served(resources: &Resources, settings: &Settings) -> String {
    if resources.gateways.is_empty() {
        return "there is no Gateway in the configuration".to_string();
    }
    let ours: BTreeSet<&String> = resources
        .gateway_classes
        .iter()
        .filter(|(_, c)| c.spec.controller_name == settings.controller_name)
        .map(|(name, _)| name)
        .collect();
    if ours.is_empty() {
        let found = list(
            resources
                .gateway_classes
                .iter()
                .map(|(name, c)| format!("{name} ({})", c.spec.controller_name)),
        );
        return format!(
            "no GatewayClass has spec.controllerName {} (--controller-name); GatewayClasses: {found}",
            settings.controller_name
        );
    }
    let in_class: Vec<ObjectRef> = resources
        .gateways
        .iter()
        .filter(|(_, g)| ours.contains(&g.spec.base.gateway_class_name))
        .map(|((ns, name), _)| ObjectRef::new(ns, name))
        .collect();
    let classes = list(ours.iter());
    if in_class.is_empty() {
        let found =
            list(resources.gateways.iter().map(|((ns, name), g)| {
                format!("{ns}/{name} ({})", g.spec.base.gateway_class_name)
            }));
        return format!("no Gateway has gatewayClassName {classes}; Gateways: {found}");
    }
    if let Some(g) = &settings.gateway
        && !in_class.contains(g)
    {
        return format!(
            "--gateway {g} matches no Gateway of GatewayClass {classes}; they are: {}",
            list(in_class.iter())
        );
    }
    "no listener of the Gateways in scope can be served: their status says why (`pier check`, \
     or the admin server's /status)"
        .to_string()
}

/// `a, b, c and 4 more`, or `none`.
fn list<T: std::fmt::Display>(items: impl ExactSizeIterator<Item = T>) -> String {
    let n = items.len();
    if n == 0 {
        return "none".to_string();
    }
    let mut out = items
        .take(LIST)
        .map(|i| i.to_string())
        .collect::<Vec<_>>()
        .join(", ");
    if n > LIST {
        out.push_str(&format!(" and {} more", n - LIST));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::translate::manifest::parse_manifests;

    fn why(yaml: &str, settings: &Settings) -> String {
        let mut r = Resources::default();
        parse_manifests(yaml, &mut r).unwrap();
        why_nothing_served(&r, settings)
    }

    const CLASS: &str = "apiVersion: gateway.networking.k8s.io/v1\nkind: GatewayClass\n\
                         metadata: {name: pier}\nspec: {controllerName: pier.dev/gateway-controller}\n";
    const OTHER_CLASS: &str = "apiVersion: gateway.networking.k8s.io/v1\nkind: GatewayClass\n\
                               metadata: {name: istio}\nspec: {controllerName: istio.io/gateway-controller}\n";

    fn gateway(class: &str) -> String {
        format!(
            "apiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\n\
             metadata: {{name: gw, namespace: ns}}\nspec:\n  gatewayClassName: {class}\n  \
             listeners: [{{name: http, port: 8080, protocol: HTTP}}]\n"
        )
    }

    #[test]
    fn names_the_step_that_left_nothing() {
        let s = Settings::default();
        assert_eq!(why("", &s), "there is no Gateway in the configuration");
        let text = why(&format!("{OTHER_CLASS}---\n{}", gateway("istio")), &s);
        assert!(
            text.contains("no GatewayClass has spec.controllerName pier.dev/gateway-controller")
                && text.contains("istio (istio.io/gateway-controller)"),
            "{text}"
        );
        let text = why(&format!("{CLASS}---\n{}", gateway("istio")), &s);
        assert_eq!(
            text,
            "no Gateway has gatewayClassName pier; Gateways: ns/gw (istio)"
        );
        let only = Settings {
            gateway: Some(ObjectRef::new("ns", "other")),
            ..Settings::default()
        };
        let text = why(&format!("{CLASS}---\n{}", gateway("pier")), &only);
        assert_eq!(
            text,
            "--gateway ns/other matches no Gateway of GatewayClass pier; they are: ns/gw"
        );
        let text = why(&format!("{CLASS}---\n{}", gateway("pier")), &s);
        assert!(
            text.starts_with("no listener of the Gateways in scope"),
            "{text}"
        );
    }
}
