//! tollgate.example.toml with its commented-out settings uncommented
//! (shared by tests/example_config.rs and serve/settings.rs's tests).
#![allow(dead_code, unreachable_pub)]

/// `text` with each line that is `#` then a key or a table (`#key = …`,
/// `#[table]`) uncommented; prose comments start `# ` and stay.
pub fn uncommented(text: &str) -> String {
    text.lines()
        .map(|l| match l.strip_prefix('#') {
            Some(setting) if setting.starts_with(|c: char| c.is_ascii_lowercase() || c == '[') => setting,
            _ => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}
