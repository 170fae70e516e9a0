//! The languages of the built-in pages: their words, and which one a
//! request gets (a room's `lang`, or its `Accept-Language` with `auto`).

use axum::http::header::{self, HeaderMap};

/// A language the built-in pages are written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Lang {
    En,
    Es,
    Zh,
}

/// Every word the built-in pages say, in one language.
#[derive(Debug)]
pub(crate) struct Text {
    /// The `<html lang>` code, and `{{lang}}`.
    pub(crate) code: &'static str,
    pub(crate) in_line: &'static str,
    pub(crate) lead: &'static str,
    pub(crate) place: &'static str,
    /// Around the line's length: "of N waiting".
    pub(crate) of: &'static str,
    pub(crate) waiting: &'static str,
    pub(crate) estimate: &'static str,
    pub(crate) unknown: &'static str,
    pub(crate) under_a_minute: &'static str,
    pub(crate) one_minute: &'static str,
    /// `{m}` is the number of minutes.
    pub(crate) minutes: &'static str,
    /// `{low}` and `{high}` are two of the above.
    pub(crate) range: &'static str,
    pub(crate) your_turn: &'static str,
    pub(crate) try_again_title: &'static str,
    pub(crate) try_again_heading: &'static str,
    pub(crate) try_again_text: &'static str,
    pub(crate) down_title: &'static str,
    pub(crate) down_text: &'static str,
    pub(crate) timeout_title: &'static str,
    pub(crate) timeout_text: &'static str,
    /// The page of a visitor whose place the operator's reset of the
    /// line took.
    pub(crate) reset_title: &'static str,
    pub(crate) reset_text: &'static str,
    pub(crate) join_again: &'static str,
    /// On the waiting page of a paused room, and of a closed one.
    pub(crate) state_paused: &'static str,
    pub(crate) state_closed: &'static str,
    /// The page of a newcomer to a closed room.
    pub(crate) closed_title: &'static str,
    pub(crate) closed_text: &'static str,
    /// The page of a newcomer to a sold-out room, and of a waiter let go.
    pub(crate) sold_out_title: &'static str,
    pub(crate) sold_out_text: &'static str,
    /// On the waiting page in a scheduled room's pre-queue: the opening's
    /// time (`{t}`, RFC 3339 UTC; without script), its countdown (`{t}`,
    /// by the script), and the moment it comes.
    pub(crate) before_open_at: &'static str,
    pub(crate) before_open: &'static str,
    pub(crate) opening: &'static str,
    /// In a draw's pre-queue: the place shown instead of a number, and
    /// what the draw means.
    pub(crate) in_draw: &'static str,
    pub(crate) draw_note: &'static str,
    /// In a room with random queueing (`queueing = "random"`): what that
    /// means, shown instead of a place.
    pub(crate) random_note: &'static str,
    /// The page of a visitor who comes before the pre-queue opens
    /// (`{line}`: when it does; `{start}`: the opening; RFC 3339 UTC).
    pub(crate) not_open_title: &'static str,
    pub(crate) not_open_text: &'static str,
    /// The arrival challenge's page: while the browser works, and without
    /// script.
    pub(crate) challenge_title: &'static str,
    pub(crate) challenge_text: &'static str,
    pub(crate) challenge_noscript: &'static str,
}

const EN: Text = Text {
    code: "en",
    in_line: "You are in line",
    lead: "The site is busy. You keep your place as long as this page stays open; \
           it moves you on by itself when it is your turn.",
    place: "Your place in line",
    of: "of",
    waiting: "waiting",
    estimate: "Estimated wait:",
    unknown: "unknown",
    under_a_minute: "under a minute",
    one_minute: "1 minute",
    minutes: "{m} minutes",
    range: "{low} to {high}",
    your_turn: "It is your turn. Taking you there…",
    try_again_title: "Please try again",
    try_again_heading: "Please try again in a moment",
    try_again_text: "The waiting room cannot let anyone in right now. This page retries by itself.",
    down_title: "The site cannot be reached",
    down_text: "Please try again in a moment.",
    timeout_title: "The site is taking too long",
    timeout_text: "It did not answer in time. Please try again.",
    reset_title: "The line was reset",
    reset_text: "The line was reset by the operator, and your place in it was cleared. \
                 You can join the line again, at the back.",
    join_again: "Join the line again",
    state_paused: "Admissions are paused for the moment. You keep your place.",
    state_closed: "The room is closed to newcomers. You keep your place and will be let in at your turn.",
    closed_title: "The waiting room is closed",
    closed_text: "Nobody new can join the line now. Please come back when it opens again.",
    sold_out_title: "Sold out",
    sold_out_text: "Everything is gone, so the line has closed. Thank you for waiting.",
    before_open_at: "You are in the pre-queue. Admissions start at {t} (UTC).",
    before_open: "You are in the pre-queue. Admissions start in {t}.",
    opening: "Admissions are starting…",
    in_draw: "in the draw",
    draw_note: "Places are drawn at random when admissions start, so arriving earlier gives no \
                advantage. After the opening, the draw is published so anyone can check it.",
    random_note: "Places are given at random: each time one frees up, someone waiting is picked at random, \
                  however long they have waited, so arriving earlier gives no advantage. Keep this page open \
                  to stay in the draw.",
    not_open_title: "Not open yet",
    not_open_text: "The line opens at {line} and admissions start at {start} (times in UTC). Please come back then.",
    challenge_title: "One moment",
    challenge_text: "Your browser is doing a short check before you join the line. It takes a moment, once.",
    challenge_noscript: "Please turn on JavaScript to join the line.",
};

