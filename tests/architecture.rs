//! The import structure of `src/`, checked: no circle of imports between files anywhere, and in
//! `src/proxy` no import from a lower stage to a higher one (the stages of `src/proxy/mod.rs`).
//!
//! A file imports another when it names (in a `use` or in a path) an item that the other file
//! defines or re-exports: `crate::a::b::Item` is an import of the file of the longest module
//! prefix, `a/b.rs` (or `a/b/mod.rs`). A module file naming its own submodules is not an
//! import: the module tree, which `mod` declares, goes down by itself; what counts is a
//! submodule reaching back up to its parent's items, and files reaching across. Test modules
//! (`#[cfg(test)] mod ...`) are left out: tests may reach anywhere.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use syn::visit::Visit;

/// `src/proxy`'s stages, top to bottom. A file may import files of its own stage or of a
/// lower one. Files of `src/proxy` not listed are ground, the lowest stage.
const PROXY_STAGES: &[(&str, &str)] = &[
    ("proxy", "the Proxy facade (proxy/mod.rs)"),
    ("proxy::accept", "accept"),
    ("proxy::downstream", "downstream"),
    ("proxy::phase", "phase"),
    ("proxy::policy", "policy"),
    ("proxy::health", "health"),
    ("proxy::exchange", "exchange"),
    ("proxy::upstream", "upstream"),
    ("proxy::config", "config"),
    ("proxy::observe", "observe"),
];

type Module = Vec<String>;

/// One source file: its module path and what it imports.
struct File {
    path: PathBuf,
    module: Module,
}

#[test]
fn no_file_imports_in_a_circle_and_proxy_stages_only_import_downwards() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let files = modules(&root);
    let by_module: BTreeMap<&Module, usize> = files
        .iter()
        .enumerate()
        .map(|(i, f)| (&f.module, i))
        .collect();
    assert!(
        by_module.len() > 50,
        "the module tree was not read: {} files",
        by_module.len()
    );
    let mut edges: Vec<BTreeMap<usize, BTreeSet<String>>> = vec![BTreeMap::new(); files.len()];
    for (i, file) in files.iter().enumerate() {
        let text = std::fs::read_to_string(&file.path).unwrap();
        let ast = syn::parse_file(&text).unwrap_or_else(|e| panic!("{}: {e}", file.path.display()));
        let mut paths = Paths::default();
        paths.visit_file(&ast);
        for path in paths.found {
            let Some(target) = resolve(&file.module, &path, &by_module) else {
                continue;
            };
            let to = &files[target].module;
            let descendant = to.len() > file.module.len() && to.starts_with(&file.module);
            if target != i && !descendant {
                edges[i].entry(target).or_default().insert(path.join("::"));
            }
        }
    }
    let mut problems = Vec::new();
    for circle in circles(&edges) {
        let mut text = format!("a circle of {} files imports each other:\n", circle.len());
        for &a in &circle {
            for (b, names) in &edges[a] {
                if circle.contains(b) {
                    text += &format!(
                        "    {} -> {}: {}\n",
                        files[a].path.display(),
                        files[*b].path.display(),
                        names.iter().cloned().collect::<Vec<_>>().join(", ")
                    );
                }
            }
        }
        problems.push(text);
    }
    for (a, targets) in edges.iter().enumerate() {
        let Some(from) = stage(&files[a].module) else {
            continue;
        };
        for (b, names) in targets {
            let Some(to) = stage(&files[*b].module) else {
                continue;
            };
            if to < from {
                problems.push(format!(
                    "{} (stage {}) imports {} (stage {}, higher): {}",
                    files[a].path.display(),
                    stage_name(from),
                    files[*b].path.display(),
                    stage_name(to),
                    names.iter().cloned().collect::<Vec<_>>().join(", ")
                ));
            }
        }
    }
    assert!(problems.is_empty(), "\n{}", problems.join("\n"));
}

