//! Multi-document YAML manifests (what users `kubectl apply`) -> [`Resources`]. Pure: it takes
//! text; the file source reads files and calls it, and so do the golden tests.
//!
//! Documents are separated by lines that are exactly `---`. Each document's `apiVersion` and
//! `kind` are read first through a tiny [`TypeMeta`] (by the YAML reader, which also checks the
//! document's syntax and size), then the document is read once into a [`tree::Tree`] of nodes
//! and decoded from it into the typed API struct (never into an untyped value). Kinds pier does not read
//! are returned as [`SkippedKind`]s, not errors; one of a group pier reads
//! (`gateway.networking.k8s.io`, `pier.dev`) is most likely a mistake, and
//! [`SkippedKind::mistake`] says so, with the nearest kind pier reads. Namespaced objects without a namespace land in
//! `default`, as kubectl would put them. A later object with the same key replaces an earlier
//! (the file source warns, naming both places: [`parse_manifests_placed`]).

use serde::Deserialize;
use serde::de::DeserializeOwned;

use super::api::{
    BackendTlsPolicy, ByteString, CERTIFICATES_GROUP, ClusterTrustBundle, ConfigMap, EndpointSlice,
    GATEWAY_GROUP, Gateway, GatewayClass, GatewaySpec, GrpcRoute, HttpRoute, ListenerSet, MeshSpec,
    Namespace, ObjectMeta, PierGatewaySpec, ReferenceGrant, Secret, SecurityPolicy, Service,
    TcpRoute, TlsRoute, UdpRoute, X_GATEWAY_GROUP,
};
use super::resources::{ObjectKey, Resources};
use super::spiffe::PIER_GROUP;

mod fields;
mod tree;

pub use super::field_path::{Step, UnknownField};
use fields::SchemaOf;
use tree::Tree;

/// A document of a kind pier does not read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SkippedKind {
    /// 1-based document number in the text.
    pub document: usize,
    /// 1-based line where the document starts.
    pub line: usize,
    pub api_version: String,
    pub kind: String,
}

/// Shown as `apiVersion/kind`.
impl std::fmt::Display for SkippedKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.api_version, self.kind)
    }
}

/// Why a skipped document of a group pier reads is most likely not what its author meant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KindMistake {
    /// Not a kind pier reads of the group: misspelt (`HTTPRout`, `Httproute`, `Gateways`) when
    /// `nearest` is given, else a kind the group does not have.
    Unknown {
        kind: String,
        group: &'static str,
        nearest: Option<&'static str>,
    },
    /// A kind the Gateway API defines that pier does not serve (`BackendLBPolicy`).
    NotServed { kind: String, group: &'static str },
}

/// Kinds of `gateway.networking.k8s.io` pier does not serve: named as such, never taken for a
/// misspelling of one it does.
const GATEWAY_KINDS_NOT_SERVED: &[&str] = &["BackendLBPolicy"];

/// What [`parse_manifests_placed`] read from one text.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Manifests {
    pub skipped: Vec<SkippedKind>,
    /// Every object read, in document order.
    pub objects: Vec<Placed>,
    /// Objects with fields their kind does not have, in document order.
    pub unknown: Vec<UnknownFields>,
}

/// An object with fields its kind does not have: each is ignored (as the API server prunes
/// them), and named (as `kubectl --validate=strict` does), never dropped silently.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnknownFields {
    /// As written (`HTTPRoute`).
    pub kind: String,
    /// `namespace/name`, or `name` for cluster-scoped kinds.
    pub name: String,
    /// 1-based document number in the text.
    pub document: usize,
    /// 1-based line where the document starts.
    pub line: usize,
    pub fields: Vec<UnknownField>,
}

/// `HTTPRoute shop/web: unknown field spec.rules[0].backendRef (did you mean backendRefs?),
/// ignored`.
impl std::fmt::Display for UnknownFields {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = if self.fields.len() == 1 { "" } else { "s" };
        write!(f, "{} {}: unknown field{s} ", self.kind, self.name)?;
        for (i, field) in self.fields.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{field}")?;
        }
        let them = if self.fields.len() == 1 {
            "it is"
        } else {
            "they are"
        };
        write!(f, "; {them} ignored")
    }
}

/// An object read, and where.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Placed {
    /// As written (`HTTPRoute`).
    pub kind: String,
    /// `namespace/name`, or `name` for cluster-scoped kinds.
    pub name: String,
    /// 1-based document number in the text.
    pub document: usize,
    /// 1-based line where the document starts.
    pub line: usize,
}

/// One document's outcome.
enum Parsed {
    Skipped(SkippedKind),
    Object(Placed, Option<UnknownFields>),
}

