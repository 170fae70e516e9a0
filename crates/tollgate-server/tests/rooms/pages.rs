//! The room's pages: templates refused at load for a placeholder they
//! cannot have, the language of the built-in pages (fixed, or from
//! `Accept-Language`), and the operator's own 502 and 504 pages.

use super::*;

/// `tollgate serve` with `config`, expected to refuse it: its exit code
/// and standard error (killed, and the test failed, if it starts instead).
fn serve_refuses(dir: &tempfile::TempDir, config: &str) -> (Option<i32>, String) {
    let path = dir.path().join(format!("refused-{}.toml", rand_suffix()));
    std::fs::write(&path, config).expect("config");
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args(["serve", "--listen", "127.0.0.1:0", "--config"])
        .arg(&path)
        .env_remove("TOLLGATE_REDIS_URL")
        .env_remove("TOLLGATE_TOKENS")
        .env("TOLLGATE_LOG", "warn")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn serve");
    let deadline = Instant::now() + Duration::from_secs(20);
    while child.try_wait().expect("wait").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("serve started with {config}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().expect("output");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A placeholder a page does not fill (a typo, or one of another page's)
/// stops `serve` at start with exit 78, naming the room, the file and the
/// placeholder; the placeholders a page does fill are accepted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_placeholders_are_refused_at_load() {
    let (_seen, up, dir) = site().await;
    let cases = [
        ("page", "<p>{{position}} of {{waitng}}</p>", "{{waitng}}"),
        ("page", "<p>{{ eta }}</p>", "{{ eta }}"),
        ("try_again_page", "<p>{{room}}: {{position}}</p>", "{{position}}"),
        ("upstream_down_page", "<p>{{status}} {{eta}}</p>", "{{eta}}"),
        ("upstream_timeout_page", "<p>{{t_title}}</p>", "{{t_title}}"),
    ];
    for (setting, text, bad) in cases {
        let line = template(&dir, setting, text);
        let (code, err) = serve_refuses(&dir, &room_config(up, 1, &line));
        assert_eq!(code, Some(78), "{setting}: {err}");
        let file = line.split('"').nth(1).expect("path");
        for part in ["[rooms.shop]", setting, file, bad] {
            assert!(err.contains(part), "{setting}: {part:?} not in {err}");
        }
    }
    // An unreadable template is a config error too.
    let extra = format!("page = \"{}\"", dir.path().join("missing.html").display());
    let (code, err) = serve_refuses(&dir, &room_config(up, 1, &extra));
    assert_eq!(code, Some(78), "{err}");
    // Every documented placeholder of each page is accepted.
    let pages = [
        (
            "page",
            "{{room}} {{lang}} {{position}} {{waiting}} {{eta}} {{eta_low_minutes}} \
             {{eta_high_minutes}} {{events_url}} {{status_url}} {{refresh_seconds}}",
        ),
        ("try_again_page", "{{room}} {{lang}} {{retry_seconds}}"),
        (
            "upstream_down_page",
            "{{room}} {{lang}} {{status}} {{retry_seconds}}",
        ),
        (
            "upstream_timeout_page",
            "{{room}} {{lang}} {{status}} {{retry_seconds}}",
        ),
    ];
    let extra: String = pages
        .iter()
        .map(|(setting, text)| template(&dir, setting, text))
        .collect();
    let _s = start(&dir, &room_config(up, 1, &extra), None);
    // A bad language is a bad setting.
    let (code, err) = serve_refuses(&dir, &room_config(up, 1, "lang = \"fr\""));
    assert_eq!(code, Some(64), "{err}");
    assert!(err.contains("lang = \"fr\""), "{err}");
}

/// The waiting page of a waiter asking with `accept_language`, if any.
async fn page_in(c: &reqwest::Client, proxy: &str, accept_language: Option<&str>) -> Answer {
    let mut v = Visitor::new("waiter");
    let mut req = c.get(format!("{proxy}/page"));
    if let Some(l) = accept_language {
        req = req.header("accept-language", l);
    }
    v.send(req).await
}

/// `lang = "es"` serves the built-in page in Spanish to everyone;
/// `lang = "auto"` follows each request's `Accept-Language` by quality,
/// English when none fits; `<html lang>` says which.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_speaks_the_rooms_language() {
    let (_seen, up, dir) = site().await;
    let fixed = start(&dir, &room_config(up, 1, "lang = \"es\""), None);
    let (_fixed, proxy, c, _holder) = take_the_slot(fixed).await;
    let a = page_in(&c, &proxy, Some("zh")).await;
    assert_eq!(a.status, 503);
    assert!(a.text.contains("<html lang=\"es\">"), "{}", a.text);
    assert!(a.text.contains("Su lugar en la fila"), "{}", a.text);
    assert!(
        a.text.contains("Espera estimada: <strong id=\"eta\""),
        "{}",
        a.text
    );
    assert!(
        a.text.contains(">desconocida</strong>"),
        "the estimate in Spanish: {}",
        a.text
    );
    assert!(a.headers.get("vary").is_none());

    let auto = start(&dir, &room_config(up, 1, "lang = \"auto\""), None);
    let (_auto, proxy, c, _holder) = take_the_slot(auto).await;
    for (asked, want, words) in [
        (Some("zh-CN,zh;q=0.9,en;q=0.8"), "zh", "您在队列中的位置"),
        (Some("fr, en;q=0.3, es;q=0.7"), "es", "Su lugar en la fila"),
        (Some("es;q=0, en;q=0.1"), "en", "Your place in line"),
        (Some("fr-CA, de"), "en", "Your place in line"),
        (None, "en", "Your place in line"),
    ] {
        let a = page_in(&c, &proxy, asked).await;
        assert_eq!(a.status, 503, "{asked:?}");
        assert!(
            a.text.contains(&format!("<html lang=\"{want}\">")) && a.text.contains(words),
            "{asked:?} wants {want}: {}",
            a.text
        );
        assert_eq!(a.headers["vary"], "accept-language");
    }
}

