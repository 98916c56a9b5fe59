//! The crate's public surface, listed: a change to it is a visible diff in
//! `tests/snapshots/public_api__surface.snap`, and the surface stays small.
//!
//! What a library user sees is what rustdoc shows: items reachable from `src/lib.rs` through
//! `pub mod` and `pub use`, minus `#[doc(hidden)]` ones (those exist for batchlab's own binary,
//! benches, fuzz targets and tests, and may change shape between releases; ARCHITECTURE.md's API
//! boundary says which items are the API). The source is read with `syn`, so the list needs no
//! nightly rustdoc. Each named item is one line: modules, types, traits, functions, constants and
//! re-exports; a listed type's public methods and a listed trait's methods are lines of their own
//! under it (`  fn name`), and they are not counted against the limit, which is about how many
//! things a newcomer must learn, not how many calls each one has.

use std::path::{Path, PathBuf};

use syn::{Attribute, ImplItem, Item, UseTree, Visibility};

/// At most this many named items (methods not counted).
const MAX_ITEMS: usize = 100;

#[derive(Default)]
struct Surface {
    lines: Vec<String>,
    items: usize,
    /// Every inherent impl block of the crate, whatever file holds it.
    impls: Vec<ImplBlock>,
    /// Where each type name is defined (a name may be defined in several modules).
    definitions: std::collections::BTreeMap<String, Vec<Vec<String>>>,
}

/// One inherent `impl` block: the type's name, the module that holds the block, and its public,
/// visible methods.
struct ImplBlock {
    ty: String,
    module: Vec<String>,
    methods: Vec<String>,
}

/// The module path of a file under `src/`: `scenario/change.rs` is `[crate, scenario, change]`.
fn module_of(src: &Path, file: &Path) -> Vec<String> {
    let relative = file.strip_prefix(src).expect("under src").with_extension("");
    let mut parts: Vec<String> = relative.iter().map(|p| p.to_string_lossy().into_owned()).collect();
    if matches!(parts.last().map(String::as_str), Some("mod" | "lib")) {
        parts.pop();
    }
    std::iter::once("crate".to_owned()).chain(parts).collect()
}

