//! The import graph of a library crate, read from its sources with `syn`: which file uses an
//! item of which other file, and the circles between files and between top-level modules that
//! the crates' layering tests refuse (docs/ARCHITECTURE.md, "Gateway layers", "Registry layers",
//! "Control layers").
//!
//! What counts as a use of another file, outside `#[cfg(test)]` items (tests may build fixtures
//! from any layer):
//! - every `use` of the crate's own items, grouped or not (`use crate::{a::{b, c}, d}`,
//!   `super::`, `self::`, a child module's name), at module level or inside a function body;
//!   a `pub use` (a re-export) only where the file itself names what it re-exports;
//! - every path in the code that starts with `crate::`, `super::`, `self::`, a child module's
//!   name or an imported name (`crate::x::y()`, `keys::parse(..)`), in macro arguments too.
//!
//! A path is followed to the file that *defines* the item, through re-exports (`pub use`) and
//! glob imports, so a `mod.rs` that only re-exports its children is no step of a circle. A path
//! that ends at a module (`use super::keys;`) counts by the paths that go through it.
//!
//! ```no_run
//! let graph = portico_testkit::source_graph::SourceGraph::of_crate(env!("CARGO_MANIFEST_DIR"));
//! let circles = graph.file_circles();
//! assert!(circles.is_empty(), "{}", portico_testkit::source_graph::describe(&circles));
//! ```
#![allow(clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt;
use std::path::{Path, PathBuf};

use proc_macro2::{TokenStream, TokenTree};
use syn::visit::Visit;

/// One use of another file: where it is written and what it names.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Evidence {
    /// The line in the using file.
    pub line: usize,
    /// The path as written (one leaf of a grouped `use`), e.g. `crate::edge::keys::KeyRing`.
    pub path: String,
}

/// One step of a circle: `from` uses `to`, shown by `evidence`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Step {
    /// The using file (relative to `src/`), or module.
    pub from: String,
    /// The used file, or module.
    pub to: String,
    /// The file that holds the use (for a file step, `from` itself).
    pub file: String,
    /// The first use found.
    pub evidence: Evidence,
}

/// A circle: each step's `to` is the next step's `from`, and the last step returns to the first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Circle {
    /// The steps in order.
    pub steps: Vec<Step>,
}

impl fmt::Display for Circle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = self.steps.iter().map(|s| s.from.as_str()).collect();
        let first = names.first().copied().unwrap_or_default();
        writeln!(f, "{} → {first}", names.join(" → "))?;
        for s in &self.steps {
            writeln!(
                f,
                "  {} → {}: {}:{} uses {}",
                s.from, s.to, s.file, s.evidence.line, s.evidence.path
            )?;
        }
        Ok(())
    }
}

/// All `circles`, one after the other (for an assertion message).
pub fn describe(circles: &[Circle]) -> String {
    circles.iter().map(|c| c.to_string()).collect()
}

/// The uses behind one module's use of another: (using file, used file, the use).
pub type ModuleUses = Vec<(String, String, Evidence)>;

/// The import graph of one library crate.
#[derive(Debug)]
pub struct SourceGraph {
    /// Files relative to `src/` (`lib.rs`, `edge/keys.rs`), in the order they were read.
    files: Vec<String>,
    /// The top-level module of each file (`lib` for the crate root).
    top: Vec<String>,
    /// `(from, to)` file indexes → the uses, in order.
    edges: BTreeMap<(usize, usize), BTreeSet<Evidence>>,
}

type ModId = usize;

#[derive(Debug)]
struct Module {
    path: Vec<String>,
    parent: Option<ModId>,
    file: usize,
    /// Where the files of its `mod x;` children are.
    child_dir: PathBuf,
    children: BTreeMap<String, ModId>,
    defined: BTreeSet<String>,
    uses: Vec<UseEntry>,
}

#[derive(Debug, Clone)]
struct UseEntry {
    /// The name it brings in (`None` for a glob, `_` for `as _`).
    name: Option<String>,
    /// The path as written, one segment each (`super`, `keys`, `KeyRing`).
    written: Vec<String>,
    public: bool,
    line: usize,
}

#[derive(Debug)]
struct RawPath {
    module: ModId,
    segments: Vec<String>,
    line: usize,
}

struct Builder<'a> {
    load: &'a dyn Fn(&Path) -> Option<String>,
    files: Vec<String>,
    modules: Vec<Module>,
    paths: Vec<RawPath>,
    /// Per file: every identifier its code names (first path segments, macro tokens).
    named: Vec<BTreeSet<String>>,
    /// Per file: the module it is the file of.
    file_module: Vec<ModId>,
}

