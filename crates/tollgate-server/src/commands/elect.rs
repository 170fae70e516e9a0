//! `tollgate elect`: run a command while this candidate leads an election
//! (stopped with exit 76 when leadership is lost), or `--observe` it and
//! print each change of leader as a JSON line.

use std::ffi::OsString;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use clap::Args;
use reqwest::Method;
use serde_json::{Value, json};
use tollgate::{Election, GateOptions, Leader};

use super::remote_lease::{Ask, Remote};
use super::run::{Held, Job, holder_label, supervise};
use super::{StoreArgs, elect_token};
use crate::args::duration;
use crate::client::{Server, Timeout, segment};
use crate::exit;

/// `elect --help`'s last words.
pub(crate) const ELECT_EXIT_CODES: &str = "Exit codes: the command's own once it ran as leader (after it \
     exits, leadership is resigned: the next candidate leads at once); 64 bad arguments; \
     69 the store or server is unreachable; 70 an internal error; 74 the --token-file cannot be \
     read or written; 75 the server's rate limit refused this client; 76 leadership was lost while \
     the command ran (it got SIGTERM); 77 an admin removed this candidate from the line (`lock \
     remove`); 78 the set-up is wrong; 126/127 the command could not be started / was not found. \
     --observe: 0 after --count lines.";

#[derive(Debug, Args)]
pub(crate) struct ElectArgs {
    /// Name of the election (letters, digits, _ - . : / @). It is a lock
    /// of that name: its holder leads.
    pub(crate) name: String,
    /// Who this candidate is, shown to observers and in `lock status`
    /// (1 to 64 printable ASCII characters) [default: host, pid and start].
    #[arg(long, value_name = "TEXT")]
    pub(crate) label: Option<String>,
    /// Do not campaign: print the leader now, then each change, as JSON
    /// lines ({"leader": {...} or null, "at_ms": ...}) until stopped.
    #[arg(long, conflicts_with_all = ["label", "token_file", "command"])]
    pub(crate) observe: bool,
    /// With --observe: exit 0 after this many lines.
    #[arg(long, requires = "observe", value_name = "N")]
    pub(crate) count: Option<u64>,
    /// Lease length; renewed every third of it while leading. A leader
    /// that dies is replaced within about this long.
    #[arg(long, default_value = "30s", value_parser = duration, allow_hyphen_values = true, value_name = "D")]
    pub(crate) ttl: Duration,
    /// How long a waiting candidate may go without a heartbeat (it sends
    /// one at least every second) before it loses its place in line.
    #[arg(long, default_value = "10s", value_parser = duration, allow_hyphen_values = true, value_name = "D")]
    pub(crate) heartbeat: Duration,
    /// Keep the leadership's token in this file (mode 0600) while leading,
    /// and at start resume the leadership it names, if it is still held,
    /// instead of waiting out its lease: a restarted leader leads on at
    /// once. Only whoever can read the file can resume, and not while the
    /// run that kept it, or its command, still runs on this machine (each
    /// run locks FILE.lock, and its command inherits the lock).
    #[arg(long, value_name = "FILE")]
    pub(crate) token_file: Option<PathBuf>,
    #[command(flatten)]
    pub(crate) store: StoreArgs,
    /// The command to run while leading, after `--`.
    #[arg(last = true, num_args = 1.., value_name = "CMD", required_unless_present = "observe")]
    pub(crate) command: Vec<OsString>,
}