const ES: Text = Text {
    code: "es",
    in_line: "Está en la fila",
    lead: "El sitio está muy solicitado. Conserva su lugar mientras esta página siga abierta; \
           le hará pasar por sí sola cuando sea su turno.",
    place: "Su lugar en la fila",
    of: "de",
    waiting: "en espera",
    estimate: "Espera estimada:",
    unknown: "desconocida",
    under_a_minute: "menos de un minuto",
    one_minute: "1 minuto",
    minutes: "{m} minutos",
    range: "de {low} a {high}",
    your_turn: "Es su turno. Le llevamos allí…",
    try_again_title: "Inténtelo de nuevo",
    try_again_heading: "Inténtelo de nuevo en un momento",
    try_again_text: "La sala de espera no puede dejar pasar a nadie ahora mismo. \
                     Esta página vuelve a intentarlo sola.",
    down_title: "No se puede acceder al sitio",
    down_text: "Inténtelo de nuevo en un momento.",
    timeout_title: "El sitio tarda demasiado",
    timeout_text: "No respondió a tiempo. Inténtelo de nuevo.",
    reset_title: "La fila se reinició",
    reset_text: "El operador reinició la fila y su lugar en ella se borró. \
                 Puede volver a la fila, al final.",
    join_again: "Volver a la fila",
    state_paused: "Las entradas están en pausa por el momento. Conserva su lugar.",
    state_closed: "La sala está cerrada a nuevas llegadas. Conserva su lugar y pasará cuando sea su turno.",
    closed_title: "La sala de espera está cerrada",
    closed_text: "Nadie nuevo puede unirse a la fila ahora. Vuelva cuando abra de nuevo.",
    sold_out_title: "Agotado",
    sold_out_text: "Ya no queda nada, así que la fila se cerró. Gracias por esperar.",
    before_open_at: "Está en la fila previa. Las entradas empiezan a las {t} (UTC).",
    before_open: "Está en la fila previa. Las entradas empiezan en {t}.",
    opening: "Las entradas están empezando…",
    in_draw: "en el sorteo",
    draw_note: "Los puestos se sortean al azar cuando empiezan las entradas: llegar antes no da \
                ventaja. Tras la apertura se publica el sorteo para que cualquiera pueda comprobarlo.",
    random_note: "Los puestos se dan al azar: cada vez que uno queda libre, se elige al azar a alguien que \
                  espera, sin importar cuánto lleve esperando, así que llegar antes no da ventaja. Mantenga \
                  esta página abierta para seguir en el sorteo.",
    not_open_title: "Aún no está abierto",
    not_open_text: "La fila abre a las {line} y las entradas empiezan a las {start} (horas en UTC). Vuelva entonces.",
    challenge_title: "Un momento",
    challenge_text: "Su navegador hace una breve comprobación antes de unirse a la fila. Tarda un momento, una sola vez.",
    challenge_noscript: "Active JavaScript para unirse a la fila.",
};

const ZH: Text = Text {
    code: "zh",
    in_line: "您正在排队",
    lead: "网站繁忙。只要此页面保持打开，您的位置就会保留；轮到您时，页面会自动带您进入。",
    place: "您在队列中的位置",
    of: "共",
    waiting: "人在等候",
    estimate: "预计等待：",
    unknown: "未知",
    under_a_minute: "不到一分钟",
    one_minute: "1 分钟",
    minutes: "{m} 分钟",
    range: "{low}至{high}",
    your_turn: "轮到您了，正在带您进入…",
    try_again_title: "请稍后重试",
    try_again_heading: "请稍后再试",
    try_again_text: "等候室暂时无法放行任何人。此页面会自动重试。",
    down_title: "无法访问网站",
    down_text: "请稍后再试。",
    timeout_title: "网站响应时间过长",
    timeout_text: "网站未能及时响应，请重试。",
    reset_title: "队列已重置",
    reset_text: "运营方重置了队列，您的位置已被清除。您可以重新排队（排在队尾）。",
    join_again: "重新排队",
    state_paused: "放行暂时暂停。您的位置会保留。",
    state_closed: "等候室已停止接纳新访客。您的位置会保留，轮到您时会放行。",
    closed_title: "等候室已关闭",
    closed_text: "现在无法加入队列。请在重新开放后再来。",
    sold_out_title: "已售罄",
    sold_out_text: "商品已全部售出，队列已关闭。感谢您的等候。",
    before_open_at: "您在预排队中。放行将于 {t}（UTC）开始。",
    before_open: "您在预排队中。放行将在 {t} 后开始。",
    opening: "放行即将开始…",
    in_draw: "等待抽签",
    draw_note: "放行开始时随机抽签决定顺序，早到没有优势。开放后将公布抽签结果，任何人都可以核验。",
    random_note: "名额随机发放：每空出一个名额，就从所有等候者中随机抽取一人，与等候时间长短无关，早到没有优势。请保持此页面打开以留在抽签中。",
    not_open_title: "尚未开放",
    not_open_text: "队列将于 {line} 开放，放行将于 {start} 开始（UTC 时间）。请届时再来。",
    challenge_title: "请稍候",
    challenge_text: "加入队列前，您的浏览器正在进行一次简短检查，只需片刻，仅此一次。",
    challenge_noscript: "请启用 JavaScript 以加入队列。",
};

