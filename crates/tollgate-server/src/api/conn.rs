//! The API listener's request heads: their limits, and the answers past
//! them in the one JSON error shape.
//!
//! hyper answers a request it cannot parse itself, before any service sees
//! it: 400 (a malformed request line or header), 414 (a URI over 65,534
//! bytes) or 431 (more than [`MAX_HEADERS`] headers, or a head over
//! [`MAX_HEAD`] bytes), each with an empty body, and then closes the
//! connection. No hook changes those answers, so this wrapper recognises
//! them on their way out and writes the same status with the API's one
//! JSON error body instead.
//!
//! Recognised exactly: hyper's automatic answer is the last thing written
//! on the connection and is only a head, `HTTP/1.1 <400|414|431> <reason>`
//! with `connection: close`, `content-length: 0` and `date` and nothing
//! else. The API's own error answers always carry a content type, so they
//! never look like it.

use std::io::IoSlice;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use axum::extract::Request;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::error::ApiError;

/// The longest request head (request line and headers), in bytes.
pub(crate) const MAX_HEAD: usize = 64 * 1024;
/// The most headers a request may have.
pub(crate) const MAX_HEADERS: usize = 100;
/// The longest request URI (path and query), in bytes.
pub(crate) const MAX_URI: usize = 8 * 1024;

/// **414** `uri_too_long` for a URI over [`MAX_URI`] bytes (hyper's own
/// limit is far higher and past [`MAX_HEAD`] anyway).
pub(crate) fn uri_too_long(req: &Request) -> Option<Response> {
    let len = req.uri().path_and_query().map_or(0, |p| p.as_str().len());
    (len > MAX_URI).then(|| {
        ApiError::new(
            StatusCode::URI_TOO_LONG,
            "uri_too_long",
            format!("the request URI is {len} bytes long; at most {MAX_URI} are allowed"),
        )
        .into_response()
    })
}

/// Whether `headers` hold more than one `Host`: RFC 9112 §3.2 has a
/// server answer 400 (hyper takes them; two names would reach a check
/// that reads the first and an upstream that reads the last). Both
/// listeners refuse it.
pub(crate) fn many_hosts(headers: &HeaderMap) -> bool {
    headers.get_all(header::HOST).iter().nth(1).is_some()
}

/// The message of that refusal.
pub(crate) const MANY_HOSTS: &str = "the request has more than one Host header; send one (RFC 9112 §3.2)";

/// **400** `bad_request` for a request with more than one `Host`.
pub(crate) fn many_hosts_refused(req: &Request) -> Option<Response> {
    many_hosts(req.headers()).then(|| ApiError::bad_request(MANY_HOSTS).into_response())
}

/// A connection whose hyper-made parse-error answers are rewritten.
#[derive(Debug)]
pub(crate) struct JsonParseErrors<T> {
    inner: T,
    /// The rewritten answer, still to be written; and how much of it is.
    out: Vec<u8>,
    written: usize,
}

impl<T> JsonParseErrors<T> {
    pub(crate) fn new(inner: T) -> Self {
        JsonParseErrors {
            inner,
            out: Vec::new(),
            written: 0,
        }
    }
}

/// Where in `buf` hyper's automatic answer starts, if `buf` ends with one.
fn automatic_answer_at(buf: &[u8]) -> Option<usize> {
    // The answer is about 110 bytes.
    let from = buf.len().saturating_sub(200);
    let start = from + buf[from..].windows(9).rposition(|w| w == b"HTTP/1.1 ")?;
    parse_automatic(&buf[start..]).map(|_| start)
}

/// The status and date line of hyper's automatic answer `head`.
fn parse_automatic(head: &[u8]) -> Option<(u16, &str)> {
    let text = std::str::from_utf8(head).ok()?;
    let text = text.strip_suffix("\r\n\r\n")?;
    let mut lines = text.split("\r\n");
    let status_line = lines.next()?;
    let status: u16 = status_line.strip_prefix("HTTP/1.1 ")?.get(..3)?.parse().ok()?;
    if !matches!(status, 400 | 414 | 431) {
        return None;
    }
    let (mut connection, mut length, mut date) = (false, false, None);
    for line in lines {
        match line {
            "connection: close" if !connection => connection = true,
            "content-length: 0" if !length => length = true,
            _ if line.starts_with("date: ") && date.is_none() => date = Some(line),
            _ => return None,
        }
    }
    (connection && length).then_some((status, date.unwrap_or("")))
}

