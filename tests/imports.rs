//! No import circle among the files of `src/`: each file's `use` trees and inline
//! paths (`crate::`, `super::`, `self::`, a child module's name) name the file that defines the module they reach, and
//! those edges must form no cycle. A path that stops at a folder's `mod.rs` (an item it
//! re-exports) is an edge to that `mod.rs`, so a circle through a re-export counts too;
//! `mod x;` declarations are not edges. A failure prints every circle found.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Module path (`crate::backend::redis`) → file (`backend/redis/mod.rs`).
type Modules = BTreeMap<String, String>;

fn collect(dir: &Path, root: &Path, out: &mut Modules) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            collect(&path, root, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let rel = path
                .strip_prefix(root)
                .unwrap()
                .to_string_lossy()
                .into_owned();
            out.insert(module_of(&rel), rel);
        }
    }
}

fn module_of(rel: &str) -> String {
    let trimmed = rel.trim_end_matches(".rs");
    let mut parts: Vec<&str> = trimmed.split('/').collect();
    if matches!(parts.last(), Some(&"mod") | Some(&"lib") | Some(&"main")) {
        parts.pop();
    }
    std::iter::once("crate")
        .chain(parts)
        .collect::<Vec<_>>()
        .join("::")
}

/// The source with comments, strings and character literals blanked out, so a path
/// in a doc comment or a message is not read as an import.
fn code_only(src: &str) -> String {
    let b = src.as_bytes();
    let mut out = String::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let rest = &src[i..];
        if rest.starts_with("//") {
            let end = rest.find('\n').map_or(b.len(), |n| i + n);
            i = end;
        } else if rest.starts_with("/*") {
            let mut depth = 0;
            while i < b.len() {
                if src[i..].starts_with("/*") {
                    depth += 1;
                    i += 2;
                } else if src[i..].starts_with("*/") {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
        } else if let Some(len) = raw_string_len(rest) {
            out.push(' ');
            i += len;
        } else if b[i] == b'"' {
            i += 1;
            while i < b.len() && b[i] != b'"' {
                i += if b[i] == b'\\' { 2 } else { 1 };
            }
            i += 1;
            out.push(' ');
        } else if b[i] == b'\'' {
            i += char_literal_len(rest).unwrap_or(1);
            out.push(' ');
        } else {
            let ch = rest.chars().next().unwrap();
            out.push(ch);
            i += ch.len_utf8();
        }
    }
    out
}

fn raw_string_len(rest: &str) -> Option<usize> {
    let after_b = rest.strip_prefix('b').unwrap_or(rest);
    let after_r = after_b.strip_prefix('r')?;
    let hashes = after_r.len() - after_r.trim_start_matches('#').len();
    let body = after_r[hashes..].strip_prefix('"')?;
    let close = format!("\"{}", "#".repeat(hashes));
    let end = body.find(&close)?;
    Some(rest.len() - body.len() + end + close.len())
}

/// `'x'`, `'\n'`, `'\u{..}'` are literals; `'a` in `&'a str` is a lifetime.
fn char_literal_len(rest: &str) -> Option<usize> {
    let mut chars = rest.char_indices().skip(1);
    let (_, first) = chars.next()?;
    if first == '\\' {
        return rest[2..].find('\'').map(|n| n + 3);
    }
    let (idx, second) = chars.next()?;
    (second == '\'').then_some(idx + 1)
}

fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// Every path the code names: the leaves of each `use` tree, and each inline path (those
/// that start with another crate or a type are dropped by [`resolve`]). Paired with the
/// inline module it appears in.
fn paths(code: &str) -> Vec<(Vec<String>, Vec<String>)> {
    let mut found = Vec::new();
    let mut inline: Vec<(String, usize)> = Vec::new();
    let mut depth = 0usize;
    let toks = tokens(code);
    let mut i = 0;
    while i < toks.len() {
        let t = toks[i].as_str();
        let scope: Vec<String> = inline.iter().map(|(n, _)| n.clone()).collect();
        match t {
            "{" => depth += 1,
            "}" => {
                depth = depth.saturating_sub(1);
                if inline.last().is_some_and(|(_, d)| *d == depth) {
                    inline.pop();
                }
            }
            "mod" if toks.get(i + 2).is_some_and(|t| t == "{") => {
                inline.push((toks[i + 1].clone(), depth));
            }
            "use" if i == 0 || toks[i - 1] != "$" => {
                let end = (i..toks.len())
                    .find(|&j| toks[j] == ";")
                    .unwrap_or(toks.len());
                for leaf in use_leaves(&toks[i + 1..end]) {
                    found.push((scope.clone(), leaf));
                }
                i = end;
            }
            word if word.chars().all(is_ident)
                && (i == 0 || !["$", "::", "in"].contains(&toks[i - 1].as_str()))
                && toks.get(i + 1).is_some_and(|t| t == "::") =>
            {
                let mut path = vec![word.to_string()];
                let mut j = i + 1;
                while toks.get(j).is_some_and(|t| t == "::")
                    && toks.get(j + 1).is_some_and(|t| t.chars().all(is_ident))
                {
                    path.push(toks[j + 1].clone());
                    j += 2;
                }
                found.push((scope, path));
                i = j - 1;
            }
            _ => {}
        }
        i += 1;
    }
    found
}

fn tokens(code: &str) -> Vec<String> {
    let mut toks = Vec::new();
    let mut chars = code.chars().peekable();
    while let Some(c) = chars.next() {
        if is_ident(c) {
            let mut word = c.to_string();
            while let Some(&n) = chars.peek().filter(|n| is_ident(**n)) {
                word.push(n);
                chars.next();
            }
            toks.push(word);
        } else if c == ':' && chars.peek() == Some(&':') {
            chars.next();
            toks.push("::".into());
        } else if !c.is_whitespace() {
            toks.push(c.to_string());
        }
    }
    toks
}

/// The full paths a `use` tree names (`a::{b, c::d}` → `a::b`, `a::c::d`).
fn use_leaves(toks: &[String]) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let mut stack: Vec<Vec<String>> = vec![Vec::new()];
    let mut current: Vec<String> = Vec::new();
    let mut skip_alias = false;
    for t in toks {
        match t.as_str() {
            "::" | "pub" | "(" | ")" => {}
            "as" => skip_alias = true,
            "{" => {
                let mut prefix = stack.last().unwrap().clone();
                prefix.append(&mut current);
                stack.push(prefix);
            }
            "," | "}" => {
                if !current.is_empty() {
                    let mut p = stack.last().unwrap().clone();
                    p.append(&mut current);
                    out.push(p);
                }
                if t == "}" {
                    stack.pop();
                }
                skip_alias = false;
            }
            word if skip_alias => {
                let _ = word;
            }
            word => current.push(word.to_string()),
        }
    }
    if !current.is_empty() {
        let mut p = stack.last().unwrap().clone();
        p.append(&mut current);
        out.push(p);
    }
    out
}

