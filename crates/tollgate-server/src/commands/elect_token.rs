//! `tollgate elect --token-file F`: the leadership's token kept for a
//! restart, and two guards so that a restart resumes only when the old
//! run is gone (resumed beside it, the leadership would have two holders
//! with one fence):
//!
//! - **The claim.** A run locks `F.lock` (flock, exclusive) for as long
//!   as it uses F, and its command inherits the lock's descriptor: the
//!   lock lasts while the run's tollgate, its command or anything the
//!   command started (and did not close it in) still lives, in any
//!   process group or PID namespace on the host. A run that cannot take
//!   it neither resumes nor touches F.
//! - **The owner.** F names the process that kept it (pid, process group,
//!   start time in clock ticks since boot, PID namespace, boot id); a
//!   restart does not resume while that process, or a process of the
//!   group it led, still runs: for a command that closed the inherited
//!   descriptor.
//!
//! The file: the token on the first line, then `pid=P pgid=G start=T
//! ns=N boot=B`. A file of the token alone (an older run's) is resumed
//! as before; a second line that does not parse is not.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use nix::fcntl::{FcntlArg, FdFlag, fcntl};

/// The most a token file may hold: a token and an owner line.
const MAX_FILE: u64 = 4096;

/// What a token file holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Kept {
    pub(crate) token: String,
    /// The run that wrote it: `None` for a file of the token alone,
    /// `Some(None)` for an owner line that does not parse.
    pub(crate) owner: Option<Option<Owner>>,
}

impl Kept {
    /// Why this token must not be resumed now, if it must not.
    pub(crate) fn in_use(&self) -> Option<String> {
        match &self.owner {
            None => None,
            Some(None) => Some("the file's second line does not name the run that kept it".into()),
            Some(Some(owner)) => owner.still_running(),
        }
    }
}

/// A process that kept a token, as the file names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Owner {
    pid: u32,
    pgid: u32,
    start: u64,
    /// The PID namespace (`/proc/self/ns/pid`'s link), in which pid and
    /// pgid mean something.
    ns: String,
    boot: String,
    /// The command it ran: pid and start time, once started.
    cmd: Option<(u32, u64)>,
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

fn pid_namespace() -> Option<String> {
    let link = std::fs::read_link("/proc/self/ns/pid").ok()?;
    // "pid:[4026531836]": its number.
    let text = link.to_string_lossy();
    let inner = text.strip_prefix("pid:[")?.strip_suffix(']')?;
    inner.parse::<u64>().ok().map(|n| n.to_string())
}

impl Owner {
    /// This process.
    pub(crate) fn current() -> Option<Owner> {
        let me = stat("self")?;
        Some(Owner {
            pid: std::process::id(),
            pgid: me.pgrp,
            start: me.start,
            ns: pid_namespace()?,
            boot: boot_id()?,
            cmd: None,
        })
    }

    /// The same, having started its command as `pid`.
    fn with_command(mut self, pid: u32) -> Owner {
        self.cmd = stat(&pid.to_string()).map(|s| (pid, s.start));
        self
    }

    fn line(&self) -> String {
        let mut line = format!(
            "pid={} pgid={} start={} ns={} boot={}",
            self.pid, self.pgid, self.start, self.ns, self.boot
        );
        if let Some((pid, start)) = self.cmd {
            line.push_str(&format!(" cmd={pid}:{start}"));
        }
        line
    }

    fn parse(line: &str) -> Option<Owner> {
        let mut owner = Owner {
            pid: 0,
            pgid: 0,
            start: 0,
            ns: String::new(),
            boot: String::new(),
            cmd: None,
        };
        for word in line.split_whitespace() {
            match word.split_once('=')? {
                ("pid", v) => owner.pid = v.parse().ok()?,
                ("pgid", v) => owner.pgid = v.parse().ok()?,
                ("start", v) => owner.start = v.parse().ok()?,
                ("ns", v) => owner.ns = v.to_owned(),
                ("boot", v) => owner.boot = v.to_owned(),
                ("cmd", v) => {
                    let (pid, start) = v.split_once(':')?;
                    owner.cmd = Some((pid.parse().ok()?, start.parse().ok()?));
                }
                _ => {}
            }
        }
        let complete = owner.pid > 0 && owner.pgid > 0 && !owner.ns.is_empty() && !owner.boot.is_empty();
        complete.then_some(owner)
    }