/// The operator's own 502 and 504 pages, filled in: a room whose upstream
/// is down shows its 502 page; one whose upstream is too slow its 504; the
/// status and `Retry-After` stay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn custom_upstream_error_pages() {
    let (_seen, up, dir) = site().await;
    let down = template(
        &dir,
        "upstream_down_page",
        "<p lang=\"{{lang}}\">{{room}} is down ({{status}}), back in {{retry_seconds}} s</p>",
    );
    let slow = template(
        &dir,
        "upstream_timeout_page",
        "<p>{{room}} is slow ({{status}})</p>",
    );
    let extra = format!("{down}{slow}lang = \"auto\"");
    let dead = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let dead_addr = dead.local_addr().expect("addr");
    drop(dead);
    let c = reqwest::Client::new();
    let s = start(&dir, &room_config(dead_addr, 1, &extra), None);
    let mut v = Visitor::new("v");
    let req = c
        .get(format!("{}/page", s.proxy.clone().expect("proxy")))
        .header("accept-language", "es");
    let a = v.send(req).await;
    assert_eq!(a.status, 502, "{}", a.text);
    assert_eq!(a.headers["retry-after"], "5");
    assert_eq!(a.text, "<p lang=\"es\">shop is down (502), back in 5 s</p>");

    let s = start(&dir, &room_config(up, 1, &extra), None);
    let mut v = Visitor::new("v");
    let a = v.get(&c, &s.proxy.clone().expect("proxy"), "/slow", false).await;
    assert_eq!(a.status, 504, "{}", a.text);
    assert_eq!(a.text, "<p>shop is slow (504)</p>");
    // The built-in ones speak the room's language.
    let s = start(&dir, &room_config(dead_addr, 1, "lang = \"zh\""), None);
    let a = v.get(&c, &s.proxy.clone().expect("proxy"), "/page", false).await;
    assert_eq!(a.status, 502, "{}", a.text);
    assert!(
        a.text.contains("<html lang=\"zh\">") && a.text.contains("无法访问网站"),
        "{}",
        a.text
    );
}