impl SourceGraph {
    /// The graph of the library crate at `manifest_dir` (its `src/lib.rs` and the modules it
    /// declares). Panics if a file cannot be read or parsed.
    pub fn of_crate(manifest_dir: impl AsRef<Path>) -> SourceGraph {
        let src = manifest_dir.as_ref().join("src");
        SourceGraph::build(&|rel: &Path| std::fs::read_to_string(src.join(rel)).ok())
    }

    /// The graph of sources given in memory as (path relative to `src/`, text); `lib.rs` is
    /// the root. For the tests of the reader itself.
    pub fn of_sources(sources: &[(&str, &str)]) -> SourceGraph {
        let map: BTreeMap<PathBuf, String> = sources
            .iter()
            .map(|(p, t)| (PathBuf::from(p), (*t).to_owned()))
            .collect();
        SourceGraph::build(&|rel: &Path| map.get(rel).cloned())
    }

    fn build(load: &dyn Fn(&Path) -> Option<String>) -> SourceGraph {
        let mut b = Builder {
            load,
            files: Vec::new(),
            modules: Vec::new(),
            paths: Vec::new(),
            named: Vec::new(),
            file_module: Vec::new(),
        };
        b.read_file(Path::new("lib.rs"), Vec::new(), None, PathBuf::new());
        b.finish()
    }

    /// The files read, relative to `src/`.
    pub fn files(&self) -> &[String] {
        &self.files
    }

    /// The top-level module of `file` (`lib` for `lib.rs`).
    pub fn module_of(&self, file: &str) -> Option<&str> {
        let i = self.files.iter().position(|f| f == file)?;
        Some(&self.top[i])
    }

    /// Every use of one file by another: (from, to, the uses).
    pub fn file_edges(&self) -> Vec<(&str, &str, &BTreeSet<Evidence>)> {
        self.edges
            .iter()
            .map(|((a, b), e)| (self.files[*a].as_str(), self.files[*b].as_str(), e))
            .collect()
    }

    /// Every use of one top-level module by another: (from, to) → (using file, used file, use).
    pub fn module_edges(&self) -> BTreeMap<(String, String), ModuleUses> {
        let mut out: BTreeMap<(String, String), ModuleUses> = BTreeMap::new();
        for ((a, b), evidence) in &self.edges {
            if self.top[*a] == self.top[*b] {
                continue;
            }
            let uses = out
                .entry((self.top[*a].clone(), self.top[*b].clone()))
                .or_default();
            for e in evidence {
                uses.push((self.files[*a].clone(), self.files[*b].clone(), e.clone()));
            }
        }
        for uses in out.values_mut() {
            uses.sort();
        }
        out
    }

    /// One circle for each group of files that use each other, round or through others.
    pub fn file_circles(&self) -> Vec<Circle> {
        let n = self.files.len();
        let mut next = vec![BTreeSet::new(); n];
        for (a, b) in self.edges.keys() {
            next[*a].insert(*b);
        }
        circles(&next)
            .into_iter()
            .map(|cycle| Circle {
                steps: cycle
                    .iter()
                    .zip(cycle.iter().cycle().skip(1))
                    .map(|(a, b)| Step {
                        from: self.files[*a].clone(),
                        to: self.files[*b].clone(),
                        file: self.files[*a].clone(),
                        evidence: self.edges[&(*a, *b)]
                            .first()
                            .cloned()
                            .expect("an edge has a use"),
                    })
                    .collect(),
            })
            .collect()
    }

    /// One circle for each group of top-level modules that use each other; each step names the
    /// file that holds the use, the file it uses and the line.
    pub fn module_circles(&self) -> Vec<Circle> {
        let names: Vec<String> = self
            .top
            .iter()
            .cloned()
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        let index = |m: &str| names.iter().position(|x| x == m).expect("a module");
        let edges = self.module_edges();
        let mut next = vec![BTreeSet::new(); names.len()];
        for (a, b) in edges.keys() {
            next[index(a)].insert(index(b));
        }
        circles(&next)
            .into_iter()
            .map(|cycle| Circle {
                steps: cycle
                    .iter()
                    .zip(cycle.iter().cycle().skip(1))
                    .map(|(a, b)| {
                        let (file, to, evidence) = edges[&(names[*a].clone(), names[*b].clone())]
                            .first()
                            .cloned()
                            .expect("an edge has a use");
                        Step {
                            from: names[*a].clone(),
                            to: format!("{} ({to})", names[*b]),
                            file,
                            evidence,
                        }
                    })
                    .collect(),
            })
            .collect()
    }
}