impl Lang {
    const ALL: [Lang; 3] = [Lang::En, Lang::Es, Lang::Zh];

    pub(crate) fn text(self) -> &'static Text {
        match self {
            Lang::En => &EN,
            Lang::Es => &ES,
            Lang::Zh => &ZH,
        }
    }

    /// The language of a tag's primary subtag (`es-MX` is `es`).
    fn of_tag(tag: &str) -> Option<Lang> {
        let primary = tag.split(['-', '_']).next().unwrap_or(tag);
        Lang::ALL
            .into_iter()
            .find(|l| l.text().code.eq_ignore_ascii_case(primary))
    }
}

/// A room's `lang`: one language for everyone, or each request's
/// `Accept-Language`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LangSetting {
    Fixed(Lang),
    Auto,
}

impl LangSetting {
    /// `lang = "en" | "es" | "zh" | "auto"`; unset is English, as before
    /// there was a choice.
    pub(crate) fn parse(text: Option<&str>) -> Result<LangSetting, String> {
        match text {
            None => Ok(LangSetting::Fixed(Lang::En)),
            Some("auto") => Ok(LangSetting::Auto),
            Some(t) => Lang::of_tag(t)
                .filter(|l| l.text().code.eq_ignore_ascii_case(t))
                .map(LangSetting::Fixed)
                .ok_or_else(|| format!("lang = {t:?}: use en, es, zh or auto")),
        }
    }

    /// The language for a request with `headers`.
    pub(crate) fn pick(self, headers: &HeaderMap) -> Lang {
        match self {
            LangSetting::Fixed(l) => l,
            LangSetting::Auto => headers
                .get(header::ACCEPT_LANGUAGE)
                .and_then(|v| v.to_str().ok())
                .and_then(accepted)
                .unwrap_or(Lang::En),
        }
    }
}

/// The most wanted language of an `Accept-Language` value that the pages
/// are written in (RFC 9110 12.5.4: quality values, the first listed on a
/// tie; `q=0` means not wanted).
fn accepted(value: &str) -> Option<Lang> {
    let mut best: Option<(u16, Lang)> = None;
    for item in value.split(',') {
        let mut parts = item.split(';');
        let tag = parts.next().unwrap_or("").trim();
        let quality = parts
            .filter_map(|p| {
                p.trim()
                    .strip_prefix("q=")
                    .or_else(|| p.trim().strip_prefix("Q="))
            })
            .next()
            .map_or(Some(1000), quality);
        let (Some(q), Some(lang)) = (quality, Lang::of_tag(tag)) else {
            continue;
        };
        if q > 0 && best.is_none_or(|(b, _)| q > b) {
            best = Some((q, lang));
        }
    }
    best.map(|(_, l)| l)
}

/// A quality value in thousandths (`0.8` is 800); `None` if unreadable.
fn quality(text: &str) -> Option<u16> {
    let q: f64 = text.trim().parse().ok()?;
    (0.0..=1.0).contains(&q).then(|| (q * 1000.0).round() as u16)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accept_language_by_quality() {
        assert_eq!(accepted("es"), Some(Lang::Es));
        assert_eq!(accepted("zh-CN,zh;q=0.9,en;q=0.8"), Some(Lang::Zh));
        assert_eq!(accepted("en;q=0.5, es-MX;q=0.9"), Some(Lang::Es));
        assert_eq!(accepted("fr, de;q=0.9, es;q=0.1"), Some(Lang::Es));
        assert_eq!(accepted("es;q=0, en;q=0.2"), Some(Lang::En));
        assert_eq!(accepted("fr, *;q=0.5"), None);
        assert_eq!(accepted("es;q=abc, zh;q=0.3"), Some(Lang::Zh));
        assert_eq!(accepted(""), None);
    }

    #[test]
    fn setting() {
        assert_eq!(LangSetting::parse(None), Ok(LangSetting::Fixed(Lang::En)));
        assert_eq!(LangSetting::parse(Some("zh")), Ok(LangSetting::Fixed(Lang::Zh)));
        assert_eq!(LangSetting::parse(Some("auto")), Ok(LangSetting::Auto));
        assert!(LangSetting::parse(Some("fr")).is_err());
        assert!(LangSetting::parse(Some("es-MX")).is_err());
    }
}
