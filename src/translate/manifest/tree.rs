//! A YAML document read once into a tree of nodes, each with its line and its place in its
//! parent, and a small serde `Deserializer` over that tree that every kind decodes from.
//!
//! Why not decode each kind straight from the YAML reader: serde compiles a deserializer once
//! per visitor type, and the streaming reader (anchors, merges, budgets, scalar rules) is large;
//! with unknown-field and path tracking stacked on it, the manifest reader was 18 MB of the
//! 57 MB binary (`nm --size-sort`, 2026-11-30). This deserializer is a few match arms per
//! method, so each kind's copy is small; and as every node knows its parent, an error's field
//! path and line and an unknown field's path cost nothing until one is asked for.
//!
//! Scalars resolve as the YAML reader did for typed targets: a number or boolean field reads
//! quoted and plain scalars alike, a string field reads any scalar's text (`port: "80"` and
//! `name: 80` both work), and an untyped target (`IntOrString`, JSON values) gets YAML's types
//! from plain scalars (null, booleans, integers, floats) and strings from quoted ones.

use std::borrow::Cow;
use std::cell::RefCell;
use std::collections::HashMap;
use std::fmt;

use granit_parser::{Event, Parser, ScalarStyle};
use serde::de::{self, DeserializeSeed, Unexpected, Visitor};

use super::super::field_path::Step;

/// The most nodes a document may have, aliases and merges expanded (the YAML reader's own
/// default bound on nodes written).
const MAX_NODES: usize = 250_000;

/// The deepest nesting of sequences and mappings.
const MAX_DEPTH: usize = 64;

const NONE: u32 = u32::MAX;

/// A document's nodes; the root is node 0.
pub(super) struct Tree<'t> {
    nodes: Vec<Node<'t>>,
}

struct Node<'t> {
    value: Value<'t>,
    /// 1-based, in the document.
    line: u32,
    /// [`NONE`] at the root.
    parent: u32,
    at: At,
}

/// Where a node sits in its parent.
#[derive(Clone, Copy)]
enum At {
    Root,
    Index(u32),
    /// The value (or the key itself) of the entry whose key is this node.
    Key(u32),
}

enum Value<'t> {
    Scalar(Cow<'t, str>, Style),
    Seq(Vec<u32>),
    Map(Vec<(u32, u32)>),
}

/// How a scalar resolves for untyped targets.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Style {
    /// Plain, untagged: null, boolean, number or string by its text.
    Plain,
    /// Quoted, block, or tagged `!!str`: a string.
    Text,
    /// Tagged `!!null`.
    Null,
}

/// Why a document could not be read into a tree.
#[derive(Debug)]
pub(super) struct ReadError {
    pub message: String,
    /// 1-based, in the document.
    pub line: usize,
}

/// An open sequence or mapping while reading.
struct Open {
    node: u32,
    anchor: usize,
    /// A mapping's key read, its value not yet.
    key: Option<u32>,
}

// === impl Tree ===