    /// What of that run still runs, in words, if anything: the process
    /// itself or its command (same pid and start time, not a zombie),
    /// or, when it led its process group, a live process of that group.
    /// Pids are compared in this PID namespace only; another namespace's
    /// or another boot's run is the claim's to tell. What cannot be read
    /// counts as running.
    pub(crate) fn still_running(&self) -> Option<String> {
        let cannot_tell =
            || Some("cannot tell whether the run that kept it still runs (/proc unreadable)".to_owned());
        let (Some(boot), Some(ns)) = (boot_id(), pid_namespace()) else {
            return cannot_tell();
        };
        if boot != self.boot || ns != self.ns {
            return None;
        }
        let alive = |s: &Stat| s.state != 'Z' && s.state != 'X';
        let runs =
            |pid: u32, start: u64| stat(&pid.to_string()).is_some_and(|s| s.start == start && alive(&s));
        if runs(self.pid, self.start) {
            return Some(format!(
                "the tollgate elect that kept it (pid {}) still runs",
                self.pid
            ));
        }
        if let Some((pid, start)) = self.cmd
            && runs(pid, start)
        {
            return Some(format!("its command (pid {pid}) still runs"));
        }
        // Its group, if it led one and the number is not another
        // process's now (Linux gives out no pid still naming a process
        // group: a reused number means the old group is empty).
        if self.pgid != self.pid || stat(&self.pid.to_string()).is_some_and(|s| s.start != self.start) {
            return None;
        }
        let Ok(entries) = std::fs::read_dir("/proc") else {
            return cannot_tell();
        };
        let member = entries.flatten().find_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let pid: u32 = name.parse().ok()?;
            let s = stat(&name)?;
            (s.pgrp == self.pgid && alive(&s)).then_some(pid)
        })?;
        Some(format!(
            "a process of its group (pid {member}, in the process group {} of the tollgate elect that kept it) still runs",
            self.pgid
        ))
    }
}

/// The token in `file`, if there is one (a missing file is none). Not
/// through a symbolic link, a regular file of at most 4 KiB.
pub(crate) fn read(file: &Path) -> Result<Option<Kept>, String> {
    let failed = |e: &dyn std::fmt::Display| format!("cannot read --token-file {}: {e}", file.display());
    let opened = OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_NONBLOCK)
        .open(file);
    let f = match opened {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(failed(&e)),
    };
    let meta = f.metadata().map_err(|e| failed(&e))?;
    if !meta.is_file() || meta.len() > MAX_FILE {
        return Err(failed(&"not a regular file of at most 4 KiB"));
    }
    let mut text = String::new();
    f.take(MAX_FILE)
        .read_to_string(&mut text)
        .map_err(|e| failed(&e))?;
    let mut lines = text.lines();
    let token = lines.next().unwrap_or("").trim();
    if token.is_empty() {
        return Ok(None);
    }
    let owner = lines.find(|l| !l.trim().is_empty()).map(Owner::parse);
    Ok(Some(Kept {
        token: token.to_owned(),
        owner,
    }))
}

/// A run's hold on its token file: an exclusive lock on `F.lock`,
/// passed on to the command ([`Claim::inherit`]). Dropped, this process
/// lets go of it (the command keeps it while it lives).
#[derive(Debug)]
pub(crate) struct Claim {
    lock: File,
}

impl Claim {
    /// Lets the next command started inherit the lock (its descriptor is
    /// kept open across exec), so it lasts while any of the run lives, a
    /// `kill -9` of tollgate alone included: the descriptor's number.
    pub(crate) fn inherit(&self) -> Result<i32, String> {
        use std::os::fd::AsRawFd;
        fcntl(&self.lock, FcntlArg::F_SETFD(FdFlag::empty()))
            .map_err(|e| format!("cannot pass the --token-file's lock on to the command: {e}"))?;
        Ok(self.lock.as_raw_fd())
    }
}

/// `F.lock` beside `F`.
fn lock_path(file: &Path) -> PathBuf {
    let mut name = file.file_name().unwrap_or_default().to_os_string();
    name.push(".lock");
    file.with_file_name(name)
}

/// Takes `F.lock` for this run and what it starts, or `None` while
/// another run (its tollgate, or its command) still holds it. The file
/// (made if missing, and left in place) must be a regular file of this
/// user's that no one else may write.
pub(crate) fn claim(file: &Path) -> Result<Option<Claim>, String> {
    use std::os::unix::fs::MetadataExt;
    let path = lock_path(file);
    let failed = |e: &dyn std::fmt::Display| format!("cannot lock {}: {e}", path.display());
    let made = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(nix::libc::O_NOFOLLOW)
        .open(&path);
    match made {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(failed(&e)),
    }
    // Read-only: a lock needs no more.
    let lock = OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_NONBLOCK)
        .open(&path)
        .map_err(|e| failed(&e))?;
    let meta = lock.metadata().map_err(|e| failed(&e))?;
    if !meta.is_file() || meta.uid() != nix::unistd::geteuid().as_raw() || meta.mode() & 0o022 != 0 {
        return Err(failed(
            &"not a regular file of this user's that only this user may write",
        ));
    }
    match lock.try_lock() {
        Ok(()) => Ok(Some(Claim { lock })),
        Err(TryLockError::WouldBlock) => Ok(None),
        Err(TryLockError::Error(e)) => Err(failed(&e)),
    }
}