pub(crate) async fn elect(args: ElectArgs) -> i32 {
    if let Err(e) = tollgate::Name::new(&args.name) {
        eprintln!("tollgate: {}", e.message());
        return exit::USAGE;
    }
    for (flag, d) in [("--ttl", args.ttl), ("--heartbeat", args.heartbeat)] {
        if d < tollgate::MIN_TTL || d > tollgate::MAX_TTL {
            eprintln!("tollgate: {flag} must be between 10ms and 24h");
            return exit::USAGE;
        }
    }
    let label = args.label.clone().unwrap_or_else(holder_label);
    if label.is_empty() || label.len() > 64 || !label.bytes().all(|b| (b' '..=b'~').contains(&b)) {
        eprintln!("tollgate: --label must be 1 to 64 printable ASCII characters");
        return exit::USAGE;
    }
    if args.observe {
        return match &args.store.server {
            Some(server) => observe_remote(server, &args).await,
            None => observe_local(&args).await,
        };
    }
    let (file, kept) = match token_file(&args) {
        Ok(f) => f,
        Err(code) => return code,
    };
    let held = match &args.store.server {
        Some(server) => lead_remote(server, &args, &label, kept.as_deref()).await,
        None => lead_local(&args, &label, kept.as_deref()).await,
    };
    let held = match held {
        Ok(h) => h,
        Err(code) => return code,
    };
    let fence = held.fence();
    let mut env = vec![("TOLLGATE_LEADER", label.clone())];
    if let Some((file, claim)) = &file {
        // The token, then the lock passed on to the command (its number
        // in TOLLGATE_LOCK_FD: a command may close it in long-lived
        // helpers it starts, which would otherwise hold it after the run).
        let kept = elect_token::write(file, held.token(), None, claim).and_then(|()| claim.inherit());
        match kept {
            Ok(fd) => env.push(("TOLLGATE_LOCK_FD", fd.to_string())),
            Err(e) => {
                eprintln!("tollgate: {e}");
                let _ = held.release().await;
                return exit::IO;
            }
        }
    }
    let token = held.token().to_owned();
    // Once the command runs, the file names it too.
    let note_command = |pid: u32| {
        if let Some((file, claim)) = &file
            && let Err(e) = elect_token::write(file, &token, Some(pid), claim)
        {
            tracing::warn!(error = %e, "cannot name the command in the --token-file");
        }
    };
    let job = Job {
        name: &args.name,
        command: &args.command,
        min_hold: None,
        max_hold: None,
        env,
        on_spawn: Some(&note_command),
    };
    let code = supervise(held, &job, "leadership of election").await;
    // Under the claim: no other run's file is removed.
    if let Some((file, _claim)) = &file {
        let _ = std::fs::remove_file(file);
    }
    tracing::debug!(fence, code, "leadership ended");
    code
}

/// The --token-file as this run holds it: the file and its claim.
type ClaimedFile<'a> = Option<(&'a Path, elect_token::Claim)>;

/// The --token-file, claimed for this run, and the token to resume, if
/// any. A file another run still holds is left alone (no resume, no
/// writes), and a token whose run still goes on is not resumed: resumed
/// beside it, the leadership would have two holders with one fence.
fn token_file(args: &ElectArgs) -> Result<(ClaimedFile<'_>, Option<String>), i32> {
    let Some(file) = args.token_file.as_deref() else {
        return Ok((None, None));
    };
    let io = |e: String| {
        eprintln!("tollgate: {e}");
        exit::IO
    };
    let Some(claim) = elect_token::claim(file).map_err(io)? else {
        eprintln!(
            "tollgate: the --token-file {} is another run's, which still goes on (its tollgate or \
             its command holds {}.lock): not resuming, campaigning as a new candidate without the file",
            file.display(),
            file.display()
        );
        return Ok((None, None));
    };
    let kept = elect_token::read(file).map_err(io)?;
    let token = kept.and_then(|k| match k.in_use() {
        Some(why) => {
            eprintln!(
                "tollgate: not resuming the leadership in the --token-file: {why}; campaigning as a \
                 new candidate"
            );
            None
        }
        None => Some(k.token),
    });
    Ok((Some((file, claim)), token))
}

fn options(args: &ElectArgs) -> GateOptions {
    GateOptions {
        ttl: args.ttl,
        heartbeat: args.heartbeat,
        ..GateOptions::default()
    }
}

/// Resumes with the kept token, else campaigns until leading.
async fn lead_local(args: &ElectArgs, label: &str, kept: Option<&str>) -> Result<Held, i32> {
    let store = args.store.connect().await?;
    let election = Election::with_options(&store, &args.name, options(args)).map_err(|e| {
        eprintln!("tollgate: {}", e.message());
        exit::for_error(&e)
    })?;
    let failed = |e: tollgate::Error| {
        eprintln!("tollgate: cannot campaign in election {:?}: {e}", args.name);
        exit::for_error(&e)
    };
    if let Some(token) = kept {
        match election.resume(token).await {
            Ok(Some(l)) => {
                eprintln!(
                    "tollgate: resumed leadership of {:?} (fence {})",
                    args.name,
                    l.fence()
                );
                return Ok(Held::Local(l.into_lease()));
            }
            Ok(None) => {}
            Err(e) if e.kind() == tollgate::ErrorKind::InvalidInput => {}
            Err(e) => return Err(failed(e)),
        }
    }
    loop {
        match election.campaign(label, tollgate::MAX_TTL).await {
            Ok(Some(l)) => return Ok(Held::Local(l.into_lease())),
            Ok(None) => continue,
            Err(e) => return Err(failed(e)),
        }
    }
}

