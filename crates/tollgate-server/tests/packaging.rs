//! What installs tollgate without Rust: the shell completions and the
//! manual page the binary prints, and the hardened systemd unit in
//! deploy/ (checked with `systemd-analyze verify`, and rated by `systemd-analyze
//! security --offline`, against the binary built here).

use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_tollgate");

fn run(args: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new(BIN).args(args).output().expect("run tollgate");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn completions_cover_every_command_and_flag() {
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let (code, out, err) = run(&["completions", shell]);
        assert_eq!(code, Some(0), "{shell}: {err}");
        for word in ["serve", "schedule", "cors-origin", "redis"] {
            assert!(out.contains(word), "{shell}: {word} missing");
        }
    }
    // The bash script is valid bash.
    let (_, script, _) = run(&["completions", "bash"]);
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("tollgate.bash");
    std::fs::write(&path, &script).expect("write");
    let check = Command::new("bash")
        .arg("-n")
        .arg(&path)
        .output()
        .expect("bash is installed");
    assert!(
        check.status.success(),
        "{}",
        String::from_utf8_lossy(&check.stderr)
    );
    let (code, _, err) = run(&["completions", "tcsh"]);
    assert_eq!(code, Some(64), "{err}");
    assert!(err.contains("invalid value 'tcsh'"), "{err}");
}

#[test]
fn the_manual_page_has_every_subcommand() {
    let (code, page, err) = run(&["man"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(
        page.starts_with(".ie") || page.starts_with(".TH"),
        "roff: {}",
        &page[..40]
    );
    assert!(page.contains(".TH tollgate 1"));
    for section in [
        "TOLLGATE SERVE",
        "TOLLGATE LOCK RUN",
        "TOLLGATE JOBS WORK",
        "TOLLGATE SCHEDULE ADD",
        "TOLLGATE BENCH",
    ] {
        assert!(page.contains(&format!(".SH \"{section}\"")), "{section} missing");
    }
    assert!(page.contains(r"\-\-cors\-origin"), "serve's flags are in it");
    // One page: it names no other page (clap_mangen's `tollgate-serve(1)`).
    assert!(!page.contains("(1)"), "names a page that is not made");
    assert!(page.contains(r"\fBtollgate serve\fR"), "the subcommand index");
}

#[test]
fn the_manual_page_lists_the_readme_exit_codes() {
    let (code, page, err) = run(&["man"]);
    assert_eq!(code, Some(0), "{err}");
    let section = page
        .split(".SH \"EXIT STATUS\"")
        .nth(1)
        .expect("an EXIT STATUS section");
    let section = &section[..section.find("\n.SH").unwrap_or(section.len())];
    let listed: Vec<&str> = section
        .lines()
        .filter_map(|l| l.strip_prefix(r"\fB")?.strip_suffix(r"\fR"))
        .collect();
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md")).expect("README.md");
    let table = &readme[readme
        .find("| exit code | meaning |")
        .expect("README's exit codes")..];
    let mut documented = Vec::new();
    for row in table.lines().skip(2).take_while(|l| l.starts_with('|')) {
        let cell = row.split('|').nth(1).expect("a cell").trim();
        documented.extend(cell.split(" / ").filter(|c| c.parse::<i32>().is_ok()));
    }
    assert!(documented.len() >= 10, "README's table: {documented:?}");
    for code in &documented {
        assert!(
            listed.contains(code),
            "exit {code} is in README.md, not in the man page: {listed:?}"
        );
    }
    for code in listed.iter().filter(|c| c.parse::<i32>().is_ok_and(|c| c != 0)) {
        assert!(
            documented.contains(code),
            "exit {code} is in the man page, not in README.md"
        );
    }
    assert!(listed.contains(&"the command's own"), "{listed:?}");
}

#[test]
fn the_systemd_unit_verifies_and_is_hardened() {
    let unit = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../deploy/tollgate.service"
    ))
    .expect("deploy/tollgate.service");
    assert!(unit.contains("ExecStart=/usr/local/bin/tollgate serve"));
    // Checked against this build's binary (verify wants ExecStart to exist).
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("tollgate.service");
    std::fs::write(&path, unit.replace("/usr/local/bin/tollgate", BIN)).expect("write");
    let verify = Command::new("systemd-analyze")
        .args(["verify", "--man=no"])
        .arg(&path)
        .output()
        .expect("systemd-analyze is installed (Debian: systemd; scripts/test installs it)");
    let said = String::from_utf8_lossy(&verify.stderr);
    assert!(verify.status.success() && said.trim().is_empty(), "{said}");
    // At most 1.9 of 10 exposed (the threshold counts tenths): systemd's
    // "OK", its best band. (This unit: 1.4.)
    let rated = Command::new("systemd-analyze")
        .args(["security", "--offline=yes", "--no-pager", "--threshold=19"])
        .arg(&path)
        .output()
        .expect("systemd-analyze");
    let report = String::from_utf8_lossy(&rated.stdout);
    assert!(
        rated.status.success(),
        "{report}{}",
        String::from_utf8_lossy(&rated.stderr)
    );
    assert!(
        report.contains("Overall exposure level for tollgate.service"),
        "{report}"
    );
}
