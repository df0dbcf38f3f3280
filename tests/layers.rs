//! The house's rule, checked on every `cargo test`: imports only point down. Every non-test
//! source file of the library names (`crate::<module>`) only its own module and modules on lower
//! floors. A layering break fails here naming the file, the line and both floors.

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
        for (n, line) in text.lines().enumerate() {
            let code = line.trim_start();
            if code.starts_with("//") {
                continue;
            }
            if code.starts_with("#[cfg(test)]") && text.lines().nth(n + 1).is_some_and(|l| l.contains("mod tests")) {
                break;
            }
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