impl SourceGraph {
    /// The uses against `layers` (each top-level module and its layer, higher above): a module
    /// may use only modules of a lower layer. Panics on a module with no layer; `lib` (the
    /// crate root) is not checked.
    pub fn layer_violations(&self, layers: &[(&str, u8)]) -> Vec<String> {
        let layer = |m: &str| {
            layers
                .iter()
                .find(|(name, _)| *name == m)
                .map(|(_, l)| *l)
                .unwrap_or_else(|| panic!("module {m} has no layer"))
        };
        for m in &self.top {
            if m != "lib" {
                layer(m);
            }
        }
        let mut wrong = Vec::new();
        for ((from, to), uses) in self.module_edges() {
            if from == "lib" || to == "lib" || layer(&to) < layer(&from) {
                continue;
            }
            let (file, used, e) = &uses[0];
            wrong.push(format!(
                "{from} (layer {}) uses {to} (layer {}): {file}:{} uses {} ({used}){}",
                layer(&from),
                layer(&to),
                e.line,
                e.path,
                if uses.len() > 1 {
                    format!(", and {} more", uses.len() - 1)
                } else {
                    String::new()
                }
            ));
        }
        wrong
    }
}

/// The layer table of a crate's `lib.rs` doc comment: its rows `//! | <layer> | <modules> |`,
/// each module named in backticks (`` [`api`] ``). Higher numbers sit above.
pub fn layers_from_doc(lib_rs: &str) -> Vec<(String, u8)> {
    let mut out = Vec::new();
    for line in lib_rs.lines() {
        let Some(row) = line.trim().strip_prefix("//! |") else {
            continue;
        };
        let mut cells = row.split('|');
        let Some(Ok(layer)) = cells.next().map(|c| c.trim().parse::<u8>()) else {
            continue;
        };
        let Some(modules) = cells.next() else {
            continue;
        };
        for (i, part) in modules.split('`').enumerate() {
            if i % 2 == 1 {
                out.push((part.to_owned(), layer));
            }
        }
    }
    out
}

/// The circles of `next`: for each use inside a strongly connected group, the shortest circle
/// through it (each circle once, shortest first), so every use that closes a circle is shown.
fn circles(next: &[BTreeSet<usize>]) -> Vec<Vec<usize>> {
    let mut found = BTreeSet::new();
    for group in strongly_connected(next) {
        let members: BTreeSet<usize> = group.iter().copied().collect();
        for &a in &group {
            for &b in next[a].iter().filter(|b| members.contains(b)) {
                if let Some(mut cycle) = shortest_path(next, &members, b, a) {
                    cycle.insert(0, a);
                    cycle.pop();
                    let min = (0..cycle.len()).min_by_key(|&i| cycle[i]).unwrap_or(0);
                    cycle.rotate_left(min);
                    found.insert((cycle.len(), cycle));
                }
            }
        }
    }
    found.into_iter().map(|(_, c)| c).collect()
}

/// The shortest path `from` → … → `to` inside `members` (both ends included).
fn shortest_path(
    next: &[BTreeSet<usize>],
    members: &BTreeSet<usize>,
    from: usize,
    to: usize,
) -> Option<Vec<usize>> {
    let mut before: BTreeMap<usize, usize> = BTreeMap::new();
    let mut queue = VecDeque::from([from]);
    let mut seen = BTreeSet::from([from]);
    while let Some(at) = queue.pop_front() {
        if at == to {
            let mut path = vec![at];
            let mut cur = at;
            while let Some(&b) = before.get(&cur) {
                path.push(b);
                cur = b;
            }
            path.reverse();
            return Some(path);
        }
        for &n in next[at].iter().filter(|n| members.contains(n)) {
            if seen.insert(n) {
                before.insert(n, at);
                queue.push_back(n);
            }
        }
    }
    None
}