/// The answer to write instead of hyper's `head`.
fn rewrite(head: &[u8]) -> Vec<u8> {
    let Some((status, date)) = parse_automatic(head) else {
        return head.to_vec();
    };
    let (reason, code, message) = match status {
        414 => (
            "URI Too Long",
            "uri_too_long",
            format!("the request URI is too long; at most {MAX_URI} bytes are allowed"),
        ),
        431 => (
            "Request Header Fields Too Large",
            "headers_too_large",
            format!(
                "the request head is too large: at most {MAX_HEADERS} headers, and {MAX_HEAD} bytes with the request line"
            ),
        ),
        _ => (
            "Bad Request",
            "bad_request",
            "malformed HTTP request: the request line or a header could not be parsed".to_owned(),
        ),
    };
    let body = tollgate::error_body(code, &message);
    let date = if date.is_empty() {
        String::new()
    } else {
        format!("{date}\r\n")
    };
    format!(
        "HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n{date}\r\n{body}",
        body.len()
    )
    .into_bytes()
}

impl<T: AsyncWrite + Unpin> JsonParseErrors<T> {
    /// Writes what is left of a rewritten answer.
    fn drain(&mut self, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        while self.written < self.out.len() {
            let n = ready!(Pin::new(&mut self.inner).poll_write(cx, &self.out[self.written..]))?;
            if n == 0 {
                return Poll::Ready(Err(std::io::ErrorKind::WriteZero.into()));
            }
            self.written += n;
        }
        self.out.clear();
        self.written = 0;
        Poll::Ready(Ok(()))
    }

    /// Takes hyper's answer `head` (all of it), to write ours instead.
    fn replace(&mut self, cx: &mut Context<'_>, head: &[u8]) -> Poll<std::io::Result<usize>> {
        self.out = rewrite(head);
        self.written = 0;
        // hyper flushes next; what is not written now is written then.
        if let Poll::Ready(Err(e)) = self.drain(cx) {
            return Poll::Ready(Err(e));
        }
        Poll::Ready(Ok(head.len()))
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for JsonParseErrors<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for JsonParseErrors<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        ready!(self.drain(cx))?;
        match automatic_answer_at(buf) {
            None => Pin::new(&mut self.inner).poll_write(cx, buf),
            // What comes before it first, as it is.
            Some(0) => self.replace(cx, buf),
            Some(at) => Pin::new(&mut self.inner).poll_write(cx, &buf[..at]),
        }
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        ready!(self.drain(cx))?;
        let Some(last) = bufs.iter().rposition(|b| !b.is_empty()) else {
            return Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        };
        match automatic_answer_at(&bufs[last]) {
            None => Pin::new(&mut self.inner).poll_write_vectored(cx, bufs),
            Some(at) => {
                if at == 0 && bufs[..last].iter().all(|b| b.is_empty()) {
                    let head = bufs[last].to_vec();
                    return self.replace(cx, &head);
                }
                // What comes before it first, as it is.
                let mut before: Vec<IoSlice<'_>> = bufs[..last].to_vec();
                before.push(IoSlice::new(&bufs[last][..at]));
                Pin::new(&mut self.inner).poll_write_vectored(cx, &before)
            }
        }
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        ready!(self.drain(cx))?;
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        ready!(self.drain(cx))?;
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HYPER_400: &[u8] =
        b"HTTP/1.1 400 Bad Request\r\nconnection: close\r\ncontent-length: 0\r\ndate: Tue, 24 Nov 2026 05:31:37 GMT\r\n\r\n";

    #[test]
    fn recognises_only_hypers_own_answers() {
        assert_eq!(automatic_answer_at(HYPER_400), Some(0));
        let mut after = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}".to_vec();
        let at = after.len();
        after.extend_from_slice(HYPER_400);
        assert_eq!(automatic_answer_at(&after), Some(at));
        let ours = b"HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\ncontent-length: 0\r\n\r\n";
        assert_eq!(automatic_answer_at(ours), None);
        let not_last = [HYPER_400, b"x"].concat();
        assert_eq!(automatic_answer_at(&not_last), None);
        let ok = b"HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 0\r\n\r\n";
        assert_eq!(automatic_answer_at(ok), None);
    }

    #[test]
    fn the_rewrite_carries_the_json_error() {
        let text = String::from_utf8(rewrite(HYPER_400)).expect("utf-8");
        let (head, body) = text.split_once("\r\n\r\n").expect("head");
        assert!(head.starts_with("HTTP/1.1 400 Bad Request\r\n"), "{head}");
        assert!(head.contains("content-type: application/json"), "{head}");
        assert!(
            head.contains(&format!("content-length: {}", body.len())),
            "{head}"
        );
        let v: serde_json::Value = serde_json::from_str(body).expect("json");
        assert_eq!(v["error"]["code"], "bad_request");
    }

    #[tokio::test]
    async fn writes_the_rewritten_answer() {
        use tokio::io::AsyncWriteExt;
        let mut conn = JsonParseErrors::new(Vec::new());
        conn.write_all(HYPER_400).await.expect("write");
        conn.flush().await.expect("flush");
        let text = String::from_utf8(conn.inner).expect("utf-8");
        assert!(text.ends_with("\"}}"), "{text}");
    }
}