#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    /// The document is not YAML. Like [`ManifestError::Object`], the YAML error's text is in
    /// the message and it is not chained as a source.
    #[error("document {document} (line {line}): invalid YAML: {message}")]
    Syntax {
        document: usize,
        line: usize,
        message: String,
    },
    /// YAML, but not a mapping with `apiVersion` and `kind` strings (a list, a scalar).
    #[error(
        "document {document} (line {line}): not a Kubernetes object (a mapping with apiVersion \
         and kind): {message}"
    )]
    TypeMeta {
        document: usize,
        line: usize,
        message: String,
    },
    #[error("document {document} (line {line}): no kind")]
    MissingKind { document: usize, line: usize },
    #[error("document {document} (line {line}): {kind} {api_version} is not supported")]
    ApiVersion {
        document: usize,
        line: usize,
        kind: String,
        api_version: String,
    },
    /// Names the object and the field, e.g. `document 2 (line 13): invalid HTTPRoute
    /// shop/web: spec.rules[1].matches[0].path.type: unknown variant ...`, at the line in the
    /// file of the value that failed.
    #[error(
        "document {document} (line {line}): invalid {kind}{}: {}{message}",
        name.as_ref().map(|n| format!(" {n}")).unwrap_or_default(),
        FieldPath(path)
    )]
    Object {
        document: usize,
        line: usize,
        kind: String,
        /// `namespace/name` (or `name` for cluster-scoped kinds), when it could be read.
        name: Option<String>,
        /// Where in the object decoding failed (empty: at the top).
        path: Vec<Step>,
        message: String,
    },
    #[error("document {document} (line {line}): {kind} has no metadata.name")]
    MissingName {
        document: usize,
        line: usize,
        kind: String,
    },
}

/// Only what is needed to pick the typed struct.
#[derive(Deserialize)]
struct TypeMeta {
    #[serde(rename = "apiVersion", default)]
    api_version: String,
    #[serde(default)]
    kind: String,
}

/// Only the name, to say which object failed to decode.
#[derive(Default, Deserialize)]
struct NameDoc {
    #[serde(default)]
    metadata: NameMeta,
}

#[derive(Default, Deserialize)]
struct NameMeta {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    namespace: Option<String>,
}

/// A field path as messages show it: `spec.rules[0].path.type: `, nothing at the root.
struct FieldPath<'p>(&'p [Step]);

/// A Gateway without `spec.mesh` (the generated spec ignores it).
#[derive(Deserialize)]
struct GatewayDoc {
    #[serde(default)]
    metadata: ObjectMeta,
    spec: GatewaySpec,
}

/// Only the names of a Gateway's or ListenerSet's listeners and their `filters` (GEP-5224),
/// which the generated types do not read.
#[derive(Default, Deserialize)]
struct ListenerFiltersDoc {
    #[serde(default)]
    spec: ListenerFiltersSpec,
}

#[derive(Default, Deserialize)]
struct ListenerFiltersSpec {
    #[serde(default)]
    listeners: Vec<ListenerFilters>,
}

#[derive(Deserialize)]
struct ListenerFilters {
    #[serde(default)]
    name: String,
    #[serde(default)]
    filters: Option<super::api::ListenerFilters>,
}

/// Only a Gateway's `spec.addresses[].routability` (GEP-5093), which the generated type does
/// not read.
#[derive(Default, Deserialize)]
struct AddressesDoc {
    #[serde(default)]
    spec: AddressesSpecDoc,
}

#[derive(Default, Deserialize)]
struct AddressesSpecDoc {
    #[serde(default)]
    addresses: Vec<AddressDoc>,
}

#[derive(Deserialize)]
struct AddressDoc {
    #[serde(default)]
    routability: String,
}

/// Only a Gateway's `spec.mesh`.
#[derive(Deserialize)]
struct GatewayMeshDoc {
    #[serde(default)]
    spec: GatewayMeshSpecDoc,
}

#[derive(Default, Deserialize)]
struct GatewayMeshSpecDoc {
    #[serde(default)]
    mesh: Option<MeshSpec>,
}

/// The kinds pier reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    GatewayClass,
    Gateway,
    HttpRoute,
    GrpcRoute,
    TlsRoute,
    TcpRoute,
    UdpRoute,
    ListenerSet,
    ReferenceGrant,
    Namespace,
    Service,
    Secret,
    ConfigMap,
    EndpointSlice,
    ClusterTrustBundle,
    BackendTlsPolicy,
    SecurityPolicy,
    BackendTrafficPolicy,
    ClientTrafficPolicy,
    XBackendTrafficPolicy,
    Pod,
}

/// A Pod as manifests give it: pier reads its ServiceAccount (per-endpoint mesh identity) and
/// nothing else, so a Pod written with only that field is enough.
#[derive(serde::Deserialize)]
struct PodDoc {
    #[serde(default)]
    metadata: super::api::ObjectMeta,
    #[serde(default)]
    spec: Option<super::api::PodSpecIdentity>,
}

/// One `---`-separated document.
struct Doc<'t> {
    /// 1-based.
    number: usize,
    /// 1-based line of the document's first line.
    line: usize,
    text: &'t str,
}

/// Parses every document of `text` into `resources`. Returns the documents whose kind pier
/// does not read; fails on the first document that cannot be read.
pub fn parse_manifests(
    text: &str,
    resources: &mut Resources,
) -> Result<Vec<SkippedKind>, ManifestError> {
    parse_manifests_placed(text, resources).map(|m| m.skipped)
}

