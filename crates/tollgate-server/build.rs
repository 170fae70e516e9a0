//! Records the git commit the binary is built from (`TOLLGATE_COMMIT`),
//! for `tollgate --version` and `tollgate_build_info`. Outside a git
//! checkout (a source tarball) it is `unknown`.

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    let text = String::from_utf8(out.stdout).ok()?;
    (out.status.success() && !text.trim().is_empty()).then(|| text.trim().to_owned())
}

fn main() {
    let commit = git(&["rev-parse", "--short=12", "HEAD"]).unwrap_or_else(|| "unknown".to_owned());
    println!("cargo:rustc-env=TOLLGATE_COMMIT={commit}");
    // Build again when HEAD moves: a commit, a checkout or a reset writes
    // the git dir's HEAD log (in a worktree too).
    if let Some(dir) = git(&["rev-parse", "--absolute-git-dir"]) {
        println!("cargo:rerun-if-changed={dir}/HEAD");
        println!("cargo:rerun-if-changed={dir}/logs/HEAD");
    }
    println!("cargo:rerun-if-changed=build.rs");
}
