//! The house's size rule, checked on every `cargo test`: no function of the crate (library and
//! binaries) outside its tests is longer than 80 lines, from its `fn` line to its closing brace,
//! comments and blank lines included (issue 62). A longer one fails here naming the file, the
//! line and its length: split it into named steps.

use std::path::{Path, PathBuf};

const MAX_LINES: usize = 80;

fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).expect("src readable") {
        let p = e.expect("entry").path();
        if p.is_dir() {
            if p.file_name().is_some_and(|n| n != "tests") {
                files(&p, out);
            }
        } else if p.extension().is_some_and(|x| x == "rs") && p.file_name().is_some_and(|n| n != "tests.rs") {
            out.push(p);
        }
    }
}

/// `text` with everything that is not code (comments, string and character literals) blanked to
/// spaces, newlines kept: braces and `fn` found in it are the code's own.
fn code_only(text: &str) -> Vec<u8> {
    let b = text.as_bytes();
    let mut out = b.to_vec();
    let blank = |out: &mut Vec<u8>, from: usize, to: usize| {
        for c in &mut out[from..to.min(b.len())] {
            if *c != b'\n' {
                *c = b' ';
            }
        }
    };
    let mut i = 0;
    while i < b.len() {
        let start = i;
        match b[i] {
            b'/' if b.get(i + 1) == Some(&b'/') => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                let mut depth = 0;
                while i < b.len() {
                    if b[i] == b'/' && b.get(i + 1) == Some(&b'*') {
                        depth += 1;
                        i += 2;
                    } else if b[i] == b'*' && b.get(i + 1) == Some(&b'/') {
                        depth -= 1;
                        i += 2;
                        if depth == 0 {
                            break;
                        }
                    } else {
                        i += 1;
                    }
                }
            }
            b'r' if (b.get(i + 1) == Some(&b'"') || b.get(i + 1) == Some(&b'#'))
                && (i == 0 || !(b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_')) =>
            {
                let hashes = b[i + 1..].iter().take_while(|&&c| c == b'#').count();
                if b.get(i + 1 + hashes) != Some(&b'"') {
                    i += 1;
                    continue;
                }
                i += 2 + hashes;
                let close: Vec<u8> = std::iter::once(b'"').chain(std::iter::repeat_n(b'#', hashes)).collect();
                while i < b.len() && !b[i..].starts_with(&close) {
                    i += 1;
                }
                i += close.len();
            }
            b'"' => {
                i += 1;
                while i < b.len() && b[i] != b'"' {
                    i += if b[i] == b'\\' { 2 } else { 1 };
                }
                i += 1;
            }
            b'\'' if b.get(i + 1) == Some(&b'\\') => {
                i += 2;
                while i < b.len() && b[i] != b'\'' {
                    i += 1;
                }
                i += 1;
            }
            // a character literal (`'{'`), not a lifetime (`'a`)
            b'\'' if b.get(i + 2) == Some(&b'\'') => i += 3,
            _ => {
                i += 1;
                continue;
            }
        }
        blank(&mut out, start, i);
    }
    out
}

/// Where `text`'s unit tests begin (`#[cfg(test)]` before `mod tests`); its end where it has none.
fn tests_start(text: &str) -> usize {
    text.find("#[cfg(test)]\nmod tests").unwrap_or(text.len())
}

/// The index of the bracket closing the one at `open` (`{` or `(`) in `code` (literals and
/// comments blanked); the last byte where it is not closed.
fn closing(code: &[u8], open: usize) -> usize {
    let (up, down) = match code[open] {
        b'(' => (b'(', b')'),
        _ => (b'{', b'}'),
    };
    let mut depth = 0usize;
    for (k, &c) in code[open..].iter().enumerate() {
        if c == up {
            depth += 1;
        } else if c == down {
            depth -= 1;
            if depth == 0 {
                return open + k;
            }
        }
    }
    code.len().saturating_sub(1)
}

/// The functions of `text` longer than [`MAX_LINES`], as (line from 1, lines), outside its unit
/// tests (`#[cfg(test)]` before `mod tests`, to the end of the file).
fn long_functions(text: &str) -> Vec<(usize, usize)> {
    let code = code_only(text);
    let line_of = |at: usize| code[..at].iter().filter(|&&c| c == b'\n').count() + 1;
    let tests_from = tests_start(text);
    let is_ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    let mut out = Vec::new();
    let mut i = 0;
    while i + 3 < code.len().min(tests_from) {
        let keyword = code[i..].starts_with(b"fn ") && (i == 0 || !is_ident(code[i - 1]));
        if !keyword {
            i += 1;
            continue;
        }
        // the body: the first `{` before any `;` (a declaration without a body has none)
        let Some(open) = code[i..].iter().position(|&c| c == b'{' || c == b';').map(|p| i + p) else {
            break;
        };
        if code[open] == b';' {
            i = open;
            continue;
        }
        let end = closing(&code, open);
        let (first, last) = (line_of(i), line_of(end));
        if last - first + 1 > MAX_LINES {
            out.push((first, last - first + 1));
        }
        i += 3;
    }
    out
}

#[test]
fn no_function_outside_tests_is_over_80_lines() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut all = Vec::new();
    files(&src, &mut all);
    assert!(all.len() > 50, "the sources were not found under {}", src.display());
    let mut long = Vec::new();
    for p in &all {
        let text = std::fs::read_to_string(p).expect("readable");
        for (line, n) in long_functions(&text) {
            long.push(format!(
                "{}:{line}: {n} lines",
                p.strip_prefix(&src).unwrap_or(p).display()
            ));
        }
    }
    assert!(
        long.is_empty(),
        "functions over {MAX_LINES} lines (split them into named steps):\n{}",
        long.join("\n")
    );
}