/// [`parse_manifests`], also saying where each object read was, so that a caller reading
/// several files can say which file's copy of an object won.
pub fn parse_manifests_placed(
    text: &str,
    resources: &mut Resources,
) -> Result<Manifests, ManifestError> {
    let mut out = Manifests::default();
    for doc in documents(text) {
        match parse_document(&doc, resources)? {
            Parsed::Skipped(s) => out.skipped.push(s),
            Parsed::Object(p, unknown) => {
                out.objects.push(p);
                out.unknown.extend(unknown);
            }
        }
    }
    Ok(out)
}

/// How many objects [`parse_manifests`] would read from `text` (documents that are not blank
/// or comments), without parsing any: cheap, for limits checked before parsing.
pub fn count_documents(text: &str) -> usize {
    documents(text).len()
}

/// Splits on lines that are exactly `---` (trailing whitespace allowed); drops documents that
/// hold only blank lines and comments.
fn documents(text: &str) -> Vec<Doc<'_>> {
    // (start byte, end byte, first line) of every document.
    let mut spans = vec![];
    let (mut start, mut start_line, mut offset) = (0, 1, 0);
    for (i, line) in text.split_inclusive('\n').enumerate() {
        if line.trim_end() == "---" {
            spans.push((start, offset, start_line));
            start = offset + line.len();
            start_line = i + 2;
        }
        offset += line.len();
    }
    spans.push((start, text.len(), start_line));
    // Numbered after dropping the empty ones: "document 1" is the first object in the file,
    // whatever `---` lines and comments come before it.
    spans
        .into_iter()
        .map(|(from, to, line)| (&text[from..to], line))
        .filter(|(t, _)| {
            !t.lines()
                .all(|l| l.trim().is_empty() || l.trim_start().starts_with('#'))
        })
        .enumerate()
        .map(|(i, (text, line))| Doc {
            number: i + 1,
            line,
            text,
        })
        .collect()
}

