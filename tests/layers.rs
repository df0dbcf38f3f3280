//! The house's rule, checked on every `cargo test`: imports only point down. Every non-test
//! source file of the library names (`crate::<module>`) only its own module and modules on lower
//! floors. A layering break fails here naming the file, the line and both floors. Inside a floor,
//! no two sibling modules name each other, directly or round a longer circle (issue 33).

use std::path::{Path, PathBuf};

/// Floors from the ground up (CONTRIBUTING.md, "The house").
const FLOORS: &[&[&str]] = &[
    &["error", "avro_binary", "causes", "alloc"],
    &["storage", "metrics"],
    &["health", "config"],
    &["source"],
    &["changelog"],
    &["sink", "generate"],
    &["runtime"],
    &["ops"],
];

fn floor(module: &str) -> Option<usize> {
    FLOORS.iter().position(|f| f.contains(&module))
}

fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).expect("src readable") {
        let p = e.expect("entry").path();
        if p.is_dir() {
            files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The top-level modules a path after `crate::` names: `a::b` names `a`, `{a, b::c}` names both.
fn named(rest: &str) -> Vec<String> {
    let ident = |s: &str| -> String {
        s.trim_start()
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect()
    };
    match rest.strip_prefix('{') {
        Some(list) => list
            .split('}')
            .next()
            .unwrap_or("")
            .split(',')
            .map(ident)
            .filter(|n| !n.is_empty())
            .collect(),
        None => vec![ident(rest)],
    }
}

/// A file's lines of code (numbered from 0, leading blanks trimmed): comments left out, and
/// nothing from its unit tests (`#[cfg(test)]` before `mod tests`) on.
fn code_lines(text: &str) -> impl Iterator<Item = (usize, &str)> {
    let lines: Vec<&str> = text.lines().collect();
    let end = (0..lines.len())
        .find(|&n| {
            lines[n].trim_start().starts_with("#[cfg(test)]")
                && lines.get(n + 1).is_some_and(|l| l.contains("mod tests"))
        })
        .unwrap_or(lines.len());
    lines
        .into_iter()
        .take(end)
        .map(str::trim_start)
        .enumerate()
        .filter(|(_, code)| !code.starts_with("//"))
}

#[test]
fn imports_only_point_down() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut all = Vec::new();
    files(&src, &mut all);
    let mut breaks = Vec::new();
    let mut checked = 0;
    for path in all {
        let rel = path.strip_prefix(&src).expect("under src");
        let top = rel
            .components()
            .next()
            .expect("a component")
            .as_os_str()
            .to_string_lossy();
        let module = top.trim_end_matches(".rs");
        // the binaries sit above everything; unit tests may use any layer to build their inputs
        let Some(own) = floor(module) else { continue };
        if rel.file_name().is_some_and(|n| n == "tests.rs") {
            continue;
        }
        checked += 1;
        let text = std::fs::read_to_string(&path).expect("readable");
        for (n, code) in code_lines(&text) {
            for (i, _) in code.match_indices("crate::") {
                for name in named(&code[i + 7..]) {
                    match floor(&name) {
                        Some(f) if name != module && f >= own => breaks.push(format!(
                            "{}:{}: `{module}` (floor {own}) names `{name}` (floor {f})",
                            rel.display(),
                            n + 1
                        )),
                        None if name != module => breaks.push(format!(
                            "{}:{}: `{name}` is on no floor: add it to FLOORS in tests/layers.rs",
                            rel.display(),
                            n + 1
                        )),
                        _ => {}
                    }
                }
            }
        }
    }
    assert!(checked > 50, "only {checked} files checked: is src/ where it was?");
    assert!(breaks.is_empty(), "imports running back up:\n{}", breaks.join("\n"));
}

/// A module's id from its file: `src/a/b.rs` and `src/a/b/mod.rs` are both `a/b`.
fn module_id(src: &Path, path: &Path) -> String {
    let rel = path.strip_prefix(src).expect("under src").with_extension("");
    let id = rel.to_string_lossy().replace('\\', "/");
    id.strip_suffix("/mod").map(str::to_string).unwrap_or(id)
}

/// The sibling modules (same parent) a file's code names, by `super::<sibling>` or
/// `crate::<path to the sibling>`; comments and the unit tests left out.
fn siblings_named(id: &str, text: &str, modules: &std::collections::HashSet<String>) -> Vec<String> {
    let parent = id.rsplit_once('/').map_or("", |(p, _)| p);
    let sibling = |name: &str| match parent {
        "" => name.to_string(),
        p => format!("{p}/{name}"),
    };
    let mut out = Vec::new();
    for (_, code) in code_lines(text) {
        let mut found = Vec::new();
        for (i, _) in code.match_indices("super::") {
            found.extend(named(&code[i + 7..]).into_iter().map(|m| sibling(&m)));
        }
        for (i, _) in code.match_indices("crate::") {
            // the longest module path the reference starts with
            let path: String = code[i + 7..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == ':')
                .collect();
            let parts: Vec<&str> = path.split("::").filter(|p| !p.is_empty()).collect();
            if let Some(m) = (1..=parts.len())
                .rev()
                .map(|k| parts[..k].join("/"))
                .find(|m| modules.contains(m))
            {
                found.push(m);
            }
        }
        out.extend(
            found
                .into_iter()
                .filter(|m| m != id && modules.contains(m) && m.rsplit_once('/').map_or("", |(p, _)| p) == parent),
        );
    }
    out
}

#[test]
fn no_two_sibling_modules_import_each_other() {
    use std::collections::{HashMap, HashSet};
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut all = Vec::new();
    files(&src, &mut all);
    all.retain(|p| p.file_name().is_none_or(|n| n != "tests.rs") && !p.starts_with(src.join("bin")));
    let modules: HashSet<String> = all.iter().map(|p| module_id(&src, p)).collect();
    let mut edges: HashMap<String, HashSet<String>> = HashMap::new();
    for p in &all {
        let id = module_id(&src, p);
        let text = std::fs::read_to_string(p).expect("readable");
        edges
            .entry(id.clone())
            .or_default()
            .extend(siblings_named(&id, &text, &modules));
    }
    // a circle: a path of sibling imports back to where it started
    let mut circles = Vec::new();
    for start in edges.keys() {
        let mut stack = vec![(start.clone(), vec![start.clone()])];
        let mut seen = HashSet::new();
        while let Some((at, path)) = stack.pop() {
            for next in edges.get(&at).into_iter().flatten() {
                if next == start {
                    circles.push(format!("{} -> {start}", path.join(" -> ")));
                } else if seen.insert(next.clone()) {
                    stack.push((next.clone(), [path.clone(), vec![next.clone()]].concat()));
                }
            }
        }
    }
    circles.sort();
    circles.dedup();
    assert!(
        circles.is_empty(),
        "modules importing each other (move what both need down, or into one of them):\n{}",
        circles.join("\n")
    );
}