/// Tarjan's strongly connected components, iteratively.
fn strongly_connected(next: &[BTreeSet<usize>]) -> Vec<Vec<usize>> {
    let n = next.len();
    let mut index = vec![usize::MAX; n];
    let mut low = vec![0; n];
    let mut on_stack = vec![false; n];
    let mut stack = Vec::new();
    let mut groups = Vec::new();
    let mut counter = 0;
    let succ: Vec<Vec<usize>> = next.iter().map(|s| s.iter().copied().collect()).collect();
    for root in 0..n {
        if index[root] != usize::MAX {
            continue;
        }
        let mut work = vec![(root, 0usize)];
        index[root] = counter;
        low[root] = counter;
        counter += 1;
        stack.push(root);
        on_stack[root] = true;
        while let Some(&mut (v, ref mut i)) = work.last_mut() {
            if *i < succ[v].len() {
                let w = succ[v][*i];
                *i += 1;
                if index[w] == usize::MAX {
                    index[w] = counter;
                    low[w] = counter;
                    counter += 1;
                    stack.push(w);
                    on_stack[w] = true;
                    work.push((w, 0));
                } else if on_stack[w] {
                    low[v] = low[v].min(index[w]);
                }
            } else {
                work.pop();
                if let Some(&(parent, _)) = work.last() {
                    low[parent] = low[parent].min(low[v]);
                }
                if low[v] == index[v] {
                    let mut group = Vec::new();
                    while let Some(w) = stack.pop() {
                        on_stack[w] = false;
                        group.push(w);
                        if w == v {
                            break;
                        }
                    }
                    group.sort_unstable();
                    groups.push(group);
                }
            }
        }
    }
    groups.sort();
    groups
}

/// Whether `attrs` make the item test-only (`#[cfg(test)]`, `#[cfg(all(test, ..))]`,
/// `#[cfg(any(test, ..))]` with nothing else that holds in a normal build is not told apart).
fn test_only(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| {
        if !a.path().is_ident("cfg") {
            return false;
        }
        let syn::Meta::List(list) = &a.meta else {
            return false;
        };
        let mut idents = Vec::new();
        flatten_idents(list.tokens.clone(), &mut idents);
        idents.iter().any(|i| i == "test") && !idents.iter().any(|i| i == "not" || i == "any")
    })
}

fn flatten_idents(tokens: TokenStream, out: &mut Vec<String>) {
    for t in tokens {
        match t {
            TokenTree::Ident(i) => out.push(i.to_string()),
            TokenTree::Group(g) => flatten_idents(g.stream(), out),
            _ => {}
        }
    }
}

fn line_of(span: proc_macro2::Span) -> usize {
    span.start().line
}