#[test]
fn the_rule_sees_a_long_function_and_not_braces_in_strings() {
    let body = "    let x = 1;\n".repeat(MAX_LINES);
    let long =
        format!("// fn in a comment {{\nfn long() {{\n{body}}}\n\nfn short() {{ let s = \"}}{{\"; let c = '{{'; }}\n");
    assert_eq!(long_functions(&long), vec![(2, MAX_LINES + 2)]);
    let fits = format!("fn fits() {{\n{}}}\n", "    let x = 1;\n".repeat(MAX_LINES - 2));
    assert!(long_functions(&fits).is_empty());
    let in_tests = format!("fn a() {{}}\n#[cfg(test)]\nmod tests {{\n    fn long() {{\n{body}    }}\n}}\n");
    assert!(long_functions(&in_tests).is_empty());
    let raw = format!("fn r() -> &'static str {{\n    r#\"}}}}\"#\n}}\nfn long() {{\n{body}}}\n");
    assert_eq!(long_functions(&raw), vec![(4, MAX_LINES + 2)]);
}

/// The lines of `text` (outside its unit tests) where a metric's label values include a string
/// literal: label values come from the label enums of `metrics.rs` (`SkipReason::label()`, …) or
/// from names (a connector, a task), never from free text.
fn literal_labels(text: &str) -> Vec<usize> {
    let code = code_only(text);
    let tests_from = tests_start(text);
    let needle = b"with_label_values(";
    let mut out = Vec::new();
    let mut i = 0;
    while let Some(p) = code[i..tests_from.min(code.len())]
        .windows(needle.len())
        .position(|w| w == needle)
    {
        let open = i + p + needle.len() - 1;
        let end = closing(&code, open);
        // blanked bytes inside the call: a literal (or a comment) stood there
        if text.as_bytes()[open..end] != code[open..end] {
            out.push(code[..open].iter().filter(|&&c| c == b'\n').count() + 1);
        }
        i = end.max(open + 1);
    }
    out
}

#[test]
fn no_metric_label_is_a_string_literal() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut all = Vec::new();
    files(&src, &mut all);
    let mut found = Vec::new();
    for p in all.iter().filter(|p| !p.ends_with("metrics.rs")) {
        let text = std::fs::read_to_string(p).expect("readable");
        for line in literal_labels(&text) {
            found.push(format!("{}:{line}", p.strip_prefix(&src).unwrap_or(p).display()));
        }
    }
    assert!(
        found.is_empty(),
        "metric label values written as text (use a label enum of metrics.rs):\n{}",
        found.join("\n")
    );
    let probe = "fn f() {\n    M.with_label_values(&[c,\n        \"skipped\"]).inc();\n    M.with_label_values(&[c, r.label()]);\n}\n";
    assert_eq!(literal_labels(probe), vec![2]);
}