/// Writes `token` and this process (with its command's pid, once
/// started) to `file` (mode 0600); under the claim (`_claim`), so no
/// other run writes it meanwhile. Without /proc the owner line names
/// nobody, and the token is not resumed.
pub(crate) fn write(file: &Path, token: &str, command: Option<u32>, _claim: &Claim) -> Result<(), String> {
    let owner = Owner::current().map(|o| match command {
        Some(pid) => o.with_command(pid),
        None => o,
    });
    let line = owner.map_or_else(|| "owner=unknown".to_owned(), |o| o.line());
    let text = format!("{token}\n{line}\n");
    // A temp file of this run's own beside it (created, so no planted
    // link is written through; one a crashed run with this pid left is
    // removed first), then renamed over it.
    let base = file
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = file.with_file_name(format!(".{base}.{}.tmp", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    let written = OpenOptions::new()
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
        let claim = claim(&file).expect("claim").expect("free");
        write(&file, "tok-1", None, &claim).expect("write");
        let kept = read(&file).expect("read").expect("a token");
        assert_eq!(kept.token, "tok-1");
        let owner = kept.owner.clone().expect("an owner line").expect("that parses");
        assert_eq!(Some(owner), Owner::current());
        // This process runs: the file's run is not gone.
        let why = kept.in_use().expect("this process runs");
        assert!(why.contains(&std::process::id().to_string()), "{why}");
    }

    #[test]
    fn an_older_file_of_the_token_alone_resumes_and_a_bad_owner_line_does_not() {
        let dir = tempfile::tempdir().expect("dir");
        let file = dir.path().join("token");
        std::fs::write(&file, "tok-2\n").expect("write");
        let kept = read(&file).expect("read").expect("a token");
        assert_eq!((kept.token.as_str(), &kept.owner), ("tok-2", &None));
        assert_eq!(kept.in_use(), None);
        std::fs::write(&file, "tok-3\nowner=unknown\n").expect("write");
        let kept = read(&file).expect("read").expect("a token");
        assert_eq!(kept.owner, Some(None));
        assert!(
            kept.in_use().is_some(),
            "a line that names nobody counts as in use"
        );
        assert_eq!(read(&dir.path().join("none")).expect("read"), None);
    }

    #[test]
    fn only_a_small_regular_file_is_read_never_through_a_link() {
        let dir = tempfile::tempdir().expect("dir");
        let big = dir.path().join("big");
        std::fs::write(&big, "x".repeat(5000)).expect("write");
        assert!(read(&big).is_err());
        let link = dir.path().join("link");
        std::os::unix::fs::symlink("/dev/zero", &link).expect("symlink");
        assert!(read(&link).is_err());
        assert!(read(dir.path()).is_err(), "a directory");
    }

    #[test]
    fn the_claim_is_one_runs_and_its_command_keeps_it() {
        let dir = tempfile::tempdir().expect("dir");
        let file = dir.path().join("token");
        let first = claim(&file).expect("claim").expect("free");
        assert!(claim(&file).expect("claim").is_none(), "claimed twice");
        // A command started under the claim holds it after this process
        // lets go, until it ends; the file names it meanwhile.
        first.inherit().expect("inherit");
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .expect("sleep");
        write(&file, "tok-4", Some(child.id()), &first).expect("write");
        drop(first);
        assert!(
            claim(&file).expect("claim").is_none(),
            "the command's hold was lost"
        );
        let kept = read(&file).expect("read").expect("a token");
        let owner = kept.owner.clone().expect("a line").expect("that parses");
        assert_eq!(owner.cmd.map(|c| c.0), Some(child.id()));
        // As if this process were gone (another pid, leading no group),
        // the command still answers for the run.
        let without_me = Owner {
            pid: 4_194_305,
            pgid: 4_194_306,
            ..owner
        };
        let why = without_me.still_running().expect("the command runs");
        assert!(why.contains("its command"), "{why}");
        child.kill().expect("kill");
        child.wait().expect("wait");
        assert_eq!(without_me.still_running(), None, "the command ended");
        assert!(
            claim(&file).expect("claim").is_some(),
            "free once all of the run is gone"
        );
    }

    #[test]
    fn a_lock_file_others_may_write_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("dir");
        let file = dir.path().join("token");
        drop(claim(&file).expect("claim").expect("free"));
        let lock = lock_path(&file);
        std::fs::set_permissions(&lock, std::fs::Permissions::from_mode(0o666)).expect("chmod");
        assert!(claim(&file).is_err(), "a lock file anyone may replace was used");
    }

    #[test]
    fn a_run_gone_or_elsewhere_is_not_running() {
        let me = Owner::current().expect("this process");
        // Another boot, or another PID namespace: its pids say nothing
        // here (the claim tells).
        for other in [
            Owner {
                boot: "another-boot".into(),
                ..me.clone()
            },
            Owner {
                ns: "1".into(),
                ..me.clone()
            },
        ] {
            assert_eq!(other.still_running(), None);
        }
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