impl<'t> Tree<'t> {
    /// Reads the first document of `text`.
    pub(super) fn read(text: &'t str) -> Result<Self, ReadError> {
        let mut tree = Tree { nodes: Vec::new() };
        let mut open: Vec<Open> = Vec::new();
        // Anchor id → its node, once the node is complete.
        let mut anchors: HashMap<usize, u32> = HashMap::new();
        let parser = Parser::new_from_str(text);
        let mut started = false;
        for next in parser {
            let (event, span) = next.map_err(|e| ReadError {
                message: e.info().to_string(),
                line: e.marker().line(),
            })?;
            let line = u32::try_from(span.start.line()).unwrap_or(u32::MAX);
            let fail = |message: String| ReadError {
                message,
                line: line as usize,
            };
            let node = match event {
                Event::DocumentStart(..) if started => break,
                Event::DocumentStart(..) => {
                    started = true;
                    continue;
                }
                Event::DocumentEnd | Event::StreamEnd => break,
                Event::Scalar(text, style, anchor, tag) => {
                    let core = tag.as_ref().and_then(|t| t.core_suffix());
                    let style = match (core, style) {
                        (Some("null"), _) => Style::Null,
                        (Some("str"), _) => Style::Text,
                        (_, ScalarStyle::Plain) => Style::Plain,
                        _ => Style::Text,
                    };
                    let n = tree.push(Value::Scalar(text, style), line).map_err(fail)?;
                    if anchor != 0 {
                        anchors.insert(anchor, n);
                    }
                    n
                }
                Event::SequenceStart(_, anchor, _) | Event::MappingStart(_, anchor, _) => {
                    if open.len() >= MAX_DEPTH {
                        return Err(fail(format!("nested deeper than {MAX_DEPTH} levels")));
                    }
                    let value = match event {
                        Event::SequenceStart(..) => Value::Seq(Vec::new()),
                        _ => Value::Map(Vec::new()),
                    };
                    let n = tree.push(value, line).map_err(fail)?;
                    tree.place(&mut open, n);
                    open.push(Open {
                        node: n,
                        anchor,
                        key: None,
                    });
                    continue;
                }
                Event::SequenceEnd | Event::MappingEnd => {
                    let Some(done) = open.pop() else {
                        return Err(fail("a collection closed that was not open".into()));
                    };
                    if matches!(tree.nodes[done.node as usize].value, Value::Map(_)) {
                        tree.merge(done.node).map_err(fail)?;
                    }
                    if done.anchor != 0 {
                        anchors.insert(done.anchor, done.node);
                    }
                    continue;
                }
                Event::Alias(id) => {
                    let Some(&source) = anchors.get(&id) else {
                        return Err(fail("an alias to an anchor not defined before it".into()));
                    };
                    tree.copy(source, NONE, At::Root).map_err(fail)?
                }
                Event::StreamStart | Event::Comment(..) | Event::Nothing => continue,
            };
            if !tree.place(&mut open, node) {
                // A scalar or alias document: the root is complete.
                break;
            }
        }
        if tree.nodes.is_empty() {
            // An empty document is null.
            tree.push(Value::Scalar(Cow::Borrowed(""), Style::Plain), 1)
                .map_err(|message| ReadError { message, line: 1 })?;
        }
        Ok(tree)
    }

    fn push(&mut self, value: Value<'t>, line: u32) -> Result<u32, String> {
        if self.nodes.len() >= MAX_NODES {
            return Err(format!(
                "more than {MAX_NODES} nodes (aliases and merge keys expanded)"
            ));
        }
        let n = self.nodes.len() as u32;
        self.nodes.push(Node {
            value,
            line,
            parent: NONE,
            at: At::Root,
        });
        Ok(n)
    }

    /// Puts a complete (or just opened) node in the innermost open collection; false at the
    /// top level.
    fn place(&mut self, open: &mut [Open], n: u32) -> bool {
        let Some(top) = open.last_mut() else {
            return false;
        };
        let parent = top.node;
        let at = match &mut self.nodes[parent as usize].value {
            Value::Seq(items) => {
                items.push(n);
                At::Index(items.len() as u32 - 1)
            }
            Value::Map(entries) => match top.key.take() {
                None => {
                    top.key = Some(n);
                    At::Key(n)
                }
                Some(k) => {
                    entries.push((k, n));
                    At::Key(k)
                }
            },
            Value::Scalar(..) => unreachable!("only collections are open"),
        };
        let node = &mut self.nodes[n as usize];
        node.parent = parent;
        node.at = at;
        true
    }

