//! A room's pages (the waiting page, "try again", the upstream's 502 and
//! 504): built in, in the room's language, or the operator's templates with
//! `{{…}}` placeholders, checked when the config is loaded. (The waiting
//! page's live updates are room/feeds.rs'.)

use std::time::Duration;

use axum::http::HeaderMap;
use serde_json::{Value, json};

use super::draw;
use super::lang::{Lang, LangSetting, Text};
use super::states::{self, RoomState};
use super::store_call::now_ms;
use super::watch::Settings;

/// The frame of every built-in page: its head, the style (light and
/// dark), and `{{t_body}}`.
const SHELL: &str = include_str!("shell.html");
/// The built-in waiting page's body.
const WAITING: &str = include_str!("page.html");
/// The arrival challenge's page: its body and the script that solves it
/// (built in only: the script is the page).
const CHALLENGE: &str = include_str!("challenge.html");
/// The body of the built-in "try again" and upstream error pages.
const NOTICE: &str = "<main>\n<h1>{{t_heading}}</h1>\n<p>{{t_text}}</p>\n</main>";

/// The pages a room shows, and what each template may name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// While waiting in line (`page`).
    Waiting,
    /// While a closed room cannot reach its store (`try_again_page`).
    TryAgain,
    /// The upstream could not be reached: 502 (`upstream_down_page`).
    UpstreamDown,
    /// The upstream did not answer in time: 504 (`upstream_timeout_page`).
    UpstreamTimeout,
    /// A newcomer to a closed room: 503 (`closed_page`).
    Closed,
    /// A newcomer to a sold-out room, or a waiter it let go: 410
    /// (`sold_out_page`).
    SoldOut,
    /// Before a scheduled room's pre-queue opens: 503 (`not_open_page`).
    NotOpen,
}

impl Kind {
    /// The room setting naming this page's template.
    pub(crate) fn setting(self) -> &'static str {
        match self {
            Kind::Waiting => "page",
            Kind::TryAgain => "try_again_page",
            Kind::UpstreamDown => "upstream_down_page",
            Kind::UpstreamTimeout => "upstream_timeout_page",
            Kind::Closed => "closed_page",
            Kind::SoldOut => "sold_out_page",
            Kind::NotOpen => "not_open_page",
        }
    }

    /// The built-in page: the shell around its body.
    fn built_in(self) -> Template {
        let body = if self == Kind::Waiting { WAITING } else { NOTICE };
        Template(Template(SHELL.to_owned()).fill(&[("t_body", body)]))
    }

    /// The placeholders a custom template of this page may use (docs/ROOMS.md).
    fn placeholders(self) -> &'static [&'static str] {
        match self {
            Kind::Waiting => &[
                "room",
                "lang",
                "position",
                "waiting",
                "eta",
                "eta_low_minutes",
                "eta_high_minutes",
                "events_url",
                "status_url",
                "refresh_seconds",
                "state",
                "opens_at",
                "opens_in_seconds",
            ],
            Kind::TryAgain => &["room", "lang", "retry_seconds"],
            Kind::UpstreamDown | Kind::UpstreamTimeout => &["room", "lang", "status", "retry_seconds"],
            Kind::Closed | Kind::SoldOut => &["room", "lang", "state"],
            Kind::NotOpen => &["room", "lang", "opens_at", "line_opens_at", "retry_seconds"],
        }
    }
}

/// A page template: `{{name}}` placeholders in HTML.
#[derive(Debug, Clone)]
struct Template(String);

impl Template {
    /// Reads an operator's template, refusing any placeholder `kind` does
    /// not fill (it would reach visitors as it is).
    fn load(kind: Kind, path: &std::path::Path) -> Result<Template, String> {
        let at = format!("{} = {}", kind.setting(), path.display());
        let text = std::fs::read_to_string(path).map_err(|e| format!("{at}: {e}"))?;
        let known = kind.placeholders();
        if let Some(unknown) = placeholders(&text).find(|p| !known.contains(p)) {
            let list: Vec<String> = known.iter().map(|p| format!("{{{{{p}}}}}")).collect();
            return Err(format!(
                "{at}: unknown placeholder {{{{{unknown}}}}} (this page knows {})",
                list.join(", ")
            ));
        }
        Ok(Template(text))
    }

