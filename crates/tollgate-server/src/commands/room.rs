//! `tollgate room verify-draw`: checks a waiting room's published draw
//! (`GET /.tollgate/{room}/draw`, or a saved copy of it) on this machine,
//! trusting nothing the room says but what it published before the
//! opening: the seed hashes to the commitment, every draw id stands in
//! the order its key under the seed gives, and, with a receipt, the id
//! stands at its place (docs/ROOMS.md, The draw).

use std::time::Duration;

use clap::{Args, Subcommand};
use reqwest::Method;
use serde_json::{Value, json};

use crate::args::duration;
use crate::client::{Failure, Server, Timeout, failure, usage};
use crate::exit;
use crate::room::draw;

#[derive(Debug, Subcommand)]
pub(crate) enum RoomCommand {
    /// Check a room's draw at opening: its seed against the commitment
    /// published before the opening, the order of every draw id, and a
    /// receipt (--id and --place).
    #[command(
        after_help = "Exit codes: 0 the draw (and the receipt) check; 1 they do not (the \
message says what does not hold, or the room no longer has the draw's list); 64 bad arguments, or not a draw; 69 the room cannot be reached; \
75 the draw is not revealed yet (before the opening); 78 the room's TLS certificate is not trusted."
    )]
    VerifyDraw(VerifyArgs),
}

#[derive(Debug, Args)]
pub(crate) struct VerifyArgs {
    /// The draw: the room's URL of it (http(s)://HOST/.tollgate/ROOM/draw;
    /// every page is read), or a file holding its JSON with every id (`-`:
    /// standard input).
    #[arg(value_name = "URL|FILE")]
    pub(crate) draw: String,
    /// A receipt's draw id (from the visitor's status: `draw.id`).
    #[arg(long, requires = "place", value_name = "ID")]
    pub(crate) id: Option<String>,
    /// The receipt's place (from 1).
    #[arg(long, requires = "id", value_name = "N")]
    pub(crate) place: Option<u64>,
    /// The commitment you saved before the opening (hex): the draw's must
    /// be the same (without it, the seed is checked against the
    /// commitment in the same answer only).
    #[arg(long, value_name = "HEX")]
    pub(crate) commitment: Option<String>,
    /// Give up on each page of the room's answer after this long.
    #[arg(long, default_value = "30s", value_parser = duration, allow_hyphen_values = true, value_name = "D")]
    pub(crate) timeout: Duration,
}

pub(crate) async fn run(command: RoomCommand) -> i32 {
    let RoomCommand::VerifyDraw(args) = command;
    match verify(&args).await {
        Ok(out) => {
            println!("{out}");
            0
        }
        Err(f) => {
            eprintln!("tollgate: {}", f.message);
            f.code
        }
    }
}

async fn verify(args: &VerifyArgs) -> Result<Value, Failure> {
    let doc = if args.draw.starts_with("http://") || args.draw.starts_with("https://") {
        fetch(&args.draw, args.timeout).await?
    } else {
        read(&args.draw)?
    };
    let text = |k: &str| doc[k].as_str().map(str::to_owned);
    match doc["status"].as_str() {
        Some("drawn") => {}
        Some("expired") => {
            return Err(failure(
                exit::REFUSED,
                "the room no longer has the draw's list (kept 7 days): check a copy saved earlier",
            ));
        }
        Some("pending" | "drawing") => {
            return Err(failure(
                exit::BUSY,
                "the draw is not revealed yet: it is, once admissions start",
            ));
        }
        _ => {
            return Err(usage(
                "that is not a waiting room's draw (its status is not \"drawn\")",
            ));
        }
    }
    let (Some(commitment), Some(seed)) = (text("commitment"), text("seed")) else {
        return Err(usage("the draw has no commitment or seed"));
    };
    if let Some(saved) = &args.commitment
        && !saved.eq_ignore_ascii_case(&commitment)
    {
        return Err(failure(
            exit::REFUSED,
            format!("the draw's commitment {commitment} is not the one saved before the opening ({saved})"),
        ));
    }
    let ids: Vec<String> = doc["ids"]
        .as_array()
        .ok_or_else(|| usage("the draw lists no ids"))?
        .iter()
        .map(|v| {
            v.as_str()
                .map(str::to_owned)
                .ok_or_else(|| usage("a draw id is not text"))
        })
        .collect::<Result<_, _>>()?;
    if let Some(n) = doc["entrants"].as_u64()
        && n != ids.len() as u64
    {
        return Err(failure(
            exit::REFUSED,
            format!("the draw says {n} entrants but lists {} ids", ids.len()),
        ));
    }
    let receipt = args.id.as_deref().zip(args.place);
    let checked =
        draw::verify(&commitment, &seed, &ids, receipt).map_err(|why| failure(exit::REFUSED, why))?;
    Ok(json!({
        "verified": true,
        "room": doc["room"],
        "entrants": checked.entrants,
        "commitment": commitment,
        "seed": seed,
        "receipt": receipt.map(|(id, place)| json!({"id": id, "place": place})),
    }))
}

/// A saved draw, whole.
fn read(path: &str) -> Result<Value, Failure> {
    let text = if path == "-" {
        std::io::read_to_string(std::io::stdin())
    } else {
        std::fs::read_to_string(path)
    }
    .map_err(|e| usage(format!("cannot read {path}: {e}")))?;
    serde_json::from_str(&text).map_err(|e| usage(format!("{path} is not JSON: {e}")))
}

/// The draw at `url`, every page of its ids in one list.
async fn fetch(url: &str, timeout: Duration) -> Result<Value, Failure> {
    let base = url.split('?').next().unwrap_or(url);
    if reqwest::Url::parse(base)
        .ok()
        .and_then(|u| u.host_str().map(str::to_owned))
        .is_none_or(|h| h.is_empty())
    {
        return Err(usage(format!(
            "{url:?} is not the http:// or https:// URL of a room's draw"
        )));
    }
    let room = Server::new(base, None, Timeout::Total(timeout))?;
    let mut ids = Vec::new();
    let mut offset = 0u64;
    let mut doc = loop {
        let answer = room
            .send(room.request(Method::GET, &format!("?offset={offset}&limit={}", draw::MAX_PAGE)))
            .await?;
        if answer.status != 200 {
            return Err(room.failure(&answer));
        }
        let mut page = answer.body;
        if let Some(list) = page["ids"].as_array_mut() {
            ids.append(list);
        }
        match page["next_offset"].as_u64() {
            Some(n) if n > offset => offset = n,
            Some(_) => {
                return Err(failure(
                    exit::UNAVAILABLE,
                    "the room's pages of the draw do not advance",
                ));
            }
            None => break page,
        }
    };
    doc["ids"] = Value::Array(ids);
    Ok(doc)
}