    /// A deep copy of `source` (an alias's target, a merged entry) under `parent` at `at`.
    fn copy(&mut self, source: u32, parent: u32, at: At) -> Result<u32, String> {
        let line = self.nodes[source as usize].line;
        let value = match &self.nodes[source as usize].value {
            Value::Scalar(text, style) => Value::Scalar(text.clone(), *style),
            Value::Seq(_) => Value::Seq(Vec::new()),
            Value::Map(_) => Value::Map(Vec::new()),
        };
        let n = self.push(value, line)?;
        self.nodes[n as usize].parent = parent;
        self.nodes[n as usize].at = at;
        match &self.nodes[source as usize].value {
            Value::Scalar(..) => {}
            Value::Seq(items) => {
                let items = items.clone();
                let mut copied = Vec::with_capacity(items.len());
                for (i, item) in items.into_iter().enumerate() {
                    copied.push(self.copy(item, n, At::Index(i as u32))?);
                }
                self.nodes[n as usize].value = Value::Seq(copied);
            }
            Value::Map(entries) => {
                let entries = entries.clone();
                let mut copied = Vec::with_capacity(entries.len());
                for (k, v) in entries {
                    let key = self.copy(k, n, At::Root)?;
                    self.nodes[key as usize].at = At::Key(key);
                    copied.push((key, self.copy(v, n, At::Key(key))?));
                }
                self.nodes[n as usize].value = Value::Map(copied);
            }
        }
        Ok(n)
    }

    /// Expands the merge keys (`<<: *base`, `<<: [*a, *b]`) of a complete mapping: the merged
    /// mappings' entries whose keys the mapping does not have, the first merged mapping first.
    fn merge(&mut self, map: u32) -> Result<(), String> {
        let Value::Map(entries) = &self.nodes[map as usize].value else {
            return Ok(());
        };
        if !entries.iter().any(|&(k, _)| self.is_merge_key(k)) {
            return Ok(());
        }
        let entries = entries.clone();
        let mut kept: Vec<(u32, u32)> = Vec::new();
        let mut sources: Vec<u32> = Vec::new();
        for (k, v) in entries {
            if !self.is_merge_key(k) {
                kept.push((k, v));
                continue;
            }
            match &self.nodes[v as usize].value {
                Value::Map(_) => sources.push(v),
                Value::Seq(items) => {
                    for &item in items {
                        if !matches!(self.nodes[item as usize].value, Value::Map(_)) {
                            return Err("a merge key (<<) takes mappings only".into());
                        }
                        sources.push(item);
                    }
                }
                Value::Scalar(..) => return Err("a merge key (<<) takes mappings only".into()),
            }
        }
        for source in sources {
            let Value::Map(merged) = &self.nodes[source as usize].value else {
                continue;
            };
            for (k, v) in merged.clone() {
                if kept.iter().any(|&(have, _)| self.same_key(have, k)) {
                    continue;
                }
                let key = self.copy(k, map, At::Root)?;
                self.nodes[key as usize].at = At::Key(key);
                let value = self.copy(v, map, At::Key(key))?;
                kept.push((key, value));
            }
        }
        self.nodes[map as usize].value = Value::Map(kept);
        Ok(())
    }

    fn is_merge_key(&self, k: u32) -> bool {
        matches!(&self.nodes[k as usize].value, Value::Scalar(t, Style::Plain) if t == "<<")
    }

    fn same_key(&self, a: u32, b: u32) -> bool {
        match (&self.nodes[a as usize].value, &self.nodes[b as usize].value) {
            (Value::Scalar(x, _), Value::Scalar(y, _)) => x == y,
            _ => false,
        }
    }

    /// The field path of node `n`, as kubectl writes it once displayed.
    pub(super) fn path(&self, mut n: u32) -> Vec<Step> {
        let mut steps = Vec::new();
        while n != NONE {
            let node = &self.nodes[n as usize];
            match node.at {
                At::Root => {}
                At::Index(i) => steps.push(Step::Index(i as usize)),
                At::Key(k) => steps.push(Step::Key(match &self.nodes[k as usize].value {
                    Value::Scalar(t, _) => t.to_string(),
                    _ => "?".to_string(),
                })),
            }
            n = node.parent;
        }
        steps.reverse();
        steps
    }

    /// The 1-based line of node `n` in the document.
    pub(super) fn line(&self, n: u32) -> usize {
        self.nodes[n as usize].line as usize
    }

    /// Decodes the document as `T`; every field `T` does not have (a value it skipped) is
    /// added to `ignored` by its path.
    pub(super) fn decode<T: de::DeserializeOwned>(
        &self,
        ignored: &mut Vec<Vec<Step>>,
    ) -> Result<T, DecodeError> {
        let skipped = RefCell::new(std::mem::take(ignored));
        let out = T::deserialize(De {
            tree: self,
            n: 0,
            skipped: &skipped,
        });
        *ignored = skipped.into_inner();
        out
    }
}

