//! What `serve` prints itself, beside the logger's lines: the listening
//! line (standard output), and on standard error why it cannot start and
//! its shutdown notices. As text, or with `--log-format json` as one JSON
//! object a line in the logger's shape (`timestamp`, `level`, `target`,
//! `message`, then the fields), so that every line the server writes reads
//! the same way. Not through the logger: these lines show whatever
//! `TOLLGATE_LOG` filters out.

use std::sync::atomic::{AtomicBool, Ordering};

use serde_json::{Map, Value, json};

/// Whether lines are JSON (`--log-format json`); set once at start.
static JSON: AtomicBool = AtomicBool::new(false);

pub(super) fn use_json(json: bool) {
    JSON.store(json, Ordering::Relaxed);
}

/// Why the server cannot start or go on: `tollgate: <message>`.
pub(super) fn failure(message: &str) {
    eprintln!("{}", line("ERROR", "tollgate: ", message));
}

/// What the server does of its own accord (shutting down):
/// `tollgate serve: <message>`.
pub(super) fn notice(message: &str) {
    eprintln!("{}", line("INFO", "tollgate serve: ", message));
}

/// The listening line, on standard output: `tollgate serve: <text>`, or
/// in JSON the message `listening` with `fields`.
pub(super) fn listening(text: &str, fields: Map<String, Value>) {
    if JSON.load(Ordering::Relaxed) {
        println!("{}", object("INFO", "listening", fields));
    } else {
        println!("tollgate serve: {text}");
    }
}

/// One line: `prefix` and `message` as text, or the JSON object.
fn line(level: &str, prefix: &str, message: &str) -> String {
    if JSON.load(Ordering::Relaxed) {
        object(level, message, Map::new()).to_string()
    } else {
        format!("{prefix}{message}")
    }
}

/// The logger's shape: `fields` with the timestamp (UTC, microseconds),
/// level, target and message.
fn object(level: &str, message: &str, mut fields: Map<String, Value>) -> Value {
    let timestamp = chrono::DateTime::<chrono::Utc>::from(std::time::SystemTime::now())
        .to_rfc3339_opts(chrono::SecondsFormat::Micros, true);
    fields.insert("timestamp".to_owned(), json!(timestamp));
    fields.insert("level".to_owned(), json!(level));
    fields.insert("target".to_owned(), json!("tollgate::serve"));
    fields.insert("message".to_owned(), json!(message));
    Value::Object(fields)
}