/// The file that defines the module a path reaches from `module` (its file module plus the
/// inline modules it is in), or `None` for another crate.
fn resolve(modules: &Modules, module: &str, scope: &[String], path: &[String]) -> Option<String> {
    let mut here: Vec<String> = module.split("::").map(String::from).collect();
    here.extend(scope.iter().cloned());
    let mut segs = path.iter().peekable();
    let mut abs: Vec<String> = match segs.peek().map(|s| s.as_str()) {
        Some("crate") => {
            segs.next();
            vec!["crate".into()]
        }
        Some("super") | Some("self") => {
            while let Some(s) = segs.next_if(|s| *s == "super" || *s == "self") {
                if s == "super" {
                    here.pop();
                }
            }
            here
        }
        Some(first) if modules.contains_key(&format!("{module}::{first}")) => here,
        _ => return None,
    };
    abs.extend(segs.cloned());
    (1..=abs.len())
        .rev()
        .find_map(|n| modules.get(&abs[..n].join("::")))
        .cloned()
}

fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut modules = Modules::new();
    collect(&root, &root, &mut modules);
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (module, file) in &modules {
        let code = code_only(&std::fs::read_to_string(root.join(file)).unwrap());
        let targets = edges.entry(file.clone()).or_default();
        for (scope, path) in paths(&code) {
            if let Some(to) = resolve(&modules, module, &scope, &path) {
                if &to != file {
                    targets.insert(to);
                }
            }
        }
    }
    edges
}

/// Strongly connected components of more than one file (Tarjan).
fn circles(edges: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct Walk<'a> {
        edges: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        found: Vec<Vec<String>>,
    }
    impl<'a> Walk<'a> {
        fn visit(&mut self, v: &'a str) {
            let n = self.index.len();
            self.index.insert(v, n);
            self.low.insert(v, n);
            self.stack.push(v);
            self.on_stack.insert(v);
            for w in self.edges.get(v).into_iter().flatten() {
                if !self.index.contains_key(w.as_str()) {
                    self.visit(w);
                    let lw = self.low[w.as_str()];
                    let lv = self.low.get_mut(v).unwrap();
                    *lv = (*lv).min(lw);
                } else if self.on_stack.contains(w.as_str()) {
                    let iw = self.index[w.as_str()];
                    let lv = self.low.get_mut(v).unwrap();
                    *lv = (*lv).min(iw);
                }
            }
            if self.low[v] == self.index[v] {
                let mut part = Vec::new();
                while let Some(w) = self.stack.pop() {
                    self.on_stack.remove(w);
                    part.push(w.to_string());
                    if w == v {
                        break;
                    }
                }
                if part.len() > 1 {
                    part.sort();
                    self.found.push(part);
                }
            }
        }
    }
    let mut walk = Walk {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        found: Vec::new(),
    };
    for v in edges.keys() {
        if !walk.index.contains_key(v.as_str()) {
            walk.visit(v);
        }
    }
    walk.found.sort();
    walk.found
}

#[test]
fn no_import_circle_among_src_files() {
    let found = circles(&graph());
    let shown: Vec<String> = found
        .iter()
        .map(|c| format!("{} files: {}", c.len(), c.join(" ")))
        .collect();
    assert!(
        found.is_empty(),
        "{} import circle(s) in src/:\n{}",
        found.len(),
        shown.join("\n")
    );
}

#[test]
fn the_reader_sees_use_trees_inline_paths_and_nested_modules() {
    let code = code_only(
        "use super::{a, b::{c as d, e}};\n// use crate::x;\nfn f() { let s = \"crate::y\"; \
         crate::z::g(); }\nmod tests { use super::*; child::f(); }\n",
    );
    let found = paths(&code);
    let shown: Vec<String> = found
        .iter()
        .map(|(s, p)| format!("{}|{}", s.join("::"), p.join("::")))
        .collect();
    assert_eq!(
        shown,
        [
            "|super::a",
            "|super::b::c",
            "|super::b::e",
            "|crate::z::g",
            "tests|super::*",
            "tests|child::f"
        ]
    );
}