/// The detector finds what it must: a circle through a parent's items, and an upward stage
/// import (so a clean run above means something).
#[test]
fn the_checks_see_a_circle_and_an_upward_import() {
    let m = |s: &str| -> Module { s.split("::").map(String::from).collect() };
    let modules = [
        m("proxy::phase"),
        m("proxy::observe::record"),
        m("a"),
        m("b"),
    ];
    let by_module: BTreeMap<&Module, usize> =
        modules.iter().enumerate().map(|(i, m)| (m, i)).collect();
    let path = |s: &str| s.split("::").map(String::from).collect::<Vec<_>>();
    assert_eq!(
        resolve(&modules[1], &path("crate::proxy::phase::log"), &by_module),
        Some(0)
    );
    assert_eq!(
        resolve(&modules[2], &path("super::b::Thing"), &by_module),
        Some(3)
    );
    assert!(
        stage(&modules[1]) > stage(&modules[0]),
        "observe is below phase"
    );
    let mut edges: Vec<BTreeMap<usize, BTreeSet<String>>> = vec![BTreeMap::new(); 4];
    edges[2].insert(3, BTreeSet::new());
    edges[3].insert(2, BTreeSet::new());
    edges[0].insert(1, BTreeSet::new());
    assert_eq!(circles(&edges), vec![vec![2, 3]]);
}

/// Every module file below `root` (`lib.rs` is the crate), test modules left out.
fn modules(root: &Path) -> Vec<File> {
    let mut out = Vec::new();
    walk(root, &root.join("lib.rs"), Vec::new(), &mut out);
    out
}

fn walk(root: &Path, path: &Path, module: Module, out: &mut Vec<File>) {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let ast = syn::parse_file(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    // Submodule files sit beside `lib.rs`/`mod.rs`, else in a folder named after the file.
    let dir = match path.file_name().and_then(|n| n.to_str()) {
        Some("lib.rs" | "mod.rs") => path.parent().unwrap().to_path_buf(),
        _ => path.with_extension(""),
    };
    for item in &ast.items {
        let syn::Item::Mod(m) = item else { continue };
        if m.content.is_some() || is_test(&m.attrs) {
            continue;
        }
        let name = m.ident.to_string();
        let file = [
            dir.join(format!("{name}.rs")),
            dir.join(&name).join("mod.rs"),
        ]
        .into_iter()
        .find(|p| p.exists())
        .unwrap_or_else(|| panic!("no file for mod {name} in {}", path.display()));
        let mut child = module.clone();
        child.push(name);
        walk(root, &file, child, out);
    }
    out.push(File {
        path: path
            .strip_prefix(root.parent().unwrap())
            .unwrap()
            .to_path_buf(),
        module,
    });
}

fn is_test(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| {
        a.path().is_ident("cfg")
            && a.parse_args::<syn::Meta>()
                .is_ok_and(|m| m.path().is_ident("test"))
    })
}

/// Every path a file names that starts at `crate`, `super` or `self`: the leaves of its `use`
/// trees and the paths in its code, outside test modules.
#[derive(Default)]
struct Paths {
    found: Vec<Vec<String>>,
}

impl<'ast> Visit<'ast> for Paths {
    fn visit_item_mod(&mut self, m: &'ast syn::ItemMod) {
        if !is_test(&m.attrs) {
            syn::visit::visit_item_mod(self, m);
        }
    }

    fn visit_item_use(&mut self, u: &'ast syn::ItemUse) {
        let mut leaves = Vec::new();
        use_leaves(&u.tree, Vec::new(), &mut leaves);
        self.found
            .extend(leaves.into_iter().filter(|p| anchored(p)));
    }