fn parse_document(doc: &Doc<'_>, resources: &mut Resources) -> Result<Parsed, ManifestError> {
    let tm: TypeMeta = serde_saphyr::from_str(doc.text).map_err(|e| {
        // Only on failure: is it the YAML itself, or its shape?
        match serde_saphyr::from_str::<serde::de::IgnoredAny>(doc.text) {
            Err(syntax) => ManifestError::Syntax {
                document: doc.number,
                line: doc.line_of(&syntax),
                message: plain_message(&syntax),
            },
            Ok(_) => ManifestError::TypeMeta {
                document: doc.number,
                line: doc.line_of(&e),
                message: plain_message(&e),
            },
        }
    })?;
    if tm.kind.is_empty() {
        return Err(ManifestError::MissingKind {
            document: doc.number,
            line: doc.line,
        });
    }
    let (group, version) = tm
        .api_version
        .rsplit_once('/')
        .unwrap_or(("", tm.api_version.as_str()));
    let Some(kind) = Kind::of(group, &tm.kind) else {
        return Ok(Parsed::Skipped(SkippedKind {
            document: doc.number,
            line: doc.line,
            api_version: tm.api_version.clone(),
            kind: tm.kind.clone(),
        }));
    };
    if !kind.versions().contains(&version) {
        return Err(ManifestError::ApiVersion {
            document: doc.number,
            line: doc.line,
            kind: tm.kind.clone(),
            api_version: tm.api_version.clone(),
        });
    }
    let k = tm.kind.as_str();
    // Read once; every typed pass below decodes from it.
    let tree = Tree::read(doc.text).map_err(|e| ManifestError::Syntax {
        document: doc.number,
        line: doc.line + e.line.saturating_sub(1),
        message: e.message,
    })?;
    let doc = &Parsing { doc, tree: &tree };
    // Paths of the fields the typed struct skipped.
    let mut ignored: Vec<Vec<Step>> = Vec::new();
    let ig = &mut ignored;
    let key: ObjectKey = match kind {
        Kind::GatewayClass => {
            let mut o: GatewayClass = doc.parse(k, ig)?;
            let name = doc.name(k, &mut o.metadata)?;
            resources.gateway_classes.insert(name.clone(), o);
            (String::new(), name)
        }
        Kind::Namespace => {
            let mut o: Namespace = doc.parse(k, ig)?;
            let name = doc.name(k, &mut o.metadata)?;
            resources.namespaces.insert(name.clone(), o);
            (String::new(), name)
        }
        Kind::Gateway => {
            // Two typed passes rather than `Gateway`'s `#[serde(flatten)]`: flatten buffers the
            // spec untyped, which loses error locations and reads YAML scalars by guesswork.
            // The first skips `spec.mesh` (and the type fields), the second all but it.
            let mut base_ignored = Vec::new();
            let base: GatewayDoc = doc.parse(k, &mut base_ignored)?;
            let mut mesh_ignored = Vec::new();
            let mesh: GatewayMeshDoc = doc.parse(k, &mut mesh_ignored)?;
            let key = |p: &[Step], at: usize| match p.get(at) {
                Some(Step::Key(key)) => Some(key.clone()),
                _ => None,
            };
            ignored.extend(base_ignored.into_iter().filter(|p| {
                let top = key(p, 0);
                let in_mesh =
                    top.as_deref() == Some("spec") && key(p, 1).as_deref() == Some("mesh");
                !in_mesh && !matches!(top.as_deref(), Some("apiVersion" | "kind" | "status"))
            }));
            ignored.extend(mesh_ignored.into_iter().filter(|p| {
                p.len() > 2
                    && key(p, 0).as_deref() == Some("spec")
                    && key(p, 1).as_deref() == Some("mesh")
            }));
            // And a third for `spec.addresses[].routability`.
            let addresses: AddressesDoc = doc.parse(k, &mut Vec::new())?;
            ignored.retain(|p| {
                !matches!(p.as_slice(), [Step::Key(s), Step::Key(a), Step::Index(_), Step::Key(r)]
                    if s == "spec" && a == "addresses" && r == "routability")
            });
            let mut o = Gateway {
                metadata: base.metadata,
                spec: PierGatewaySpec {
                    base: base.spec,
                    mesh: mesh.spec.mesh,
                    address_routability: addresses
                        .spec
                        .addresses
                        .into_iter()
                        .map(|a| a.routability)
                        .collect(),
                },
                status: None,
            };
            let key = doc.key(k, &mut o.metadata)?;
            doc.note_listener_filters("Gateway", &key, resources, &mut ignored)?;
            resources.gateways.insert(key.clone(), o);
            key
        }
        Kind::HttpRoute => {
            let mut o: HttpRoute = doc.parse(k, ig)?;
            let rules = o.spec.rules.iter_mut().flatten();
            doc.session_shapes(k, rules.map(|r| &mut r.session_persistence), ig)?;
            let key = doc.key(k, &mut o.metadata)?;
            resources.http_routes.insert(key.clone(), o);
            key
        }
        Kind::GrpcRoute => {
            let mut o: GrpcRoute = doc.parse(k, ig)?;
            let rules = o.spec.rules.iter_mut().flatten();
            doc.session_shapes(k, rules.map(|r| &mut r.session_persistence), ig)?;
            let key = doc.key(k, &mut o.metadata)?;
            resources.grpc_routes.insert(key.clone(), o);
            key
        }
        Kind::ListenerSet => {
            let mut o: ListenerSet = doc.parse(k, ig)?;
            let key = doc.key(k, &mut o.metadata)?;
            doc.note_listener_filters("ListenerSet", &key, resources, ig)?;
            resources.listener_sets.insert(key.clone(), o);
            key
        }
        Kind::TlsRoute => {
            let mut o: TlsRoute = doc.parse(k, ig)?;
            let key = doc.key(k, &mut o.metadata)?;
            resources.tls_routes.insert(key.clone(), o);
            key
        }
        Kind::TcpRoute => {
            let mut o: TcpRoute = doc.parse(k, ig)?;
            let key = doc.key(k, &mut o.metadata)?;
            resources.tcp_routes.insert(key.clone(), o);
            key
        }
        Kind::UdpRoute => {
            let mut o: UdpRoute = doc.parse(k, ig)?;
            let key = doc.key(k, &mut o.metadata)?;
            resources.udp_routes.insert(key.clone(), o);
            key
        }
        Kind::ReferenceGrant => {
            let mut o: ReferenceGrant = doc.parse(k, ig)?;
            let key = doc.key(k, &mut o.metadata)?;
            resources.reference_grants.insert(key.clone(), o);
            key
        }
        Kind::Service => {
            let mut o: Service = doc.parse(k, ig)?;
            let key = doc.key(k, &mut o.metadata)?;
            resources.services.insert(key.clone(), o);
            key
        }
        Kind::EndpointSlice => {
            let mut o: EndpointSlice = doc.parse(k, ig)?;
            let key = doc.key(k, &mut o.metadata)?;
            resources.endpoint_slices.insert(key.clone(), o);
            key
        }
        Kind::Secret => {
            let mut o: Secret = doc.parse(k, ig)?;
            merge_string_data(&mut o);
            let key = doc.key(k, &mut o.metadata)?;
            resources.secrets.insert(key.clone(), o);
            key
        }
        Kind::ConfigMap => {
            let mut o: ConfigMap = doc.parse(k, ig)?;
            let key = doc.key(k, &mut o.metadata)?;
            resources.config_maps.insert(key.clone(), o);
            key
        }
        Kind::ClusterTrustBundle => {
            let mut o: ClusterTrustBundle = doc.parse(k, ig)?;
            let name = doc.name(k, &mut o.metadata)?;
            resources.cluster_trust_bundles.insert(name.clone(), o);
            (String::new(), name)
        }
        Kind::BackendTlsPolicy => {
            let mut o: BackendTlsPolicy = doc.parse(k, ig)?;
            let key = doc.key(k, &mut o.metadata)?;
            resources.backend_tls_policies.insert(key.clone(), o);
            key
        }
        Kind::SecurityPolicy => {
            let mut o: SecurityPolicy = doc.parse(k, ig)?;
            let key = doc.key(k, &mut o.metadata)?;
            resources.security_policies.insert(key.clone(), o);
            key
        }
        Kind::BackendTrafficPolicy => {
            let mut o: super::api::BackendTrafficPolicy = doc.parse(k, ig)?;
            let key = doc.key(k, &mut o.metadata)?;
            resources.backend_traffic_policies.insert(key.clone(), o);
            key
        }
        Kind::ClientTrafficPolicy => {
            let mut o: super::api::ClientTrafficPolicy = doc.parse(k, ig)?;
            let key = doc.key(k, &mut o.metadata)?;
            resources.client_traffic_policies.insert(key.clone(), o);
            key
        }
        Kind::XBackendTrafficPolicy => {
            let mut o: super::api::XBackendTrafficPolicy = doc.parse(k, ig)?;
            doc.policy_session_shape(k, &mut o.spec.session_persistence, ig)?;
            let key = doc.key(k, &mut o.metadata)?;
            resources.x_backend_traffic_policies.insert(key.clone(), o);
            key
        }
        Kind::Pod => {
            // Only the ServiceAccount is read of a Pod: the rest is skipped by design, not
            // unknown.
            let mut o: PodDoc = doc.parse(k, &mut Vec::new())?;
            let identity = o.spec.take().unwrap_or_default().identity();
            let key = doc.key(k, &mut o.metadata)?;
            resources.pods.insert(key.clone(), identity);
            key
        }
    };
    // `apiVersion` and `kind` were read above (some generated types skip them).
    ignored.retain(|p| !matches!(p.as_slice(), [Step::Key(k)] if k == "apiVersion" || k == "kind"));
    let name = shown(&key);
    let unknown = kind
        .schema()
        .filter(|_| !ignored.is_empty())
        .map(|of| UnknownFields {
            kind: tm.kind.clone(),
            name: name.clone(),
            document: doc.number,
            line: doc.line,
            fields: ignored
                .into_iter()
                .map(|path| UnknownField {
                    nearest: fields::nearest(of, &path),
                    path,
                })
                .collect(),
        });
    // A later copy of the object replaces an earlier one, its unknown fields too.
    let slot = (tm.kind.clone(), key);
    match &unknown {
        Some(u) => {
            resources.unknown_fields.insert(slot, u.fields.clone());
        }
        None => {
            resources.unknown_fields.remove(&slot);
        }
    }
    Ok(Parsed::Object(
        Placed {
            kind: tm.kind,
            name,
            document: doc.number,
            line: doc.line,
        },
        unknown,
    ))
}