// === the deserializer ===

/// A decoding error: its message and the node it happened at (the innermost one).
#[derive(Debug)]
pub(super) struct DecodeError {
    pub message: String,
    pub node: Option<u32>,
}

impl DecodeError {
    fn near(mut self, n: u32) -> Self {
        self.node.get_or_insert(n);
        self
    }
}

/// Names node `n` in an error that names none yet.
fn near(n: u32) -> impl FnOnce(DecodeError) -> DecodeError {
    move |e| e.near(n)
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for DecodeError {}

impl de::Error for DecodeError {
    #[cold]
    fn custom<M: fmt::Display>(msg: M) -> Self {
        DecodeError {
            message: msg.to_string(),
            node: None,
        }
    }
}

/// One node, to decode.
#[derive(Clone, Copy)]
struct De<'a, 't> {
    tree: &'a Tree<'t>,
    n: u32,
    skipped: &'a RefCell<Vec<Vec<Step>>>,
}

impl<'a, 't> De<'a, 't> {
    fn value(&self) -> &'a Value<'t> {
        &self.tree.nodes[self.n as usize].value
    }

    fn at(&self, n: u32) -> Self {
        De { n, ..*self }
    }

    /// The node as null (plain `null`, `~`, empty; or tagged `!!null`).
    fn is_null(&self) -> bool {
        match self.value() {
            Value::Scalar(_, Style::Null) => true,
            Value::Scalar(t, Style::Plain) => is_null(t),
            _ => false,
        }
    }

    fn unexpected(&self) -> Unexpected<'a> {
        match self.value() {
            Value::Scalar(t, Style::Plain) if is_null(t) => Unexpected::Other("null"),
            Value::Scalar(_, Style::Null) => Unexpected::Other("null"),
            Value::Scalar(t, _) => Unexpected::Str(t),
            Value::Seq(_) => Unexpected::Seq,
            Value::Map(_) => Unexpected::Map,
        }
    }

    fn mismatch<V: Visitor<'a>, R>(&self, visitor: &V) -> Result<R, DecodeError> {
        Err(<DecodeError as de::Error>::invalid_type(self.unexpected(), visitor).near(self.n))
    }

    fn seq<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value, DecodeError> {
        let items: &'a [u32] = match self.value() {
            Value::Seq(items) => items,
            _ if self.is_null() => &[],
            _ => return self.mismatch(&visitor),
        };
        visitor
            .visit_seq(Items {
                de: self,
                items: items.iter(),
            })
            .map_err(near(self.n))
    }

    fn map<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value, DecodeError> {
        let entries: &'a [(u32, u32)] = match self.value() {
            Value::Map(entries) => entries,
            _ if self.is_null() => &[],
            _ => return self.mismatch(&visitor),
        };
        visitor
            .visit_map(Entries {
                de: self,
                entries: entries.iter(),
                value: None,
            })
            .map_err(near(self.n))
    }

    /// Integers and floats, from a scalar of any style.
    fn number<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value, DecodeError> {
        let out = match self.value() {
            Value::Scalar(t, _) => match parse_int(t) {
                Some(i) => match i64::try_from(i) {
                    Ok(v) => visitor.visit_i64(v),
                    Err(_) => match u64::try_from(i) {
                        Ok(v) => visitor.visit_u64(v),
                        Err(_) => visitor.visit_i128(i),
                    },
                },
                None => match parse_float(t) {
                    Some(f) => visitor.visit_f64(f),
                    None => return self.mismatch(&visitor),
                },
            },
            _ => return self.mismatch(&visitor),
        };
        out.map_err(near(self.n))
    }

    fn text<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value, DecodeError> {
        match self.value() {
            Value::Scalar(_, _) if self.is_null() => self.mismatch(&visitor),
            Value::Scalar(t, _) => visitor.visit_borrowed_str(t).map_err(near(self.n)),
            _ => self.mismatch(&visitor),
        }
    }
}

