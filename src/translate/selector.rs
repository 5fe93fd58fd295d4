//! Kubernetes label selectors (`matchLabels` and In/NotIn/Exists/DoesNotExist
//! `matchExpressions`), parsed once: `allowedRoutes.namespaces` selects Namespaces with them,
//! and a Gateway's `spec.mesh` selects meshed Routes and Namespaces.

use std::collections::BTreeMap;

use crate::translate::api::{LabelSelector as ApiLabelSelector, LabelSelectorRequirement};

#[derive(Debug, Default, PartialEq, Eq)]
pub struct LabelSelector {
    pub labels: BTreeMap<String, String>,
    pub expressions: Vec<Requirement>,
}

#[derive(Debug, PartialEq, Eq)]
pub enum Requirement {
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    DoesNotExist(String),
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum InvalidSelector {
    #[error("matchExpressions operator {0:?} is not In, NotIn, Exists or DoesNotExist")]
    Operator(String),
    #[error("matchExpressions {0:?}: In and NotIn need values")]
    MissingValues(String),
    #[error("matchExpressions {0:?}: Exists and DoesNotExist take no values")]
    UnexpectedValues(String),
}

pub fn requirement(
    key: &str,
    operator: &str,
    values: &[String],
) -> Result<Requirement, InvalidSelector> {
    let key = key.to_string();
    let values = values.to_vec();
    Ok(match operator {
        "In" | "NotIn" if values.is_empty() => return Err(InvalidSelector::MissingValues(key)),
        "Exists" | "DoesNotExist" if !values.is_empty() => {
            return Err(InvalidSelector::UnexpectedValues(key));
        }
        "In" => Requirement::In(key, values),
        "NotIn" => Requirement::NotIn(key, values),
        "Exists" => Requirement::Exists(key),
        "DoesNotExist" => Requirement::DoesNotExist(key),
        other => return Err(InvalidSelector::Operator(other.to_string())),
    })
}

// === impl LabelSelector ===

impl LabelSelector {
    /// A Kubernetes `LabelSelector` (the mesh selector). The empty selector matches everything.
    pub fn from_api(
        ApiLabelSelector {
            match_expressions,
            match_labels,
        }: &ApiLabelSelector,
    ) -> Result<Self, InvalidSelector> {
        let expressions = match_expressions
            .iter()
            .flatten()
            .map(
                |LabelSelectorRequirement {
                     key,
                     operator,
                     values,
                 }| {
                    requirement(key, operator, values.as_deref().unwrap_or_default())
                },
            )
            .collect::<Result<_, _>>()?;
        Ok(Self {
            labels: match_labels.clone().unwrap_or_default(),
            expressions,
        })
    }

    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.labels.iter().all(|(k, v)| labels.get(k) == Some(v))
            && self.expressions.iter().all(|r| match r {
                Requirement::In(k, vs) => labels.get(k).is_some_and(|v| vs.contains(v)),
                Requirement::NotIn(k, vs) => labels.get(k).is_none_or(|v| !vs.contains(v)),
                Requirement::Exists(k) => labels.contains_key(k),
                Requirement::DoesNotExist(k) => !labels.contains_key(k),
            })
    }
}