/// `namespace/name` as messages show an object, or `name` for a cluster-scoped one (an
/// empty namespace).
fn shown((ns, name): &ObjectKey) -> String {
    if ns.is_empty() {
        name.clone()
    } else {
        format!("{ns}/{name}")
    }
}

/// `stringData` is write-only sugar for `data`; the API server merges it (stringData wins),
/// so translation only ever reads `data`.
fn merge_string_data(s: &mut Secret) {
    let Some(string_data) = s.string_data.take() else {
        return;
    };
    let data = s.data.get_or_insert_with(Default::default);
    for (k, v) in string_data {
        data.insert(k, ByteString(v.into_bytes()));
    }
}

// === impl SkippedKind ===

impl SkippedKind {
    /// Why skipping this document is most likely a mistake: its group is one pier reads
    /// (`None` for a kind of another group, such as a Deployment, skipped as expected).
    pub fn mistake(&self) -> Option<KindMistake> {
        let group = self.api_version.rsplit_once('/').map_or("", |(g, _)| g);
        let group = [GATEWAY_GROUP, PIER_GROUP]
            .into_iter()
            .find(|g| *g == group)?;
        let kind = self.kind.clone();
        if group == GATEWAY_GROUP && GATEWAY_KINDS_NOT_SERVED.contains(&self.kind.as_str()) {
            return Some(KindMistake::NotServed { kind, group });
        }
        Some(KindMistake::Unknown {
            nearest: nearest_kind(group, &self.kind),
            kind,
            group,
        })
    }
}

// === impl KindMistake ===

/// One sentence for a log line or `pier check`: the kind, its group, and what to write.
impl std::fmt::Display for KindMistake {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Unknown {
                kind,
                group,
                nearest: Some(nearest),
            } => write!(
                f,
                "{kind} is not a kind of {group} that pier reads (did you mean {nearest}?); \
                 the object is ignored"
            ),
            Self::Unknown {
                kind,
                group,
                nearest: None,
            } => {
                let read = kinds_read(group);
                if read.is_empty() {
                    write!(
                        f,
                        "{kind} is not a kind pier reads: it reads no objects of {group}; the \
                         object is ignored"
                    )
                } else {
                    write!(
                        f,
                        "{kind} is not a kind of {group} that pier reads ({}); the object is \
                         ignored",
                        read.join(", ")
                    )
                }
            }
            Self::NotServed { kind, group } => write!(
                f,
                "pier does not serve {kind} ({group}); the object is ignored"
            ),
        }
    }
}

