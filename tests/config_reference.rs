//! docs/configuration.md's key table is generated from the key table validation uses
//! (`src/config/keys.rs`), so the reference cannot drift from what the loader accepts.
//! `LAKESTREAM_BLESS=1 cargo test --test config_reference` rewrites it.

use std::path::Path;

use lakestream::config::KEYS;

const BEGIN: &str = "<!-- keys:begin -->";
const END: &str = "<!-- keys:end -->";

fn cell(text: &str) -> String {
    text.replace('|', "\\|")
}

fn table() -> String {
    let mut out = String::from("| key | default | formats | meaning |\n|---|---|---|---|\n");
    for (key, default, meaning, formats) in KEYS {
        let default = match default.starts_with('(') {
            true => cell(default),
            false => format!("`{}`", cell(default)),
        };
        out.push_str(&format!(
            "| `{key}` | {default} | {} | {} |\n",
            formats.names(),
            cell(meaning)
        ));
    }
    out
}

#[test]
fn the_configuration_reference_is_generated_from_the_key_table() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/configuration.md");
    let text = std::fs::read_to_string(&path).expect("docs/configuration.md");
    let (Some(b), Some(e)) = (text.find(BEGIN), text.find(END)) else {
        panic!("docs/configuration.md has no {BEGIN} … {END} markers");
    };
    let current = &text[b + BEGIN.len()..e];
    let wanted = format!("\n{}", table());
    if std::env::var_os("LAKESTREAM_BLESS").is_some() {
        let new = format!("{}{BEGIN}{wanted}{}", &text[..b], &text[e..]);
        std::fs::write(&path, new).expect("write docs/configuration.md");
        return;
    }
    assert!(
        current == wanted,
        "docs/configuration.md's key table differs from src/config/keys.rs: run \
         `LAKESTREAM_BLESS=1 cargo test --test config_reference`"
    );
}