impl<'a> de::Deserializer<'a> for De<'a, '_> {
    type Error = DecodeError;

    fn deserialize_any<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value, DecodeError> {
        let out = match self.value() {
            Value::Seq(_) => return self.seq(visitor),
            Value::Map(_) => return self.map(visitor),
            Value::Scalar(_, Style::Null) => visitor.visit_unit(),
            Value::Scalar(t, Style::Text) => visitor.visit_borrowed_str(t),
            Value::Scalar(t, Style::Plain) => {
                if is_null(t) {
                    visitor.visit_unit()
                } else if let Some(b) = parse_bool(t) {
                    visitor.visit_bool(b)
                } else if let Some(i) = parse_int(t) {
                    match (i64::try_from(i), u64::try_from(i)) {
                        (_, Ok(u)) => visitor.visit_u64(u),
                        (Ok(v), _) => visitor.visit_i64(v),
                        _ => visitor.visit_borrowed_str(t),
                    }
                } else if let Some(f) = parse_float(t).filter(|f| f.is_finite()) {
                    visitor.visit_f64(f)
                } else {
                    visitor.visit_borrowed_str(t)
                }
            }
        };
        out.map_err(near(self.n))
    }

    fn deserialize_bool<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value, DecodeError> {
        match self.value() {
            Value::Scalar(t, _) => match parse_bool(t) {
                Some(b) => visitor.visit_bool(b).map_err(near(self.n)),
                None => self.mismatch(&visitor),
            },
            _ => self.mismatch(&visitor),
        }
    }

    fn deserialize_i8<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value, DecodeError> {
        self.number(visitor)
    }
    fn deserialize_i16<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value, DecodeError> {
        self.number(visitor)
    }
    fn deserialize_i32<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value, DecodeError> {
        self.number(visitor)
    }
    fn deserialize_i64<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value, DecodeError> {
        self.number(visitor)
    }
    fn deserialize_i128<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value, DecodeError> {
        self.number(visitor)
    }
    fn deserialize_u8<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value, DecodeError> {
        self.number(visitor)
    }
    fn deserialize_u16<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value, DecodeError> {
        self.number(visitor)
    }
    fn deserialize_u32<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value, DecodeError> {
        self.number(visitor)
    }
    fn deserialize_u64<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value, DecodeError> {
        self.number(visitor)
    }
    fn deserialize_u128<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value, DecodeError> {
        self.number(visitor)
    }
    fn deserialize_f32<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value, DecodeError> {
        self.number(visitor)
    }
    fn deserialize_f64<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value, DecodeError> {
        self.number(visitor)
    }

    fn deserialize_char<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value, DecodeError> {
        self.text(visitor)
    }
    fn deserialize_str<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value, DecodeError> {
        self.text(visitor)
    }
    fn deserialize_string<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value, DecodeError> {
        self.text(visitor)
    }
    fn deserialize_bytes<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value, DecodeError> {
        self.text(visitor)
    }
    fn deserialize_byte_buf<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value, DecodeError> {
        self.text(visitor)
    }

    fn deserialize_option<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value, DecodeError> {
        let out = if self.is_null() {
            visitor.visit_none()
        } else {
            visitor.visit_some(self)
        };
        out.map_err(near(self.n))
    }

    fn deserialize_unit<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value, DecodeError> {
        if self.is_null() {
            visitor.visit_unit().map_err(near(self.n))
        } else {
            self.mismatch(&visitor)
        }
    }