/// The kind pier reads of `group` nearest to `kind`, if it is close enough to be a misspelling
/// of it: at most 2 edits (1 for kinds of up to 4 letters) ignoring case, where an edit is an
/// insertion, a deletion, a substitution or a swap of two adjacent letters. The first of the
/// nearest wins a tie.
pub fn nearest_kind(group: &str, kind: &str) -> Option<&'static str> {
    let bound = if kind.chars().count() <= 4 { 1 } else { 2 };
    let kind = kind.to_ascii_lowercase();
    kinds_read(group)
        .into_iter()
        .map(|k| (edit_distance(&kind, &k.to_ascii_lowercase()), k))
        .filter(|(d, _)| *d <= bound)
        .min_by_key(|(d, _)| *d)
        .map(|(_, k)| k)
}

/// The kinds pier reads of `group`, in [`KIND_NAMES`] order.
fn kinds_read(group: &str) -> Vec<&'static str> {
    KIND_NAMES
        .iter()
        .copied()
        .filter(|k| Kind::of(group, k).is_some())
        .collect()
}

/// Edits (insert, delete, substitute, swap adjacent) turning `a` into `b`: the optimal string
/// alignment distance, over chars (strsim's, the crate clap's own suggestions use).
fn edit_distance(a: &str, b: &str) -> usize {
    strsim::osa_distance(a, b)
}

/// Every kind name [`Kind::of`] knows, for suggestions.
const KIND_NAMES: &[&str] = &[
    "GatewayClass",
    "Gateway",
    "HTTPRoute",
    "GRPCRoute",
    "TLSRoute",
    "TCPRoute",
    "UDPRoute",
    "ListenerSet",
    "ReferenceGrant",
    "BackendTLSPolicy",
    "Namespace",
    "Service",
    "Secret",
    "ConfigMap",
    "Pod",
    "EndpointSlice",
    "ClusterTrustBundle",
    "SecurityPolicy",
    "BackendTrafficPolicy",
    "ClientTrafficPolicy",
];

// === impl Kind ===

impl Kind {
    fn of(group: &str, kind: &str) -> Option<Self> {
        Some(match (group, kind) {
            (GATEWAY_GROUP, "GatewayClass") => Self::GatewayClass,
            (GATEWAY_GROUP, "Gateway") => Self::Gateway,
            (GATEWAY_GROUP, "HTTPRoute") => Self::HttpRoute,
            (GATEWAY_GROUP, "GRPCRoute") => Self::GrpcRoute,
            (GATEWAY_GROUP, "TLSRoute") => Self::TlsRoute,
            (GATEWAY_GROUP, "TCPRoute") => Self::TcpRoute,
            (GATEWAY_GROUP, "UDPRoute") => Self::UdpRoute,
            (GATEWAY_GROUP, "ListenerSet") => Self::ListenerSet,
            (GATEWAY_GROUP, "ReferenceGrant") => Self::ReferenceGrant,
            ("", "Namespace") => Self::Namespace,
            ("", "Service") => Self::Service,
            ("", "Secret") => Self::Secret,
            ("", "ConfigMap") => Self::ConfigMap,
            ("", "Pod") => Self::Pod,
            ("discovery.k8s.io", "EndpointSlice") => Self::EndpointSlice,
            (CERTIFICATES_GROUP, "ClusterTrustBundle") => Self::ClusterTrustBundle,
            (GATEWAY_GROUP, "BackendTLSPolicy") => Self::BackendTlsPolicy,
            (PIER_GROUP, "SecurityPolicy") => Self::SecurityPolicy,
            (PIER_GROUP, "BackendTrafficPolicy") => Self::BackendTrafficPolicy,
            (PIER_GROUP, "ClientTrafficPolicy") => Self::ClientTrafficPolicy,
            (X_GATEWAY_GROUP, "XBackendTrafficPolicy") => Self::XBackendTrafficPolicy,
            _ => return None,
        })
    }

    /// The kind of an object error's `kind` (as written in the document).
    fn of_name(kind: &str) -> Option<Self> {
        [
            GATEWAY_GROUP,
            "",
            "discovery.k8s.io",
            CERTIFICATES_GROUP,
            PIER_GROUP,
            X_GATEWAY_GROUP,
        ]
        .iter()
        .find_map(|g| Self::of(g, kind))
    }

    /// The schema unknown fields are looked up in (`None`: a Pod, of which pier reads one
    /// field by design).
    fn schema(self) -> Option<SchemaOf> {
        Some(match self {
            Self::GatewayClass => SchemaOf::GatewayClass,
            Self::Gateway => SchemaOf::Gateway,
            Self::HttpRoute => SchemaOf::HttpRoute,
            Self::GrpcRoute => SchemaOf::GrpcRoute,
            Self::TlsRoute => SchemaOf::TlsRoute,
            Self::TcpRoute => SchemaOf::TcpRoute,
            Self::UdpRoute => SchemaOf::UdpRoute,
            Self::ListenerSet => SchemaOf::ListenerSet,
            Self::ReferenceGrant => SchemaOf::ReferenceGrant,
            Self::BackendTlsPolicy => SchemaOf::BackendTlsPolicy,
            Self::Namespace => SchemaOf::Namespace,
            Self::Service => SchemaOf::Service,
            Self::Secret => SchemaOf::Secret,
            Self::ConfigMap => SchemaOf::ConfigMap,
            Self::EndpointSlice => SchemaOf::EndpointSlice,
            Self::ClusterTrustBundle => SchemaOf::ClusterTrustBundle,
            Self::SecurityPolicy => SchemaOf::SecurityPolicy,
            Self::BackendTrafficPolicy => SchemaOf::BackendTrafficPolicy,
            Self::ClientTrafficPolicy => SchemaOf::ClientTrafficPolicy,
            Self::XBackendTrafficPolicy => SchemaOf::XBackendTrafficPolicy,
            Self::Pod => return None,
        })
    }

