//! `tollgate elect --token-file`: the leadership's token kept for a
//! restart, with who kept it, so that a restart resumes only when the old
//! run is gone: neither the old `tollgate elect` nor, when it led its
//! process group, the command it ran (left behind by a `kill -9` of
//! tollgate alone) still runs on this machine.
//!
//! The file: the token on the first line, then
//! `pid=P pgid=G start=T boot=B` (this process, its process group, its
//! start in clock ticks since boot, `/proc/sys/kernel/random/boot_id`).
//! A file of the token alone (an older run's) is resumed as before.

use std::io::Write;
use std::path::Path;

/// What a token file holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Kept {
    pub(crate) token: String,
    /// The run that wrote it, when it said.
    pub(crate) owner: Option<Owner>,
}

/// A process that kept a token, as the file names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Owner {
    pid: u32,
    pgid: u32,
    start: u64,
    boot: String,
}

/// A process's figures from `/proc/<pid>/stat`.
struct Stat {
    state: char,
    pgrp: u32,
    start: u64,
}

fn stat(pid: &str) -> Option<Stat> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (in parentheses) may hold spaces and parentheses:
    // the fields are counted after its last ')'. Field 3 is the state,
    // 5 the process group, 22 the start time.
    let (_, rest) = text.rsplit_once(')')?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    Some(Stat {
        state: fields.first()?.chars().next()?,
        pgrp: fields.get(2)?.parse().ok()?,
        start: fields.get(19)?.parse().ok()?,
    })
}

fn boot_id() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .ok()
        .map(|s| s.trim().to_owned())
}

impl Owner {
    /// This process.
    pub(crate) fn current() -> Option<Owner> {
        let me = stat("self")?;
        Some(Owner {
            pid: std::process::id(),
            pgid: me.pgrp,
            start: me.start,
            boot: boot_id()?,
        })
    }

    fn line(&self) -> String {
        format!(
            "pid={} pgid={} start={} boot={}",
            self.pid, self.pgid, self.start, self.boot
        )
    }

    fn parse(line: &str) -> Option<Owner> {
        let mut owner = Owner {
            pid: 0,
            pgid: 0,
            start: 0,
            boot: String::new(),
        };
        for word in line.split_whitespace() {
            match word.split_once('=')? {
                ("pid", v) => owner.pid = v.parse().ok()?,
                ("pgid", v) => owner.pgid = v.parse().ok()?,
                ("start", v) => owner.start = v.parse().ok()?,
                ("boot", v) => owner.boot = v.to_owned(),
                _ => {}
            }
        }
        (owner.pid > 0 && owner.pgid > 0 && !owner.boot.is_empty()).then_some(owner)
    }

    /// What of that run still runs on this machine, in words, if
    /// anything: the process itself (same pid and start time, not a
    /// zombie), or, when it led its process group, a live process of that
    /// group (its command). A machine booted since (another boot id) runs
    /// none of it.
    pub(crate) fn still_running(&self) -> Option<String> {
        if boot_id().as_deref() != Some(self.boot.as_str()) {
            return None;
        }
        let alive = |s: &Stat| s.state != 'Z' && s.state != 'X';
        match stat(&self.pid.to_string()) {
            Some(s) if s.start == self.start && alive(&s) => {
                return Some(format!("the tollgate elect that kept it (pid {})", self.pid));
            }
            // The pid is another process's now: Linux gives out no pid
            // still naming a process group, so the old group is empty.
            Some(s) if s.start != self.start => return None,
            _ => {}
        }
        if self.pgid != self.pid {
            return None;
        }
        let entries = std::fs::read_dir("/proc").ok()?;
        let member = entries.flatten().find_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let pid: u32 = name.parse().ok()?;
            let s = stat(&name)?;
            (s.pgrp == self.pgid && alive(&s)).then_some(pid)
        })?;
        Some(format!(
            "its command (pid {member}, in the process group {} of the tollgate elect that kept it)",
            self.pgid
        ))
    }
}

/// The token in `file`, if there is one (a missing file is none).
pub(crate) fn read(file: &Path) -> Result<Option<Kept>, String> {
    match std::fs::read_to_string(file) {
        Ok(s) => {
            let mut lines = s.lines();
            let token = lines.next().unwrap_or("").trim();
            if token.is_empty() {
                return Ok(None);
            }
            let owner = lines.next().and_then(Owner::parse);
            Ok(Some(Kept {
                token: token.to_owned(),
                owner,
            }))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(format!("cannot read --token-file {}: {e}", file.display())),
    }
}

/// Writes `token` and this process to `file` (mode 0600).
pub(crate) fn write(file: &Path, token: &str) -> Result<(), String> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut text = format!("{token}\n");
    if let Some(owner) = Owner::current() {
        text.push_str(&owner.line());
        text.push('\n');
    }
    // A temp file of this run's own beside it (created, never reused, so
    // no other run's file and no planted link is written through), then
    // renamed over it.
    let base = file
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = file.with_file_name(format!(".{base}.{}.tmp", std::process::id()));
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .and_then(|mut f| f.write_all(text.as_bytes()).and_then(|()| f.sync_all()))
        .and_then(|()| std::fs::rename(&tmp, file));
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written.map_err(|e| format!("cannot write --token-file {}: {e}", file.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_says_who_kept_it_and_reads_back() {
        let dir = tempfile::tempdir().expect("dir");
        let file = dir.path().join("token");
        write(&file, "tok-1").expect("write");
        let kept = read(&file).expect("read").expect("a token");
        assert_eq!(kept.token, "tok-1");
        let owner = kept.owner.expect("the owner line");
        assert_eq!(Some(owner.clone()), Owner::current());
        // This process runs: the file's run is not gone.
        let running = owner.still_running().expect("this process runs");
        assert!(running.contains(&std::process::id().to_string()), "{running}");
    }

    #[test]
    fn an_older_file_of_the_token_alone_still_reads() {
        let dir = tempfile::tempdir().expect("dir");
        let file = dir.path().join("token");
        std::fs::write(&file, "tok-2\n").expect("write");
        let kept = read(&file).expect("read").expect("a token");
        assert_eq!((kept.token.as_str(), kept.owner), ("tok-2", None));
        std::fs::write(&file, "tok-3\nnot an owner line\n").expect("write");
        assert_eq!(read(&file).expect("read").expect("a token").owner, None);
        assert_eq!(read(&dir.path().join("none")).expect("read"), None);
    }

    #[test]
    fn a_run_gone_or_on_another_boot_is_not_running() {
        let me = Owner::current().expect("this process");
        // Another boot: nothing of it runs here, whatever its pid.
        let other_boot = Owner {
            boot: "another-boot".into(),
            ..me.clone()
        };
        assert_eq!(other_boot.still_running(), None);
        // This pid with another start time: the pid was given out again.
        let reused = Owner {
            start: me.start + 1,
            pgid: me.pid + 1,
            ..me.clone()
        };
        assert_eq!(reused.still_running(), None);
        // A pid nobody has (above pid_max), leading a group nobody is in.
        let gone = Owner {
            pid: 4_194_305,
            pgid: 4_194_305,
            ..me
        };
        assert_eq!(gone.still_running(), None);
    }
}