async fn lead_remote(server: &str, args: &ElectArgs, label: &str, kept: Option<&str>) -> Result<Held, i32> {
    let remote = Remote::new(server, &args.name, args.store.server_token.clone()).map_err(|f| {
        eprintln!("tollgate: {}", f.message);
        f.code
    })?;
    if let Some(token) = kept {
        match remote.resume(&args.name, token, args.ttl).await {
            Ok(Some(l)) => {
                eprintln!(
                    "tollgate: resumed leadership of {:?} (fence {})",
                    args.name, l.fence
                );
                return Ok(Held::Remote(l));
            }
            Ok(None) => {}
            Err(f) => {
                eprintln!("tollgate: {}", f.message);
                return Err(f.code);
            }
        }
    }
    loop {
        let ask = Ask {
            capacity: Some(1),
            permits: 1,
            ttl: args.ttl,
            heartbeat: args.heartbeat,
            wait: tollgate::MAX_TTL,
            label,
            max_hold: None,
        };
        match remote.acquire(&ask).await {
            Ok(Some(l)) => return Ok(Held::Remote(l)),
            Ok(None) => continue,
            Err(f) => {
                eprintln!(
                    "tollgate: cannot campaign in election {:?}: {}",
                    args.name, f.message
                );
                return Err(f.code);
            }
        }
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

fn leader_line(leader: Option<&Leader>) -> Value {
    let leader = leader.map(|l| {
        json!({
            "label": l.label,
            "fence": l.fence,
            "since_ms": l.since_ms,
            "ttl_ms": l.ttl.as_millis() as u64,
            "handle": l.handle,
        })
    });
    json!({"leader": leader, "at_ms": now_ms()})
}

/// Prints `line` on its own line; false once stdout is gone.
fn print(line: &Value) -> bool {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}").and_then(|()| out.flush()).is_ok()
}

async fn observe_local(args: &ElectArgs) -> i32 {
    let store = match args.store.connect().await {
        Ok(s) => s,
        Err(code) => return code,
    };
    let election = match Election::new(&store, &args.name) {
        Ok(e) => e,
        Err(e) => {
            eprintln!("tollgate: {}", e.message());
            return exit::for_error(&e);
        }
    };
    let mut observer = election.observe();
    let mut printed = 0;
    loop {
        let read = match observer.next().await {
            // Once it has answered, a store that stops answering (Redis
            // restarting or failing over) is waited for; one down from
            // the start is an error at once.
            Err(e) if e.is_unavailable() && printed > 0 => answers_again(&election).await.map(|()| None),
            read => read.map(Some),
        };
        match read {
            Ok(Some(leader)) => {
                if !print(&leader_line(leader.as_ref())) {
                    return 0;
                }
                printed += 1;
                if args.count.is_some_and(|n| printed >= n) {
                    return 0;
                }
            }
            Ok(None) => {}
            Err(e) => {
                eprintln!("tollgate: cannot read election {:?}: {e}", args.name);
                return exit::for_error(&e);
            }
        }
    }
}

/// Reads `election` again until the store answers, for up to
/// RECONNECT_FOR.
async fn answers_again(election: &Election) -> tollgate::Result<()> {
    let since = Instant::now();
    loop {
        tokio::time::sleep(RECONNECT_PAUSE).await;
        match election.state().await {
            Ok(_) => return Ok(()),
            Err(e) if e.is_unavailable() && since.elapsed() < RECONNECT_FOR => {}
            Err(e) => return Err(e),
        }
    }
}

/// Follows `GET /v1/elections/{name}/events`, printing the hello's leader
/// and each `leader` event's; reconnects with `Last-Event-ID` when the
/// stream breaks, for as long as the server can be reached.
async fn observe_remote(server: &str, args: &ElectArgs) -> i32 {
    let server = match Server::new(server, args.store.server_token.clone(), Timeout::Connect) {
        Ok(s) => s,
        Err(f) => {
            eprintln!("tollgate: {}", f.message);
            return f.code;
        }
    };
    let path = format!("/v1/elections/{}/events", segment(&args.name));
    let mut last_id: Option<String> = None;
    let mut printed = 0;
    // When the stream last broke (None before it first answered): a
    // server that does not answer again (a restart) is retried until
    // RECONNECT_FOR has passed.
    let mut broken: Option<Instant> = None;
    loop {
        let mut req = server.request(Method::GET, &path);
        if let Some(id) = &last_id {
            req = req.header("last-event-id", id);
        }
        let retrying = broken.is_some_and(|since| since.elapsed() < RECONNECT_FOR);
        let mut resp = match req.send().await {
            Ok(r) if r.status().is_success() => r,
            // A server starting again may answer 503 until it reaches
            // its store.
            Ok(r) if retrying && r.status() == reqwest::StatusCode::SERVICE_UNAVAILABLE => {
                tokio::time::sleep(RECONNECT_PAUSE).await;
                continue;
            }
            Ok(r) => {
                let status = r.status().as_u16();
                let body = r.json::<Value>().await.unwrap_or(Value::Null);
                let answer = crate::client::Answer { status, body };
                let f = server.failure(&answer);
                eprintln!("tollgate: {}", f.message);
                return f.code;
            }
            Err(_) if retrying => {
                tokio::time::sleep(RECONNECT_PAUSE).await;
                continue;
            }
            Err(e) => {
                eprintln!(
                    "tollgate: cannot reach the tollgate server: {}",
                    crate::client::with_causes(&e)
                );
                return exit::UNAVAILABLE;
            }
        };
        let mut events = SseLines::default();
        loop {
            let chunk = match resp.chunk().await {
                Ok(Some(c)) => c,
                // Ended or broke: reconnect, resuming after the last id.
                Ok(None) | Err(_) => break,
            };
            for (event, id, data) in events.push(&chunk) {
                if let Some(id) = id {
                    last_id = Some(id);
                }
                let Ok(data) = serde_json::from_str::<Value>(&data) else {
                    continue;
                };
                let line = match event.as_str() {
                    // A reconnect's hello repeats what was printed unless
                    // the leader changed meanwhile.
                    "hello" if data["changed"] == json!(false) => continue,
                    "hello" | "leader" => json!({"leader": data["leader"], "at_ms": now_ms()}),
                    _ => continue,
                };
                if event == "hello"
                    && let Some(id) = data["id"].as_u64()
                {
                    last_id = Some(id.to_string());
                }
                if !print(&line) {
                    return 0;
                }
                printed += 1;
                if args.count.is_some_and(|n| printed >= n) {
                    return 0;
                }
            }
        }
        broken = Some(Instant::now());
        tokio::time::sleep(RECONNECT_PAUSE).await;
    }
}

/// How long `--observe` tries again while the store, or a server whose
/// stream broke, does not answer (a restart, a failover) before it exits 69.
const RECONNECT_FOR: Duration = Duration::from_secs(30);

/// The pause between two reconnects.
const RECONNECT_PAUSE: Duration = Duration::from_millis(200);

/// Server-Sent Events split from a byte stream: (event, id, data) of
/// each complete event.
#[derive(Debug, Default)]
struct SseLines {
    buf: String,
    event: String,
    id: Option<String>,
    data: String,
}

impl SseLines {
    fn push(&mut self, chunk: &[u8]) -> Vec<(String, Option<String>, String)> {
        self.buf.push_str(&String::from_utf8_lossy(chunk));
        let mut out = Vec::new();
        while let Some(end) = self.buf.find('\n') {
            let line: String = self.buf.drain(..=end).collect();
            let line = line.trim_end_matches(['\n', '\r']);
            if line.is_empty() {
                if !self.data.is_empty() {
                    let event = std::mem::take(&mut self.event);
                    let event = if event.is_empty() {
                        "message".to_owned()
                    } else {
                        event
                    };
                    out.push((event, self.id.take(), std::mem::take(&mut self.data)));
                }
                self.event.clear();
                continue;
            }
            let (field, value) = line.split_once(':').unwrap_or((line, ""));
            let value = value.strip_prefix(' ').unwrap_or(value);
            match field {
                "event" => self.event = value.to_owned(),
                "id" => self.id = Some(value.to_owned()),
                "data" => {
                    if !self.data.is_empty() {
                        self.data.push('\n');
                    }
                    self.data.push_str(value);
                }
                _ => {}
            }
        }
        out
    }
}