    /// Whether objects of this kind live in a namespace.
    fn namespaced(self) -> bool {
        !matches!(
            self,
            Self::GatewayClass | Self::Namespace | Self::ClusterTrustBundle
        )
    }

    /// Versions read into the same typed struct. The v1beta1 Gateway API kinds are
    /// schema-compatible with v1 (ReferenceGrant is still mostly written as v1beta1).
    fn versions(self) -> &'static [&'static str] {
        match self {
            Self::GatewayClass | Self::Gateway | Self::HttpRoute | Self::ReferenceGrant => {
                &["v1", "v1beta1"]
            }
            // GRPCRoute v1alpha2 has the same spec.
            Self::GrpcRoute => &["v1", "v1alpha2"],
            // TLSRoute v1alpha2 and v1alpha3 have the fields of v1 that pier reads.
            Self::TlsRoute => &["v1", "v1alpha3", "v1alpha2"],
            // TCPRoute v1alpha2 has v1's fields (v1 since Gateway API v1.7), but up to 16 rules
            // where v1 has exactly one: only the first serves (docs/src/manifests.md).
            Self::TcpRoute => &["v1", "v1alpha2"],
            // The same for UDPRoute.
            Self::UdpRoute => &["v1", "v1alpha2"],
            Self::ListenerSet => &["v1"],
            Self::Namespace | Self::Service | Self::Secret | Self::ConfigMap | Self::Pod => &["v1"],
            Self::EndpointSlice => &["v1"],
            // v1alpha1 has the same spec (signerName, trustBundle).
            Self::ClusterTrustBundle => &["v1beta1", "v1alpha1"],
            // v1alpha3 has the same shape as v1 for what pier reads.
            Self::BackendTlsPolicy => &["v1", "v1alpha3"],
            Self::SecurityPolicy
            | Self::BackendTrafficPolicy
            | Self::ClientTrafficPolicy
            | Self::XBackendTrafficPolicy => &["v1alpha1"],
        }
    }
}

// === impl FieldPath ===

impl std::fmt::Display for FieldPath<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            [] => Ok(()),
            p => write!(f, "{}: ", super::field_path::Path(p)),
        }
    }
}

/// A YAML error's message without its location (which counts lines from the document start;
/// the caller gives the absolute line) or source snippet.
fn plain_message(e: &serde_saphyr::Error) -> String {
    struct NoLocation;
    impl serde_saphyr::Localizer for NoLocation {
        fn attach_location<'a>(
            &self,
            base: std::borrow::Cow<'a, str>,
            _: serde_saphyr::Location,
        ) -> std::borrow::Cow<'a, str> {
            base
        }
    }
    let formatter = serde_saphyr::DefaultMessageFormatter.with_localizer(&NoLocation);
    e.render_with_options(serde_saphyr::render_options! {
        formatter: &formatter,
        snippets: serde_saphyr::SnippetMode::Off,
    })
}

/// A document being decoded: its place in the text, and its tree.
struct Parsing<'d, 't> {
    doc: &'d Doc<'t>,
    tree: &'d Tree<'t>,
}

impl<'t> std::ops::Deref for Parsing<'_, 't> {
    type Target = Doc<'t>;

    fn deref(&self) -> &Doc<'t> {
        self.doc
    }
}

// === impl Parsing ===

impl Parsing<'_, '_> {
    /// Decodes the document as `T`, adding the path of every field `T` does not have to
    /// `ignored`; on failure, says where (the field's path, the value's line in the file).
    fn parse<T: DeserializeOwned>(
        &self,
        kind: &str,
        ignored: &mut Vec<Vec<Step>>,
    ) -> Result<T, ManifestError> {
        self.tree
            .decode(ignored)
            .map_err(|e| self.object_error(kind, e))
    }

    /// Folds v1.7's `sessionPersistence` fields (`cookie`, `header`) of each rule into the
    /// typed v1.6 ones (`super::session_shape`); they are no longer unknown fields.
    fn session_shapes<'r, T: serde::Serialize + DeserializeOwned + 'r>(
        &self,
        kind: &str,
        rules: impl Iterator<Item = &'r mut Option<T>>,
        ignored: &mut Vec<Vec<Step>>,
    ) -> Result<(), ManifestError> {
        let doc: super::session_shape::RoutesDoc = self.parse(kind, &mut Vec::new())?;
        for (i, (shape, sp)) in doc.shapes().into_iter().zip(rules).enumerate() {
            let Some(shape) = shape else { continue };
            let at = vec![
                Step::Key("spec".into()),
                Step::Key("rules".into()),
                Step::Index(i),
                Step::Key("sessionPersistence".into()),
            ];
            self.fold_session_shape(kind, sp, &shape, at, ignored)?;
        }
        Ok(())
    }

