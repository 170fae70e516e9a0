//! The project's own files say true things: a LICENSE that is the license
//! Cargo.toml names, no invented repository URL, a changelog, and release
//! builds without debug info (the binary ships at about 20 MB, not 101 MB;
//! `--profile profiling` keeps line tables), and every error code the
//! sources answer with is in docs/HTTP.md's error table. `--version`
//! naming the commit is tested in cli_run.rs.

use std::path::Path;

fn read(file: &str) -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    std::fs::read_to_string(root.join(file)).unwrap_or_else(|e| panic!("{file}: {e}"))
}

#[test]
fn the_license_file_is_the_license_cargo_names() {
    let cargo: toml::Table = read("Cargo.toml").parse().expect("Cargo.toml");
    let license = cargo["workspace"]["package"]["license"]
        .as_str()
        .expect("license");
    assert_eq!(license, "Apache-2.0");
    let text = read("LICENSE");
    assert!(
        text.trim_start().starts_with("Apache License"),
        "LICENSE is not the Apache license"
    );
    assert!(text.contains("Version 2.0, January 2004"));
    // The Node client's package names the same one.
    let node: serde_json::Value =
        serde_json::from_str(&read("clients/node/package.json")).expect("package.json");
    assert_eq!(node["license"], license, "clients/node/package.json");
}

#[test]
fn no_invented_repository_url() {
    for file in [
        "Cargo.toml",
        "crates/tollgate/Cargo.toml",
        "crates/tollgate-server/Cargo.toml",
    ] {
        let text = read(file);
        assert!(!text.contains("example.invalid"), "{file} names an invented URL");
    }
}

#[test]
fn a_changelog_in_the_keep_a_changelog_form() {
    let text = read("CHANGELOG.md");
    assert!(text.starts_with("# Changelog"));
    assert!(text.contains("## [Unreleased]"));
    assert!(text.contains("keepachangelog.com"));
}

#[test]
fn release_builds_carry_no_debug_info_and_profiling_builds_do() {
    let cargo: toml::Table = read("Cargo.toml").parse().expect("Cargo.toml");
    let profiles = &cargo["profile"];
    let release = &profiles["release"];
    assert_eq!(release.get("debug").and_then(|d| d.as_bool()), Some(false));
    assert_eq!(release.get("strip").and_then(|s| s.as_str()), Some("debuginfo"));
    let profiling = &profiles["profiling"];
    assert_eq!(profiling["inherits"].as_str(), Some("release"));
    assert_eq!(profiling["debug"].as_integer(), Some(1));
}

/// Every `.rs` file under `dir`, recursively.
fn sources(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The string literal at the start of `rest` (after blanks and, if
/// `comma`, one comma), if it is a snake_case error code.
fn code_at(rest: &str, comma: bool) -> Option<&str> {
    let mut rest = rest.trim_start();
    if comma {
        rest = rest.strip_prefix(',')?.trim_start();
    }
    let rest = rest.strip_prefix('"')?;
    let code = &rest[..rest.find('"')?];
    let snake = !code.is_empty() && code.chars().all(|c| c.is_ascii_lowercase() || c == '_');
    snake.then_some(code)
}

/// The error codes a source answers with: the literal after a non-2xx
/// `StatusCode::X,`
/// (`ApiError::new`, the error tuples, the rooms' `json_error`) or the
/// first argument of `error_body(`.
fn answered_codes(text: &str) -> Vec<String> {
    let mut codes = Vec::new();
    for (at, _) in text.match_indices("StatusCode::") {
        let rest = &text[at + "StatusCode::".len()..];
        let name_end = rest
            .find(|c: char| !(c.is_ascii_uppercase() || c == '_'))
            .unwrap_or(0);
        // A success's literal (`(StatusCode::CREATED, "created")`) is no error.
        let success = ["OK", "CREATED", "ACCEPTED", "NO_CONTENT"].contains(&&rest[..name_end]);
        if name_end > 0 && !success {
            codes.extend(code_at(&rest[name_end..], true).map(str::to_owned));
        }
    }
    for (at, _) in text.match_indices("error_body(") {
        codes.extend(code_at(&text[at + "error_body(".len()..], false).map(str::to_owned));
    }
    codes
}

#[test]
fn every_error_code_the_server_answers_is_in_the_http_error_table() {
    let http = read("docs/HTTP.md");
    let table = &http[http.find("## Errors").expect("HTTP.md has an Errors section")..];
    let table = &table[..table[3..].find("\n## ").map_or(table.len(), |end| end + 3)];
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut files = Vec::new();
    sources(&root.join("crates/tollgate-server/src"), &mut files);
    sources(&root.join("crates/tollgate/src"), &mut files);
    let mut seen = std::collections::BTreeSet::new();
    for file in &files {
        seen.extend(answered_codes(&std::fs::read_to_string(file).unwrap()));
    }
    // The scan finds the codes it must (so it cannot pass by finding none).
    for known in [
        "bad_request",
        "holder_not_found",
        "schedule_not_found",
        "store_error",
    ] {
        assert!(seen.contains(known), "the scan missed {known}: {seen:?}");
    }
    let missing: Vec<_> = seen
        .iter()
        .filter(|code| !table.contains(&format!("`{code}`")))
        .collect();
    assert!(missing.is_empty(), "docs/HTTP.md's error table lacks {missing:?}");
}