    fn deserialize_unit_struct<V: Visitor<'a>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, DecodeError> {
        self.deserialize_unit(visitor)
    }

    fn deserialize_newtype_struct<V: Visitor<'a>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, DecodeError> {
        visitor.visit_newtype_struct(self).map_err(near(self.n))
    }

    fn deserialize_seq<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value, DecodeError> {
        self.seq(visitor)
    }

    fn deserialize_tuple<V: Visitor<'a>>(
        self,
        _len: usize,
        visitor: V,
    ) -> Result<V::Value, DecodeError> {
        self.seq(visitor)
    }

    fn deserialize_tuple_struct<V: Visitor<'a>>(
        self,
        _name: &'static str,
        _len: usize,
        visitor: V,
    ) -> Result<V::Value, DecodeError> {
        self.seq(visitor)
    }

    fn deserialize_map<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value, DecodeError> {
        self.map(visitor)
    }

    fn deserialize_struct<V: Visitor<'a>>(
        self,
        _name: &'static str,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, DecodeError> {
        self.map(visitor)
    }

    fn deserialize_enum<V: Visitor<'a>>(
        self,
        _name: &'static str,
        _variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, DecodeError> {
        let out = match self.value() {
            // A unit variant by its name.
            Value::Scalar(..) => visitor.visit_enum(Variant {
                name: self,
                value: None,
            }),
            // `{Variant: value}`.
            Value::Map(entries) if entries.len() == 1 => visitor.visit_enum(Variant {
                name: self.at(entries[0].0),
                value: Some(self.at(entries[0].1)),
            }),
            _ => return self.mismatch(&visitor),
        };
        out.map_err(near(self.n))
    }

    fn deserialize_identifier<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value, DecodeError> {
        self.text(visitor)
    }

    /// A value the target does not have a field for: noted by its path.
    fn deserialize_ignored_any<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value, DecodeError> {
        self.skipped.borrow_mut().push(self.tree.path(self.n));
        visitor.visit_unit()
    }
}

/// A sequence's items.
struct Items<'a, 't> {
    de: De<'a, 't>,
    items: std::slice::Iter<'a, u32>,
}

impl<'a> de::SeqAccess<'a> for Items<'a, '_> {
    type Error = DecodeError;

    fn next_element_seed<S: DeserializeSeed<'a>>(
        &mut self,
        seed: S,
    ) -> Result<Option<S::Value>, DecodeError> {
        match self.items.next() {
            Some(&n) => seed.deserialize(self.de.at(n)).map(Some),
            None => Ok(None),
        }
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.items.len())
    }
}

/// A mapping's entries.
struct Entries<'a, 't> {
    de: De<'a, 't>,
    entries: std::slice::Iter<'a, (u32, u32)>,
    value: Option<u32>,
}

impl<'a> de::MapAccess<'a> for Entries<'a, '_> {
    type Error = DecodeError;

    fn next_key_seed<S: DeserializeSeed<'a>>(
        &mut self,
        seed: S,
    ) -> Result<Option<S::Value>, DecodeError> {
        match self.entries.next() {
            Some(&(k, v)) => {
                self.value = Some(v);
                seed.deserialize(self.de.at(k)).map(Some).map_err(near(k))
            }
            None => Ok(None),
        }
    }

    fn next_value_seed<S: DeserializeSeed<'a>>(
        &mut self,
        seed: S,
    ) -> Result<S::Value, DecodeError> {
        let v = self.value.take().expect("a value follows its key");
        seed.deserialize(self.de.at(v))
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.entries.len())
    }
}

/// An enum's variant: its name, and its value for `{Variant: value}`.
struct Variant<'a, 't> {
    name: De<'a, 't>,
    value: Option<De<'a, 't>>,
}

impl<'a, 't> de::EnumAccess<'a> for Variant<'a, 't> {
    type Error = DecodeError;
    type Variant = Self;

    fn variant_seed<S: DeserializeSeed<'a>>(
        self,
        seed: S,
    ) -> Result<(S::Value, Self), DecodeError> {
        let v = seed.deserialize(self.name)?;
        Ok((v, self))
    }
}

impl<'a> de::VariantAccess<'a> for Variant<'a, '_> {
    type Error = DecodeError;

    fn unit_variant(self) -> Result<(), DecodeError> {
        match self.value {
            None => Ok(()),
            Some(v) if v.is_null() => Ok(()),
            Some(v) => Err(<DecodeError as de::Error>::invalid_type(
                v.unexpected(),
                &"a unit variant",
            )
            .near(v.n)),
        }
    }