    /// An XBackendTrafficPolicy's `spec.sessionPersistence` in v1.7's shape (`cookie`,
    /// `header`), folded into the v1.6 fields its typed decoding read.
    fn policy_session_shape<T: serde::Serialize + DeserializeOwned>(
        &self,
        kind: &str,
        sp: &mut Option<T>,
        ignored: &mut Vec<Vec<Step>>,
    ) -> Result<(), ManifestError> {
        let doc: super::session_shape::PolicyDoc = self.parse(kind, &mut Vec::new())?;
        let Some(shape) = doc.shape() else {
            return Ok(());
        };
        let at = vec![
            Step::Key("spec".into()),
            Step::Key("sessionPersistence".into()),
        ];
        self.fold_session_shape(kind, sp, &shape, at, ignored)
    }

    /// Folds `shape` into the typed `sp` found at `at`, whose `cookie` and `header` the typed
    /// decoding skipped (no longer unknown fields).
    fn fold_session_shape<T: serde::Serialize + DeserializeOwned>(
        &self,
        kind: &str,
        sp: &mut Option<T>,
        shape: &super::session_shape::Shape,
        at: Vec<Step>,
        ignored: &mut Vec<Vec<Step>>,
    ) -> Result<(), ManifestError> {
        let path = |field: &str| {
            let mut p = at.clone();
            p.push(Step::Key(field.into()));
            p
        };
        ignored.retain(|p| !p.starts_with(&path("cookie")) && !p.starts_with(&path("header")));
        super::session_shape::apply(sp, shape).map_err(|e| ManifestError::Object {
            document: self.number,
            line: self.line,
            kind: kind.to_string(),
            name: None,
            path: path("cookie"),
            message: e.to_string(),
        })
    }

    /// Reads the `filters` of the listeners of Gateway or ListenerSet `key`: the kind's own
    /// pass skipped them (`ignored`), this one reads them and reports what it skips inside.
    fn note_listener_filters(
        &self,
        kind: &'static str,
        key: &ObjectKey,
        resources: &mut Resources,
        ignored: &mut Vec<Vec<Step>>,
    ) -> Result<(), ManifestError> {
        let in_filters = |p: &[Step]| {
            matches!(p, [Step::Key(s), Step::Key(l), Step::Index(_), Step::Key(f), ..]
                if s == "spec" && l == "listeners" && f == "filters")
        };
        ignored.retain(|p| !in_filters(p));
        let mut own = Vec::new();
        let doc: ListenerFiltersDoc = self.parse(kind, &mut own)?;
        ignored.extend(own.into_iter().filter(|p| in_filters(p)));
        for l in doc.spec.listeners {
            if let Some(filters) = l.filters {
                let at = super::resources::ListenerRef {
                    kind,
                    object: key.clone(),
                    listener: l.name,
                };
                resources.listener_filters.insert(at, Ok(filters));
            }
        }
        Ok(())
    }

    /// The error of a kind's decoder, with the object's name when it has one.
    #[cold]
    fn object_error(&self, kind: &str, error: tree::DecodeError) -> ManifestError {
        let name = self
            .tree
            .decode::<NameDoc>(&mut Vec::new())
            .ok()
            .and_then(|d| {
                let name = d.metadata.name.filter(|n| !n.is_empty())?;
                Some(match Kind::of_name(kind).filter(|k| k.namespaced()) {
                    Some(_) => {
                        let ns = d.metadata.namespace.filter(|n| !n.is_empty());
                        format!("{}/{name}", ns.as_deref().unwrap_or("default"))
                    }
                    None => name,
                })
            });
        let (path, line) = match error.node {
            Some(n) => (self.tree.path(n), self.line + self.tree.line(n) - 1),
            None => (Vec::new(), self.line),
        };
        ManifestError::Object {
            document: self.number,
            line,
            kind: kind.to_string(),
            name,
            path,
            message: error.message,
        }
    }
}

// === impl Doc ===

impl Doc<'_> {
    /// The absolute line of a parse error.
    fn line_of(&self, e: &serde_saphyr::Error) -> usize {
        let rel = e
            .location()
            .and_then(|l| usize::try_from(l.line()).ok())
            .unwrap_or(1);
        self.line + rel.saturating_sub(1)
    }

    fn name(&self, kind: &str, meta: &mut ObjectMeta) -> Result<String, ManifestError> {
        meta.name
            .clone()
            .filter(|n| !n.is_empty())
            .ok_or_else(|| ManifestError::MissingName {
                document: self.number,
                line: self.line,
                kind: kind.to_string(),
            })
    }

    /// `(namespace, name)`, defaulting the namespace to `default` in the object too.
    fn key(&self, kind: &str, meta: &mut ObjectMeta) -> Result<ObjectKey, ManifestError> {
        let name = self.name(kind, meta)?;
        let ns = match meta.namespace.as_deref() {
            None | Some("") => "default".to_string(),
            Some(ns) => ns.to_string(),
        };
        meta.namespace = Some(ns.clone());
        Ok((ns, name))
    }
}

#[cfg(test)]
mod tests;
