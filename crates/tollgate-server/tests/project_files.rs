//! The project's own files say true things: a LICENSE that is the license
//! Cargo.toml names, no invented repository URL, a changelog, and release
//! builds without debug info (the binary ships at about 20 MB, not 101 MB;
//! `--profile profiling` keeps line tables). `--version` naming the commit
//! is tested in cli_run.rs.

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