impl Builder<'_> {
    fn read_file(
        &mut self,
        rel: &Path,
        path: Vec<String>,
        parent: Option<ModId>,
        child_dir: PathBuf,
    ) -> Option<ModId> {
        let text = (self.load)(rel)?;
        let parsed = syn::parse_file(&text)
            .unwrap_or_else(|e| panic!("src/{}: cannot parse: {e}", rel.display()));
        let file = self.files.len();
        self.files.push(rel.display().to_string());
        self.named.push(BTreeSet::new());
        let id = self.new_module(path, parent, file, child_dir);
        self.file_module.push(id);
        self.read_items(id, &parsed.items);
        Some(id)
    }

    fn new_module(
        &mut self,
        path: Vec<String>,
        parent: Option<ModId>,
        file: usize,
        child_dir: PathBuf,
    ) -> ModId {
        let id = self.modules.len();
        self.modules.push(Module {
            path,
            parent,
            file,
            child_dir,
            children: BTreeMap::new(),
            defined: BTreeSet::new(),
            uses: Vec::new(),
        });
        id
    }

    fn read_items(&mut self, module: ModId, items: &[syn::Item]) {
        for item in items {
            if let syn::Item::Mod(m) = item {
                if test_only(&m.attrs) {
                    continue;
                }
                let name = m.ident.to_string();
                let mut path = self.modules[module].path.clone();
                path.push(name.clone());
                let dir = self.modules[module].child_dir.clone();
                let child = match &m.content {
                    Some((_, inner)) => {
                        let file = self.modules[module].file;
                        let id = self.new_module(path, Some(module), file, dir.join(&name));
                        self.read_items(id, inner);
                        Some(id)
                    }
                    None => {
                        let flat = dir.join(format!("{name}.rs"));
                        let nested = dir.join(&name).join("mod.rs");
                        if (self.load)(&flat).is_some() {
                            self.read_file(&flat, path, Some(module), dir.join(&name))
                        } else {
                            self.read_file(&nested, path, Some(module), dir.join(&name))
                        }
                    }
                };
                match child {
                    Some(id) => {
                        self.modules[module].children.insert(name, id);
                    }
                    None => panic!(
                        "module {} declared in src/{} has no file",
                        name, self.files[self.modules[module].file]
                    ),
                }
                continue;
            }
            if item_test_only(item) {
                continue;
            }
            if let Some(name) = defined_name(item) {
                self.modules[module].defined.insert(name);
            }
            if let syn::Item::Use(u) = item {
                let public = !matches!(u.vis, syn::Visibility::Inherited);
                self.add_use(module, &u.tree, Vec::new(), public);
                continue;
            }
            let mut reader = CodeReader {
                builder: self,
                module,
            };
            reader.visit_item(item);
        }
    }

    fn add_use(
        &mut self,
        module: ModId,
        tree: &syn::UseTree,
        mut prefix: Vec<String>,
        public: bool,
    ) {
        match tree {
            syn::UseTree::Path(p) => {
                prefix.push(p.ident.to_string());
                self.add_use(module, &p.tree, prefix, public);
            }
            syn::UseTree::Name(n) => {
                let name = n.ident.to_string();
                let line = line_of(n.ident.span());
                // `use super::keys::{self, KeyRing}`: `self` names the module itself.
                let local = if name == "self" {
                    prefix.last().cloned().unwrap_or_default()
                } else {
                    prefix.push(name.clone());
                    name
                };
                self.modules[module].uses.push(UseEntry {
                    name: Some(local),
                    written: prefix,
                    public,
                    line,
                });
            }
            syn::UseTree::Rename(r) => {
                if r.ident != "self" {
                    prefix.push(r.ident.to_string());
                }
                self.modules[module].uses.push(UseEntry {
                    name: Some(r.rename.to_string()),
                    written: prefix,
                    public,
                    line: line_of(r.ident.span()),
                });
            }
            syn::UseTree::Glob(g) => {
                self.modules[module].uses.push(UseEntry {
                    name: None,
                    written: prefix,
                    public,
                    line: line_of(g.star_token.span),
                });
            }
            syn::UseTree::Group(g) => {
                for t in &g.items {
                    self.add_use(module, t, prefix.clone(), public);
                }
            }
        }
    }

    /// `segments` as written in `module`, made absolute (from the crate root); `None` for a
    /// path outside the crate or to a name of this module's own (a local type, a variable).
    fn absolute(&self, module: ModId, segments: &[String]) -> Option<Vec<String>> {
        let first = segments.first()?;
        let m = &self.modules[module];
        match first.as_str() {
            "crate" => Some(segments[1..].to_vec()),
            "self" => Some([m.path.clone(), segments[1..].to_vec()].concat()),
            "super" => {
                let mut at = module;
                let mut rest = segments;
                while rest.first().is_some_and(|s| s == "super") {
                    at = self.modules[at].parent?;
                    rest = &rest[1..];
                }
                Some([self.modules[at].path.clone(), rest.to_vec()].concat())
            }
            _ if m.children.contains_key(first) => {
                Some([m.path.clone(), segments.to_vec()].concat())
            }
            _ => None,
        }
    }

    /// The file that defines what `absolute` names, and whether it was found exactly (else
    /// the file of the deepest module reached); `None` if it leaves the crate.
    fn resolve(&self, absolute: &[String], depth: usize) -> Option<(usize, Resolved)> {
        let mut cur: ModId = 0;
        for (i, seg) in absolute.iter().enumerate() {
            let m = &self.modules[cur];
            if let Some(&child) = m.children.get(seg) {
                cur = child;
                continue;
            }
            if m.defined.contains(seg) {
                return Some((m.file, Resolved::Item));
            }
            if depth > 24 {
                return Some((m.file, Resolved::Guess));
            }
            if let Some(u) = m
                .uses
                .iter()
                .find(|u| u.name.as_deref() == Some(seg.as_str()))
            {
                let target = self.absolute(cur, &u.written)?;
                return self.resolve(&[target, absolute[i + 1..].to_vec()].concat(), depth + 1);
            }
            for u in m.uses.iter().filter(|u| u.name.is_none()) {
                let Some(target) = self.absolute(cur, &u.written) else {
                    continue;
                };
                if let Some((file, how)) =
                    self.resolve(&[target, absolute[i..].to_vec()].concat(), depth + 1)
                {
                    if how != Resolved::Guess {
                        return Some((file, how));
                    }
                }
            }
            return Some((m.file, Resolved::Guess));
        }
        Some((self.modules[cur].file, Resolved::Module))
    }

    fn finish(self) -> SourceGraph {
        let mut edges: BTreeMap<(usize, usize), BTreeSet<Evidence>> = BTreeMap::new();
        let mut add = |from: usize, to: Option<(usize, Resolved)>, evidence: Evidence| {
            if let Some((to, how)) = to {
                if to != from && how != Resolved::Module {
                    edges.entry((from, to)).or_default().insert(evidence);
                }
            }
        };
        for (id, m) in self.modules.iter().enumerate() {
            for u in &m.uses {
                let named = match &u.name {
                    Some(n) => n == "_" || !u.public || self.named[m.file].contains(n),
                    None => !u.public,
                };
                if !named {
                    continue;
                }
                if let Some(abs) = self.absolute(id, &u.written) {
                    let to = if u.name.is_none() {
                        // A glob: the module it reads from.
                        self.resolve(&abs, 0).map(|(f, _)| (f, Resolved::Item))
                    } else {
                        self.resolve(&abs, 0)
                    };
                    add(
                        m.file,
                        to,
                        Evidence {
                            line: u.line,
                            path: written(&u.written, u.name.is_none()),
                        },
                    );
                }
            }
        }
        for p in &self.paths {
            let m = &self.modules[p.module];
            let first = &p.segments[0];
            let abs = match self.absolute(p.module, &p.segments) {
                Some(abs) => Some(abs),
                None => {
                    // Through a name this module imports (`use super::keys;` then `keys::x()`);
                    // a child sees its parents' names only through `super::`.
                    m.uses
                        .iter()
                        .find(|u| u.name.as_deref() == Some(first.as_str()))
                        .and_then(|u| self.absolute(p.module, &u.written))
                        .map(|t| [t, p.segments[1..].to_vec()].concat())
                }
            };
            if let Some(abs) = abs {
                add(
                    m.file,
                    self.resolve(&abs, 0),
                    Evidence {
                        line: p.line,
                        path: p.segments.join("::"),
                    },
                );
            }
        }
        let top = self
            .file_module
            .iter()
            .map(|&m| {
                let path = &self.modules[m].path;
                path.first().cloned().unwrap_or_else(|| "lib".to_owned())
            })
            .collect();
        SourceGraph {
            files: self.files,
            top,
            edges,
        }
    }
}