    fn newtype_variant_seed<S: DeserializeSeed<'a>>(
        self,
        seed: S,
    ) -> Result<S::Value, DecodeError> {
        match self.value {
            Some(v) => seed.deserialize(v),
            None => Err(<DecodeError as de::Error>::invalid_type(
                Unexpected::UnitVariant,
                &"a newtype variant",
            )
            .near(self.name.n)),
        }
    }

    fn tuple_variant<V: Visitor<'a>>(
        self,
        _len: usize,
        visitor: V,
    ) -> Result<V::Value, DecodeError> {
        match self.value {
            Some(v) => v.seq(visitor),
            None => Err(<DecodeError as de::Error>::invalid_type(
                Unexpected::UnitVariant,
                &"a tuple variant",
            )
            .near(self.name.n)),
        }
    }

    fn struct_variant<V: Visitor<'a>>(
        self,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, DecodeError> {
        match self.value {
            Some(v) => v.map(visitor),
            None => Err(<DecodeError as de::Error>::invalid_type(
                Unexpected::UnitVariant,
                &"a struct variant",
            )
            .near(self.name.n)),
        }
    }
}

// === scalars ===

/// YAML's null: `null`, `Null`, `NULL`, `~` or nothing.
fn is_null(t: &str) -> bool {
    matches!(t, "" | "~" | "null" | "Null" | "NULL")
}

/// YAML 1.1's booleans (as the reader accepted them): true/false, yes/no, on/off, y/n, in
/// their lower, capitalised and upper spellings.
fn parse_bool(t: &str) -> Option<bool> {
    match t.trim() {
        "true" | "True" | "TRUE" | "yes" | "Yes" | "YES" | "on" | "On" | "ON" | "y" | "Y" => {
            Some(true)
        }
        "false" | "False" | "FALSE" | "no" | "No" | "NO" | "off" | "Off" | "OFF" | "n" | "N" => {
            Some(false)
        }
        _ => None,
    }
}

/// Decimal (optional sign, `_` between digits), `0x` hexadecimal, `0o` octal, `0b` binary.
fn parse_int(t: &str) -> Option<i128> {
    let t = t.trim();
    let (negative, digits) = match t.as_bytes().first()? {
        b'-' => (true, &t[1..]),
        b'+' => (false, &t[1..]),
        _ => (false, t),
    };
    let (radix, digits) = if let Some(d) = digits.strip_prefix("0x") {
        (16, d)
    } else if let Some(d) = digits.strip_prefix("0o") {
        (8, d)
    } else if let Some(d) = digits.strip_prefix("0b") {
        (2, d)
    } else {
        (10, digits)
    };
    if digits.is_empty()
        || digits.starts_with('_')
        || digits.ends_with('_')
        || !digits
            .bytes()
            .all(|b| b == b'_' || (b as char).is_digit(radix))
    {
        return None;
    }
    let mut value: i128 = 0;
    for b in digits.bytes().filter(|&b| b != b'_') {
        let d = (b as char).to_digit(radix)? as i128;
        value = value.checked_mul(radix as i128)?.checked_add(d)?;
    }
    Some(if negative { -value } else { value })
}

/// YAML 1.2's floats: decimal with a point or an exponent, `.inf`, `-.inf`, `.nan`.
fn parse_float(t: &str) -> Option<f64> {
    let t = t.trim();
    match t {
        ".inf" | ".Inf" | ".INF" | "+.inf" | "+.Inf" | "+.INF" => return Some(f64::INFINITY),
        "-.inf" | "-.Inf" | "-.INF" => return Some(f64::NEG_INFINITY),
        ".nan" | ".NaN" | ".NAN" => return Some(f64::NAN),
        _ => {}
    }
    // Rust's parser also reads `inf`, `nan` and `infinity`: not YAML numbers.
    let body = t.trim_start_matches(['+', '-']);
    if !body.starts_with(|c: char| c.is_ascii_digit() || c == '.')
        || !body.bytes().any(|b| b.is_ascii_digit())
    {
        return None;
    }
    t.parse().ok()
}

#[cfg(test)]
mod tests;