/// How many leading segments two module paths share.
fn shared(a: &[String], b: &[String]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

fn hidden(attrs: &[Attribute]) -> bool {
    attrs.iter().any(|a| {
        (a.path().is_ident("doc") && a.meta.require_list().is_ok_and(|l| l.tokens.to_string() == "hidden"))
            || (a.path().is_ident("cfg") && a.meta.require_list().is_ok_and(|l| l.tokens.to_string() == "test"))
    })
}

fn public(vis: &Visibility) -> bool {
    matches!(vis, Visibility::Public(_))
}

fn uses(tree: &UseTree, prefix: &str, out: &mut Vec<String>) {
    match tree {
        UseTree::Path(p) => uses(&p.tree, &format!("{prefix}{}::", p.ident), out),
        UseTree::Name(n) => out.push(format!("{} (from {prefix}{})", n.ident, n.ident)),
        UseTree::Rename(r) => out.push(format!("{} (from {prefix}{})", r.rename, r.ident)),
        UseTree::Glob(_) => out.push(format!("* (from {prefix}*)")),
        UseTree::Group(g) => g.items.iter().for_each(|t| uses(t, prefix, out)),
    }
}

impl Surface {
    fn item(&mut self, kind: &str, path: &str) {
        self.items += 1;
        self.lines.push(format!("{kind} {path}"));
    }

    fn method(&mut self, name: &str) {
        self.lines.push(format!("  fn {name}"));
    }

    /// Collects the inherent impls and type definitions of `items`, in `module`, and of the
    /// inline modules among them (`#[cfg(test)]` ones aside).
    fn collect(&mut self, module: &[String], items: &[Item]) {
        for item in items {
            match item {
                Item::Impl(i) if i.trait_.is_none() && !hidden(&i.attrs) => {
                    let syn::Type::Path(ty) = &*i.self_ty else { continue };
                    let name = ty.path.segments.last().map(|s| s.ident.to_string()).unwrap_or_default();
                    let methods = i
                        .items
                        .iter()
                        .filter_map(|m| match m {
                            ImplItem::Fn(f) if public(&f.vis) && !hidden(&f.attrs) => Some(f.sig.ident.to_string()),
                            _ => None,
                        })
                        .collect();
                    self.impls.push(ImplBlock { ty: name, module: module.to_vec(), methods });
                }
                Item::Struct(s) => self.definitions.entry(s.ident.to_string()).or_default().push(module.to_vec()),
                Item::Enum(e) => self.definitions.entry(e.ident.to_string()).or_default().push(module.to_vec()),
                Item::Mod(m) if !hidden(&m.attrs) => {
                    if let Some((_, inline)) = &m.content {
                        let inner: Vec<String> = module.iter().cloned().chain([m.ident.to_string()]).collect();
                        self.collect(&inner, inline);
                    }
                }
                _ => {}
            }
        }
    }

    /// The public methods of type `name` defined in `module`, from impl blocks in any file: an
    /// impl goes to the definition of its type's name nearest to it in the module tree.
    fn methods_of(&self, name: &str, module: &[String]) -> Vec<String> {
        let definitions = self.definitions.get(name).cloned().unwrap_or_default();
        let mut all: Vec<String> = self
            .impls
            .iter()
            .filter(|i| i.ty == name)
            .filter(|i| {
                let nearest = definitions.iter().max_by_key(|d| shared(d, &i.module));
                nearest.is_none_or(|d| d.as_slice() == module)
            })
            .flat_map(|i| i.methods.iter().cloned())
            .collect();
        all.sort();
        all.dedup();
        all
    }

    /// Walks one module's items; `dir` is where its child modules' files are.
    fn module(&mut self, path: &str, items: &[Item], dir: &Path) {
        let module: Vec<String> =
            std::iter::once("crate".to_owned()).chain(path.split("::").skip(1).map(String::from)).collect();
        for item in items {
            let (kind, ident, attrs, vis) = match item {
                Item::Struct(s) => ("struct", s.ident.to_string(), &s.attrs, &s.vis),
                Item::Enum(e) => ("enum", e.ident.to_string(), &e.attrs, &e.vis),
                Item::Trait(t) => ("trait", t.ident.to_string(), &t.attrs, &t.vis),
                Item::Fn(f) => ("fn", f.sig.ident.to_string(), &f.attrs, &f.vis),
                Item::Const(c) => ("const", c.ident.to_string(), &c.attrs, &c.vis),
                Item::Static(s) => ("static", s.ident.to_string(), &s.attrs, &s.vis),
                Item::Type(t) => ("type", t.ident.to_string(), &t.attrs, &t.vis),
                Item::Union(u) => ("union", u.ident.to_string(), &u.attrs, &u.vis),
                Item::Mod(m) => ("mod", m.ident.to_string(), &m.attrs, &m.vis),
                Item::Use(u) if public(&u.vis) && !hidden(&u.attrs) => {
                    let mut names = Vec::new();
                    uses(&u.tree, "", &mut names);
                    for name in names {
                        self.item("use", &format!("{path}::{name}"));
                    }
                    continue;
                }
                Item::Macro(m) if m.attrs.iter().any(|a| a.path().is_ident("macro_export")) && !hidden(&m.attrs) => {
                    let name = m.ident.as_ref().map(|i| i.to_string()).unwrap_or_default();
                    self.item("macro", &format!("batchlab::{name}"));
                    continue;
                }
                _ => continue,
            };
            if !public(vis) || hidden(attrs) {
                continue;
            }
            let full = format!("{path}::{ident}");
            self.item(kind, &full);
            match item {
                Item::Mod(m) => {
                    let child_dir = dir.join(&ident);
                    match &m.content {
                        Some((_, inline)) => self.module(&full, inline, &child_dir),
                        None => {
                            let file = [dir.join(format!("{ident}.rs")), child_dir.join("mod.rs")]
                                .into_iter()
                                .find(|f| f.exists())
                                .unwrap_or_else(|| panic!("no file for module {full} in {}", dir.display()));
                            let parsed = parse(&file);
                            self.module(&full, &parsed.items, &child_dir);
                        }
                    }
                }
                Item::Trait(t) => {
                    let mut names: Vec<String> = t
                        .items
                        .iter()
                        .filter_map(|i| match i {
                            syn::TraitItem::Fn(f) if !hidden(&f.attrs) => Some(f.sig.ident.to_string()),
                            _ => None,
                        })
                        .collect();
                    names.sort();
                    names.iter().for_each(|n| self.method(n));
                }
                Item::Struct(_) | Item::Enum(_) => {
                    let module: Vec<String> = module.clone();
                    self.methods_of(&ident, &module).iter().for_each(|n| self.method(n))
                }
                _ => {}
            }
        }
    }
}

fn parse(file: &Path) -> syn::File {
    let text = std::fs::read_to_string(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    syn::parse_file(&text).unwrap_or_else(|e| panic!("{}: {e}", file.display()))
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("a source directory") {
        let path = entry.expect("an entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

fn surface() -> Surface {
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut surface = Surface::default();
    // Every file's impls first: a type's methods may be in another file than the type
    // (`Plan::with_sets` is in scenario/change.rs).
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files.sort();
    for file in files.iter().filter(|f| !f.ends_with("main.rs") && !f.ends_with("tests.rs")) {
        surface.collect(&module_of(&src, file), &parse(file).items);
    }
    let lib = parse(&src.join("lib.rs"));
    surface.module("batchlab", &lib.items, &src);
    surface
}

#[test]
fn the_public_surface_is_listed_and_small() {
    let surface = surface();
    insta::assert_snapshot!("surface", surface.lines.join("\n"));
    assert!(
        surface.items < MAX_ITEMS,
        "the public surface has {} named items, the limit is {MAX_ITEMS}: make what is not on ARCHITECTURE.md's \
         API boundary pub(crate), or #[doc(hidden)] if batchlab's own binary, benches or tests need it",
        surface.items
    );
}