fn written(segments: &[String], glob: bool) -> String {
    let mut s = segments.join("::");
    if glob {
        s.push_str("::*");
    }
    s
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Resolved {
    /// An item defined in the file.
    Item,
    /// A module itself (`use super::keys;`): counted by the paths through it.
    Module,
    /// Not found by name (a variant, a macro, an associated item): the deepest module's file.
    Guess,
}

fn item_test_only(item: &syn::Item) -> bool {
    use syn::Item::*;
    let attrs = match item {
        Const(i) => &i.attrs,
        Enum(i) => &i.attrs,
        ExternCrate(i) => &i.attrs,
        Fn(i) => &i.attrs,
        ForeignMod(i) => &i.attrs,
        Impl(i) => &i.attrs,
        Macro(i) => &i.attrs,
        Mod(i) => &i.attrs,
        Static(i) => &i.attrs,
        Struct(i) => &i.attrs,
        Trait(i) => &i.attrs,
        TraitAlias(i) => &i.attrs,
        Type(i) => &i.attrs,
        Union(i) => &i.attrs,
        Use(i) => &i.attrs,
        _ => return false,
    };
    test_only(attrs)
}

fn defined_name(item: &syn::Item) -> Option<String> {
    use syn::Item::*;
    let ident = match item {
        Const(i) => &i.ident,
        Enum(i) => &i.ident,
        Fn(i) => &i.sig.ident,
        Static(i) => &i.ident,
        Struct(i) => &i.ident,
        Trait(i) => &i.ident,
        TraitAlias(i) => &i.ident,
        Type(i) => &i.ident,
        Union(i) => &i.ident,
        Macro(i) => i.ident.as_ref()?,
        _ => return None,
    };
    Some(ident.to_string())
}

/// Collects the paths of one item's code.
struct CodeReader<'b, 'a> {
    builder: &'b mut Builder<'a>,
    module: ModId,
}

impl CodeReader<'_, '_> {
    fn file(&self) -> usize {
        self.builder.modules[self.module].file
    }

    fn record(&mut self, segments: Vec<String>, line: usize) {
        let file = self.file();
        if let Some(first) = segments.first() {
            self.builder.named[file].insert(first.clone());
        }
        if segments.len() < 2 && !segments.first().is_some_and(|s| self.imported(s)) {
            return;
        }
        self.builder.paths.push(RawPath {
            module: self.module,
            segments,
            line,
        });
    }

    fn imported(&self, name: &str) -> bool {
        self.builder.modules[self.module]
            .uses
            .iter()
            .any(|u| u.name.as_deref() == Some(name))
    }

    /// `crate::a::b`, `super::x`, `self::y` and `child::z` sequences inside macro arguments.
    fn scan_tokens(&mut self, tokens: TokenStream) {
        let flat: Vec<TokenTree> = tokens.into_iter().collect();
        let mut i = 0;
        while i < flat.len() {
            match &flat[i] {
                TokenTree::Group(g) => self.scan_tokens(g.stream()),
                TokenTree::Ident(id) => {
                    let file = self.file();
                    self.builder.named[file].insert(id.to_string());
                    let preceded_by_colons =
                        i >= 1 && matches!(&flat[i - 1], TokenTree::Punct(p) if p.as_char() == ':');
                    let starts = matches!(id.to_string().as_str(), "crate" | "super" | "self")
                        || self.builder.modules[self.module]
                            .children
                            .contains_key(&id.to_string());
                    if starts && !preceded_by_colons {
                        let line = line_of(id.span());
                        let mut segments = vec![id.to_string()];
                        let mut j = i + 1;
                        while j + 2 < flat.len()
                            && matches!(&flat[j], TokenTree::Punct(p) if p.as_char() == ':')
                            && matches!(&flat[j + 1], TokenTree::Punct(p) if p.as_char() == ':')
                        {
                            match &flat[j + 2] {
                                TokenTree::Ident(next) => {
                                    segments.push(next.to_string());
                                    j += 3;
                                }
                                _ => break,
                            }
                        }
                        if segments.len() > 1 {
                            self.builder.paths.push(RawPath {
                                module: self.module,
                                segments,
                                line,
                            });
                        }
                        i = j;
                        continue;
                    }
                }
                _ => {}
            }
            i += 1;
        }
    }
}

impl<'ast> Visit<'ast> for CodeReader<'_, '_> {
    fn visit_item(&mut self, item: &'ast syn::Item) {
        if item_test_only(item) {
            return;
        }
        if let syn::Item::Use(u) = item {
            // A `use` inside a function body: the module's own, for reading paths.
            self.builder
                .add_use(self.module, &u.tree, Vec::new(), false);
            return;
        }
        syn::visit::visit_item(self, item);
    }

    fn visit_impl_item(&mut self, item: &'ast syn::ImplItem) {
        let attrs = match item {
            syn::ImplItem::Const(i) => &i.attrs,
            syn::ImplItem::Fn(i) => &i.attrs,
            syn::ImplItem::Type(i) => &i.attrs,
            syn::ImplItem::Macro(i) => &i.attrs,
            _ => return syn::visit::visit_impl_item(self, item),
        };
        if !test_only(attrs) {
            syn::visit::visit_impl_item(self, item);
        }
    }

    fn visit_trait_item(&mut self, item: &'ast syn::TraitItem) {
        let attrs = match item {
            syn::TraitItem::Const(i) => &i.attrs,
            syn::TraitItem::Fn(i) => &i.attrs,
            syn::TraitItem::Type(i) => &i.attrs,
            syn::TraitItem::Macro(i) => &i.attrs,
            _ => return syn::visit::visit_trait_item(self, item),
        };
        if !test_only(attrs) {
            syn::visit::visit_trait_item(self, item);
        }
    }

    fn visit_path(&mut self, path: &'ast syn::Path) {
        if path.leading_colon.is_none() {
            let segments: Vec<String> = path.segments.iter().map(|s| s.ident.to_string()).collect();
            if let Some(first) = path.segments.first() {
                self.record(segments, line_of(first.ident.span()));
            }
        }
        syn::visit::visit_path(self, path);
    }

    fn visit_macro(&mut self, mac: &'ast syn::Macro) {
        self.scan_tokens(mac.tokens.clone());
        syn::visit::visit_macro(self, mac);
    }

    fn visit_attribute(&mut self, _: &'ast syn::Attribute) {}
}

/// The layering checks of a crate whose `src/lib.rs` doc comment holds its layer table (the
/// registry's and control's `tests/it/layers.rs`): `crate_dir` is its `CARGO_MANIFEST_DIR`,
/// `name` how messages call it, and the graph must read at least `min_files` files and the
/// table name at least `min_layers` modules (so an empty read cannot pass).
pub struct DocumentedLayers {
    graph: SourceGraph,
    crate_dir: PathBuf,
    name: &'static str,
}

impl DocumentedLayers {
    /// Reads the crate's sources; panics when fewer than `min_files` files were read.
    pub fn read(crate_dir: &str, name: &'static str, min_files: usize) -> DocumentedLayers {
        let graph = SourceGraph::of_crate(crate_dir);
        assert!(
            graph.files().len() >= min_files,
            "{name}: only {} files read",
            graph.files().len()
        );
        DocumentedLayers {
            graph,
            crate_dir: PathBuf::from(crate_dir),
            name,
        }
    }

    /// Panics unless every module imports only modules of a lower layer of the table in
    /// `src/lib.rs` (which must name at least `min_layers` modules).
    pub fn assert_layer_table_holds(&self, min_layers: usize) {
        let lib =
            std::fs::read_to_string(self.crate_dir.join("src/lib.rs")).expect("reading src/lib.rs");
        let layers = layers_from_doc(&lib);
        assert!(
            layers.len() >= min_layers,
            "{}: the table in src/lib.rs names {layers:?}",
            self.name
        );
        let layers: Vec<(&str, u8)> = layers.iter().map(|(m, l)| (m.as_str(), *l)).collect();
        let wrong = self.graph.layer_violations(&layers);
        assert!(
            wrong.is_empty(),
            "{}: imports against the layer table of src/lib.rs:\n{}",
            self.name,
            wrong.join("\n")
        );
    }

    /// Panics, naming them, on circles between the crate's top-level modules.
    pub fn assert_no_module_circles(&self) {
        let circles = self.graph.module_circles();
        assert!(
            circles.is_empty(),
            "circles between {}'s modules:\n{}",
            self.name,
            describe(&circles)
        );
    }

    /// Panics, naming them, on circles between the crate's files.
    pub fn assert_no_file_circles(&self) {
        let circles = self.graph.file_circles();
        assert!(
            circles.is_empty(),
            "circles between {}'s files:\n{}",
            self.name,
            describe(&circles)
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(g: &SourceGraph) -> Vec<(String, String)> {
        g.file_edges()
            .into_iter()
            .map(|(a, b, _)| (a.to_owned(), b.to_owned()))
            .collect()
    }

    fn p(a: &str, b: &str) -> (String, String) {
        (a.to_owned(), b.to_owned())
    }

    #[test]
    fn grouped_imports_super_self_and_bodies_are_read() {
        let g = SourceGraph::of_sources(&[
            ("lib.rs", "pub mod a; pub mod b; pub mod c;"),
            ("a/mod.rs", "mod x; mod y; pub use x::X;"),
            (
                "a/x.rs",
                "pub struct X; fn f() { use super::y::{self}; y::g(); }",
            ),
            ("a/y.rs", "pub fn g() {}"),
            (
                "b.rs",
                "use crate::{a::{X}, c::{self as cc}}; fn h() { cc::k(); }",
            ),
            (
                "c.rs",
                "pub fn k() { let _ = self::k2(); crate::b::q(); } fn k2() {}",
            ),
        ]);
        assert_eq!(
            pairs(&g),
            vec![
                p("a/x.rs", "a/y.rs"),
                p("b.rs", "a/x.rs"),
                p("b.rs", "c.rs"),
                p("c.rs", "b.rs")
            ]
        );
        let circles = g.file_circles();
        assert_eq!(circles.len(), 1);
        let text = describe(&circles);
        assert!(text.starts_with("b.rs → c.rs → b.rs"), "{text}");
        assert!(text.contains("c.rs:1 uses crate::b::q"), "{text}");
        let modules = g.module_circles();
        assert_eq!(modules.len(), 1, "{}", describe(&modules));
        assert!(describe(&modules).starts_with("b → c → b"));
    }

    #[test]
    fn test_modules_macros_and_reexports() {
        let g = SourceGraph::of_sources(&[
            ("lib.rs", "pub mod a; pub mod b;"),
            (
                "a.rs",
                "pub fn f() { tracing::info!(\"{}\", crate::b::NAME); }\n\
                 #[cfg(test)]\nmod tests { use crate::b::other; }",
            ),
            (
                "b/mod.rs",
                "mod inner; pub use inner::*; pub use crate::a::f;",
            ),
            (
                "b/inner.rs",
                "pub const NAME: &str = \"\"; pub fn other() {}",
            ),
        ]);
        // b re-exports a::f without naming it: no edge b → a.
        assert_eq!(pairs(&g), vec![p("a.rs", "b/inner.rs")]);
        assert!(g.file_circles().is_empty());
    }

    #[test]
    fn a_child_using_its_parents_code_and_the_parent_calling_it_is_a_circle() {
        let g = SourceGraph::of_sources(&[
            ("lib.rs", "mod m;"),
            (
                "m/mod.rs",
                "mod k; pub struct Shared; fn run() { k::go(); }",
            ),
            (
                "m/k.rs",
                "use super::Shared; pub fn go() -> Shared { Shared }",
            ),
        ]);
        let circles = g.file_circles();
        assert_eq!(
            describe(&circles).lines().next(),
            Some("m/mod.rs → m/k.rs → m/mod.rs")
        );
        assert!(g.module_circles().is_empty());
    }
}