    /// `pub(super)`, `pub(in crate::a)`: who may see an item, not an import.
    fn visit_visibility(&mut self, _: &'ast syn::Visibility) {}

    fn visit_path(&mut self, p: &'ast syn::Path) {
        let segments: Vec<String> = p.segments.iter().map(|s| s.ident.to_string()).collect();
        if anchored(&segments) {
            self.found.push(segments);
        }
        syn::visit::visit_path(self, p);
    }
}

fn anchored(path: &[String]) -> bool {
    matches!(
        path.first().map(String::as_str),
        Some("crate" | "super" | "self")
    )
}

fn use_leaves(tree: &syn::UseTree, prefix: Vec<String>, out: &mut Vec<Vec<String>>) {
    match tree {
        syn::UseTree::Path(p) => {
            let mut next = prefix;
            next.push(p.ident.to_string());
            use_leaves(&p.tree, next, out);
        }
        syn::UseTree::Name(n) => {
            let mut leaf = prefix;
            if n.ident != "self" {
                leaf.push(n.ident.to_string());
            }
            out.push(leaf);
        }
        syn::UseTree::Rename(r) => {
            let mut leaf = prefix;
            leaf.push(r.ident.to_string());
            out.push(leaf);
        }
        syn::UseTree::Glob(_) => out.push(prefix),
        syn::UseTree::Group(g) => {
            for t in &g.items {
                use_leaves(t, prefix.clone(), out);
            }
        }
    }
}

/// The file `path` (named from `module`) leads to: the longest module prefix that is a file.
fn resolve(module: &Module, path: &[String], files: &BTreeMap<&Module, usize>) -> Option<usize> {
    let mut full: Module = Vec::new();
    let mut rest = path.iter().peekable();
    match rest.peek().map(|s| s.as_str()) {
        Some("crate") => {
            rest.next();
        }
        Some("super") => {
            full = module.clone();
            while rest.peek().is_some_and(|s| *s == "super") {
                rest.next();
                full.pop();
            }
        }
        Some("self") => {
            rest.next();
            full = module.clone();
        }
        _ => return None,
    }
    full.extend(rest.cloned());
    (0..=full.len())
        .rev()
        .find_map(|n| files.get(&full[..n].to_vec()).copied())
}

/// The rank of `module`'s stage in `src/proxy` (0 highest), `None` outside it.
fn stage(module: &Module) -> Option<usize> {
    if module.first().map(String::as_str) != Some("proxy") {
        return None;
    }
    let name = module.join("::");
    let rank = PROXY_STAGES
        .iter()
        .enumerate()
        .skip(1)
        .find(|(_, (prefix, _))| name == *prefix || name.starts_with(&format!("{prefix}::")))
        .map(|(i, _)| i);
    Some(match rank {
        Some(i) => i,
        None if module.len() == 1 => 0,
        None => PROXY_STAGES.len(),
    })
}

fn stage_name(rank: usize) -> &'static str {
    PROXY_STAGES.get(rank).map_or("ground", |(_, name)| name)
}

/// The circles of the graph: its strongly connected components of more than one file
/// (Tarjan's algorithm), each sorted.
fn circles(edges: &[BTreeMap<usize, BTreeSet<String>>]) -> Vec<Vec<usize>> {
    struct Tarjan<'a> {
        edges: &'a [BTreeMap<usize, BTreeSet<String>>],
        index: Vec<Option<usize>>,
        low: Vec<usize>,
        stack: Vec<usize>,
        on_stack: Vec<bool>,
        next: usize,
        found: Vec<Vec<usize>>,
    }
    impl Tarjan<'_> {
        fn visit(&mut self, v: usize) {
            self.index[v] = Some(self.next);
            self.low[v] = self.next;
            self.next += 1;
            self.stack.push(v);
            self.on_stack[v] = true;
            for &w in self.edges[v].keys() {
                match self.index[w] {
                    None => {
                        self.visit(w);
                        self.low[v] = self.low[v].min(self.low[w]);
                    }
                    Some(i) if self.on_stack[w] => self.low[v] = self.low[v].min(i),
                    Some(_) => {}
                }
            }
            if Some(self.low[v]) == self.index[v] {
                let mut component = Vec::new();
                loop {
                    let w = self.stack.pop().unwrap();
                    self.on_stack[w] = false;
                    component.push(w);
                    if w == v {
                        break;
                    }
                }
                if component.len() > 1 {
                    component.sort_unstable();
                    self.found.push(component);
                }
            }
        }
    }
    let n = edges.len();
    let mut t = Tarjan {
        edges,
        index: vec![None; n],
        low: vec![0; n],
        stack: Vec::new(),
        on_stack: vec![false; n],
        next: 0,
        found: Vec::new(),
    };
    for v in 0..n {
        if t.index[v].is_none() {
            t.visit(v);
        }
    }
    t.found
}