    /// The template with each placeholder `values` names filled in.
    fn fill(&self, values: &[(&str, &str)]) -> String {
        let mut out = String::with_capacity(self.0.len() + 256);
        let mut rest = self.0.as_str();
        while let Some((before, name, after)) = next_placeholder(rest) {
            out.push_str(before);
            match values.iter().find(|(k, _)| *k == name) {
                Some((_, v)) => out.push_str(v),
                None => out.push_str(&rest[before.len()..rest.len() - after.len()]),
            }
            rest = after;
        }
        out.push_str(rest);
        out
    }
}

/// The text before the first `{{name}}` in `text`, the name, and the text
/// after it. A name is letters, digits and `_ . -`, spaces around it
/// included (so `{{ eta }}` is a name a check refuses, not HTML).
fn next_placeholder(text: &str) -> Option<(&str, &str, &str)> {
    let mut from = 0;
    while let Some(i) = text[from..].find("{{").map(|i| i + from) {
        let inner = &text[i + 2..];
        let len = inner
            .find(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-' | ' ')))
            .unwrap_or(inner.len());
        if inner[len..].starts_with("}}") && !inner[..len].trim().is_empty() {
            return Some((&text[..i], &inner[..len], &inner[len + 2..]));
        }
        from = i + 2;
    }
    None
}

/// Every placeholder's name in `text`.
fn placeholders(text: &str) -> impl Iterator<Item = &str> {
    let mut rest = text;
    std::iter::from_fn(move || {
        let (_, name, after) = next_placeholder(rest)?;
        rest = after;
        Some(name)
    })
}

/// A room's pages: the built-in ones, in its language (`lang`), or the
/// operator's templates. Both are filled with the same values; only the
/// built-in ones name the words (`{{t_…}}`).
#[derive(Debug)]
pub(crate) struct Pages {
    lang: LangSetting,
    waiting: Template,
    try_again: Template,
    upstream_down: Template,
    upstream_timeout: Template,
    closed: Template,
    sold_out: Template,
    not_open: Template,
}

/// What a waiting page shows: figures, or none (a visitor asking too
/// often).
pub(crate) enum Figures<'a> {
    Known(&'a Shown),
    Unknown,
}

impl Pages {
    /// The built-in pages in `lang`, each replaced by a template file if
    /// its setting names one.
    pub(crate) fn load(
        lang: LangSetting,
        file: impl Fn(Kind) -> Option<std::path::PathBuf>,
    ) -> Result<Pages, String> {
        let load = |kind: Kind| match file(kind) {
            Some(path) => Template::load(kind, &path),
            None => Ok(kind.built_in()),
        };
        Ok(Pages {
            lang,
            waiting: load(Kind::Waiting)?,
            try_again: load(Kind::TryAgain)?,
            upstream_down: load(Kind::UpstreamDown)?,
            upstream_timeout: load(Kind::UpstreamTimeout)?,
            closed: load(Kind::Closed)?,
            sold_out: load(Kind::SoldOut)?,
            not_open: load(Kind::NotOpen)?,
        })
    }

    /// The language of the pages for a request with `headers`.
    pub(crate) fn lang(&self, headers: &HeaderMap) -> Lang {
        self.lang.pick(headers)
    }

    /// Whether the pages depend on `Accept-Language` (`Vary` says so).
    pub(crate) fn varies(&self) -> bool {
        self.lang == LangSetting::Auto
    }

    pub(crate) fn waiting(
        &self,
        room: &str,
        lang: Lang,
        figures: Figures<'_>,
        refresh: u64,
        state: RoomState,
    ) -> String {
        let t = lang.text();
        let state_text = match state {
            RoomState::Paused => t.state_paused,
            RoomState::Closed => t.state_closed,
            _ => "",
        };
        let (position, waiting, eta, opens) = match figures {
            Figures::Known(s) if s.in_draw || s.random => {
                (t.in_draw.to_owned(), s.waiting.to_string(), s.eta, s.opens_at_ms)
            }
            Figures::Known(s) => (
                s.position.to_string(),
                s.waiting.to_string(),
                s.eta,
                s.opens_at_ms,
            ),
            Figures::Unknown => ("…".to_owned(), "…".to_owned(), None, None),
        };
        // In the pre-queue: when admissions start, counted down by the
        // page's script (the text without script says the time, UTC).
        let (opens_at, opens_in) = opens.map_or((String::new(), String::new()), |at| {
            (
                states::rfc3339(at),
                at.saturating_sub(now_ms()).div_ceil(1000).to_string(),
            )
        });
        let opens_text = if opens.is_some() {
            t.before_open_at.replace("{t}", &opens_at)
        } else {
            String::new()
        };
        let draw_text = match figures {
            Figures::Known(s) if s.in_draw => t.draw_note,
            Figures::Known(s) if s.random => t.random_note,
            _ => "",
        };
        let minutes = |d: Duration| (d.as_secs_f64() / 60.0).round() as u64;
        let (low, high) = eta.map_or((String::new(), String::new()), |(l, h)| {
            (minutes(l).to_string(), minutes(h).to_string())
        });
        let words = json!({
            "unknown": t.unknown, "under": t.under_a_minute, "one": t.one_minute,
            "many": t.minutes, "range": t.range, "turn": t.your_turn,
            "paused": t.state_paused, "closed": t.state_closed,
            "before_open": t.before_open, "opening": t.opening, "in_draw": t.in_draw,
        })
        .to_string()
        .replace("</", "<\\/");
        let (room_html, head) = (
            escape(room),
            format!("<noscript><meta http-equiv=\"refresh\" content=\"{refresh}\"></noscript>"),
        );
        let values = [
            ("room", room_html.as_str()),
            ("lang", t.code),
            ("position", &position),
            ("waiting", &waiting),
            ("eta", &eta_text(t, eta.map(|(l, h)| (minutes(l), minutes(h))))),
            ("eta_low_minutes", &low),
            ("eta_high_minutes", &high),
            ("events_url", &format!("/.tollgate/{room}/events")),
            ("status_url", &format!("/.tollgate/{room}/status")),
            ("refresh_seconds", &refresh.to_string()),
            ("state", state.name()),
            ("t_state", state_text),
            ("opens_at", &opens_at),
            ("opens_in_seconds", &opens_in),
            ("t_opens", &opens_text),
            ("t_draw", draw_text),
            ("t_head", &head),
            ("t_title", t.in_line),
            ("t_lead", t.lead),
            ("t_place", t.place),
            ("t_of", t.of),
            ("t_waiting", t.waiting),
            ("t_estimate", t.estimate),
            ("t_words", &words),
        ];
        self.waiting.fill(&values)
    }

    /// The page of a visitor whose place a reset of the line took: what
    /// happened, and a link back to `path` to join again (their token is
    /// cleared with it, so following it is a new arrival). Always the
    /// built-in page.
    pub(crate) fn reset(&self, room: &str, lang: Lang, path: &str) -> String {
        let t = lang.text();
        // "//host/…" would be a link to another site.
        let path = if path.starts_with('/') && !path.starts_with("//") {
            path
        } else {
            "/"
        };
        let body = format!(
            "<main>\n<h1>{}</h1>\n<p role=\"status\">{}</p>\n<p><a href=\"{}\">{}</a></p>\n</main>",
            t.reset_title,
            t.reset_text,
            escape(path),
            t.join_again
        );
        Template(SHELL.to_owned()).fill(&[
            ("t_body", &body),
            ("t_head", ""),
            ("t_title", t.reset_title),
            ("room", &escape(room)),
            ("lang", t.code),
        ])
    }

    /// The page of a newcomer to a closed or sold-out room (`state`), or
    /// of a waiter a sold-out room let go.
    pub(crate) fn ended(&self, room: &str, lang: Lang, state: RoomState) -> String {
        let t = lang.text();
        let (page, title, text) = if state == RoomState::SoldOut {
            (&self.sold_out, t.sold_out_title, t.sold_out_text)
        } else {
            (&self.closed, t.closed_title, t.closed_text)
        };
        let room_html = escape(room);
        page.fill(&[
            ("room", room_html.as_str()),
            ("lang", t.code),
            ("state", state.name()),
            ("t_head", ""),
            ("t_title", title),
            ("t_heading", title),
            ("t_text", text),
        ])
    }

    /// The page of a visitor who comes before a scheduled room's
    /// pre-queue opens (served with 503 and `Retry-After: retry`): when
    /// the line opens and when admissions start.
    pub(crate) fn not_open(
        &self,
        room: &str,
        lang: Lang,
        opens_at_ms: u64,
        line_opens_at_ms: u64,
        retry: u64,
    ) -> String {
        let t = lang.text();
        let (opens_at, line_opens_at) = (states::rfc3339(opens_at_ms), states::rfc3339(line_opens_at_ms));
        let text = t
            .not_open_text
            .replace("{line}", &line_opens_at)
            .replace("{start}", &opens_at);
        let head = format!("<meta http-equiv=\"refresh\" content=\"{retry}\">");
        let room_html = escape(room);
        let retry = retry.to_string();
        self.not_open.fill(&[
            ("room", room_html.as_str()),
            ("lang", t.code),
            ("opens_at", &opens_at),
            ("line_opens_at", &line_opens_at),
            ("retry_seconds", &retry),
            ("t_head", &head),
            ("t_title", t.not_open_title),
            ("t_heading", t.not_open_title),
            ("t_text", &text),
        ])
    }

    /// The arrival challenge's page (403): its script solves `challenge`
    /// (`bits` leading zero bits) and comes back with the solution in
    /// the cookie `cookie`.
    pub(crate) fn challenge(
        &self,
        room: &str,
        lang: Lang,
        challenge: &str,
        bits: u8,
        cookie: &str,
    ) -> String {
        let t = lang.text();
        let body = Template(CHALLENGE.to_owned()).fill(&[
            ("t_title", t.challenge_title),
            ("t_text", t.challenge_text),
            ("t_noscript", t.challenge_noscript),
            ("challenge", &escape(challenge)),
            ("bits", &bits.to_string()),
            ("cookie", &escape(cookie)),
        ]);
        Template(SHELL.to_owned()).fill(&[
            ("t_body", &body),
            ("t_head", ""),
            ("t_title", t.challenge_title),
            ("room", &escape(room)),
            ("lang", t.code),
        ])
    }

    /// The page of a room that cannot reach its store (served with 503 and
    /// `Retry-After: retry`).
    pub(crate) fn try_again(&self, room: &str, lang: Lang, retry: u64) -> String {
        let t = lang.text();
        let head = format!("<meta http-equiv=\"refresh\" content=\"{retry}\">");
        let notice = [
            ("t_head", head.as_str()),
            ("t_title", t.try_again_title),
            ("t_heading", t.try_again_heading),
            ("t_text", t.try_again_text),
        ];
        self.notice(&self.try_again, room, lang, "503", retry, &notice)
    }

    /// The page for a 502 (`timeout` false) or a 504 from the upstream.
    pub(crate) fn upstream_error(&self, room: &str, lang: Lang, timeout: bool, retry: u64) -> String {
        let t = lang.text();
        let (page, status, title, text) = if timeout {
            (&self.upstream_timeout, "504", t.timeout_title, t.timeout_text)
        } else {
            (&self.upstream_down, "502", t.down_title, t.down_text)
        };
        let notice = [
            ("t_head", ""),
            ("t_title", title),
            ("t_heading", title),
            ("t_text", text),
        ];
        self.notice(page, room, lang, status, retry, &notice)
    }

    fn notice(
        &self,
        page: &Template,
        room: &str,
        lang: Lang,
        status: &str,
        retry: u64,
        words: &[(&str, &str)],
    ) -> String {
        let (room_html, retry) = (escape(room), retry.to_string());
        let mut values = vec![
            ("room", room_html.as_str()),
            ("lang", lang.text().code),
            ("status", status),
            ("retry_seconds", &retry),
        ];
        values.extend_from_slice(words);
        page.fill(&values)
    }
}

fn minutes_text(t: &Text, m: u64) -> String {
    match m {
        0 => t.under_a_minute.to_owned(),
        1 => t.one_minute.to_owned(),
        m => t.minutes.replace("{m}", &m.to_string()),
    }
}

/// "3 minutes to 6 minutes" (in `t`'s words), or "unknown" before the
/// line's pace was measured. The page's script says the same (`words`).
fn eta_text(t: &Text, minutes: Option<(u64, u64)>) -> String {
    match minutes {
        None => t.unknown.to_owned(),
        Some((low, high)) => {
            let (l, h) = (minutes_text(t, low), minutes_text(t, high));
            if l == h {
                l
            } else {
                t.range.replace("{low}", &l).replace("{high}", &h)
            }
        }
    }
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// A visitor's place, as shown on the page and in JSON.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Shown {
    pub(super) position: u64,
    pub(super) waiting: u64,
    /// The estimate as a range: from the line's measured pace, widened
    /// because the pace is irregular; `None` before there is data.
    pub(super) eta: Option<(Duration, Duration)>,
    /// The room's state (open, paused or closed while one waits), as this
    /// server last read it.
    pub(super) state: RoomState,
    /// The opening this waiter is in the pre-queue for (ms), if any.
    pub(super) opens_at_ms: Option<u64>,
    /// In a draw not yet run (`order_at_open = "random"`): the place is
    /// decided at the opening, so none is shown.
    pub(super) in_draw: bool,
    /// In a room with random queueing (`queueing = "random"`): there is
    /// no place to show, nor an estimate (every waiter's chance is the
    /// same, whatever their position in the store's line).
    pub(super) random: bool,
}

impl Shown {
    /// A place in line in a room whose state and schedule this server
    /// last read as `settings`.
    pub(super) fn of(place: &tollgate::Place, settings: Settings) -> Shown {
        let in_draw = draw::pending_draw(&settings.schedule, now_ms()).is_some();
        let unplaced = in_draw || settings.random;
        Shown {
            // (Not even a change of it shows, in a draw: see feeds.rs.)
            position: if unplaced { 0 } else { place.position },
            waiting: place.waiting,
            // (In a draw the estimate would tell the place; at random the
            // store's position, which it derives from, means nothing.)
            eta: place
                .eta
                .filter(|_| !unplaced)
                .map(|e| (e.mul_f64(0.75), e.mul_f64(1.5))),
            state: settings.state,
            opens_at_ms: settings.schedule.pending(now_ms()),
            in_draw,
            random: settings.random,
        }
    }

    pub(super) fn json(&self) -> serde_json::Value {
        let (low, high) = match self.eta {
            Some((l, h)) => (Some(l.as_millis() as u64), Some(h.as_millis() as u64)),
            None => (None, None),
        };
        let mut j = json!({"status": "queued", "position": self.position, "waiting": self.waiting,
               "eta_low_ms": low, "eta_high_ms": high, "state": self.state.json()});
        // In the pre-queue: waiting for the opening, with its countdown.
        if let Some(at) = self.opens_at_ms {
            j["status"] = json!("before_open");
            j["opens_at"] = json!(states::rfc3339(at));
            j["opens_in_ms"] = json!(at.saturating_sub(now_ms()));
        }
        // A draw's place is drawn at the opening, and random queueing has
        // none: no number.
        if self.in_draw || self.random {
            j["position"] = Value::Null;
            j["order"] = json!("random");
        }
        j
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_are_found_and_filled() {
        let t = "a {{x}} b {{ y }} {{}} {x} {{z}}} {{a:b}} {{x}}";
        assert_eq!(placeholders(t).collect::<Vec<_>>(), ["x", " y ", "z", "x"]);
        let filled = Template(t.to_owned()).fill(&[("x", "1"), ("z", "{{x}}")]);
        assert_eq!(filled, "a 1 b {{ y }} {{}} {x} {{x}}} {{a:b}} 1");
    }

    #[test]
    fn built_in_pages_fill_every_placeholder() {
        let pages = Pages::load(LangSetting::Auto, |_| None).expect("built in");
        let shown = Shown {
            position: 3,
            waiting: 9,
            eta: Some((Duration::from_secs(90), Duration::from_secs(400))),
            state: RoomState::Open,
            opens_at_ms: None,
            in_draw: false,
            random: false,
        };
        for lang in [Lang::En, Lang::Es, Lang::Zh] {
            for page in [
                pages.waiting("shop", lang, Figures::Known(&shown), 2, RoomState::Open),
                pages.waiting("shop", lang, Figures::Unknown, 2, RoomState::Paused),
                pages.try_again("shop", lang, 5),
                pages.upstream_error("shop", lang, false, 5),
                pages.upstream_error("shop", lang, true, 5),
                pages.reset("shop", lang, "/cart"),
                pages.ended("shop", lang, RoomState::Closed),
                pages.ended("shop", lang, RoomState::SoldOut),
                pages.not_open("shop", lang, 1_764_583_200_000, 1_764_581_400_000, 60),
                pages.challenge("shop", lang, "c1.shop.n.1.8.sig", 8, "tollgate_shop_pass"),
                pages.waiting(
                    "shop",
                    lang,
                    Figures::Known(&Shown {
                        opens_at_ms: Some(now_ms() + 90_000),
                        ..shown
                    }),
                    2,
                    RoomState::Open,
                ),
            ] {
                assert_eq!(placeholders(&page).count(), 0, "{page}");
                assert!(page.contains(&format!("<html lang=\"{}\">", lang.text().code)));
            }
        }
        // The reset page links back to the path asked for, escaped.
        let reset = pages.reset("shop", Lang::Es, "/a\"><script>");
        assert!(reset.contains("href=\"/a&quot;&gt;&lt;script&gt;\""), "{reset}");
        assert!(reset.contains("El operador reinició la fila"), "{reset}");
        assert!(
            pages
                .reset("shop", Lang::En, "//evil.example/x")
                .contains("href=\"/\"")
        );
        let es = pages.waiting("shop", Lang::Es, Figures::Known(&shown), 2, RoomState::Closed);
        assert!(es.contains("de 2 minutos a 7 minutos"), "{es}");
        assert!(es.contains("data-state=\"closed\">La sala está cerrada"), "{es}");
        let open = pages.waiting("shop", Lang::En, Figures::Known(&shown), 2, RoomState::Open);
        assert!(open.contains("data-state=\"open\"></p>"), "{open}");
        let early = pages.not_open("shop", Lang::En, 1_764_583_200_000, 1_764_581_400_000, 60);
        assert!(
            early.contains(
                "The line opens at 2025-12-01T09:30:00Z and admissions start at 2025-12-01T10:00:00Z"
            ),
            "{early}"
        );
        let pre = pages.waiting(
            "shop",
            Lang::En,
            Figures::Known(&Shown {
                opens_at_ms: Some(1_764_583_200_000),
                ..shown
            }),
            2,
            RoomState::Open,
        );
        assert!(
            pre.contains("Admissions start at 2025-12-01T10:00:00Z (UTC)"),
            "{pre}"
        );
        assert!(pre.contains("data-opens-at=\"2025-12-01T10:00:00Z\""), "{pre}");
        assert!(!pre.contains("drawn at random"), "{pre}");
        let drawn = Shown {
            opens_at_ms: Some(1_764_583_200_000),
            in_draw: true,
            random: false,
            ..shown
        };
        let page = pages.waiting("shop", Lang::En, Figures::Known(&drawn), 2, RoomState::Open);
        assert!(page.contains("id=\"position\">in the draw</p>"), "{page}");
        assert!(page.contains("drawn at random"), "{page}");
        assert_eq!(drawn.json()["position"], Value::Null);
        assert_eq!(drawn.json()["order"], "random");
        assert_eq!(shown.json()["position"], 3);
        let sold = pages.ended("shop", Lang::Zh, RoomState::SoldOut);
        assert!(sold.contains("<h1>已售罄</h1>"), "{sold}");
        assert!(
            es.contains("data-low-minutes=\"2\" data-high-minutes=\"7\""),
            "{es}"
        );
    }
}
