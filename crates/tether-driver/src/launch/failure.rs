//! One line that says why a remote (HTTP) MCP server could not be reached.
//!
//! rmcp and reqwest describe a failure as a chain of wrapped errors whose `Display` names Rust
//! types (`Transport [rmcp::transport::worker::WorkerTransport<…>]`) and leaves the cause
//! (connection refused, an unknown host) to a separate log line. This walks the chain, through
//! the wrappers whose inner error is not linked as a `source`, finds the cause, and says it in
//! words with what to try. The caller masks the result (the URL may hold a secret).

use std::error::Error;

use rmcp::ServiceError;
use rmcp::service::ClientInitializeError;
use rmcp::transport::streamable_http_client::{HttpStatusError, StreamableHttpError};

use tether_config::RemoteTransport;

use super::sse::SseError;

type Cause<'a> = &'a (dyn Error + 'static);

/// The failure to reach `url` over `transport` as one line.
pub fn describe(url: &str, transport: RemoteTransport, err: Cause<'_>) -> String {
    // The server was not asked: its headersHelper gave nothing to ask with.
    // (Carried as an `io::Error`, whose `source` skips the error it wraps.)
    let helper = |e: Cause<'_>| {
        let inner = e.downcast_ref::<std::io::Error>()?.get_ref()?;
        inner
            .downcast_ref::<super::HelperError>()
            .map(ToString::to_string)
    };
    if let Some(helper) = chain(err).into_iter().find_map(helper) {
        return helper;
    }
    format!("cannot reach {url}: {}", cause(transport, err))
}

/// Why `err` happened over `transport`, in words, with what to try where a hint helps.
pub fn cause(transport: RemoteTransport, err: Cause<'_>) -> String {
    with_hint(classify(&chain(err), Some(transport)))
}

/// Why a request to a server that had started failed, in words: rmcp's `Display` of a
/// [`ServiceError`] names transport types (`Transport [rmcp::…<…>] error: …`), which say
/// nothing to a user and change with rmcp. An error the server answered with is its message.
pub fn request_failure(err: &ServiceError) -> String {
    match err {
        ServiceError::McpError(error) => {
            format!(
                "the server answered error {}: {}",
                error.code.0, error.message
            )
        }
        ServiceError::TransportSend(error) => format!(
            "the request could not be sent: {}",
            with_hint(classify(&chain(error.error.as_ref()), None))
        ),
        ServiceError::TransportClosed => {
            "the connection to the server closed (it exited or ended the session)".to_owned()
        }
        ServiceError::UnexpectedResponse => {
            "the server answered with a message of another kind".to_owned()
        }
        ServiceError::Cancelled { .. } => "the request was cancelled".to_owned(),
        ServiceError::Timeout { timeout } => {
            format!("no answer within {} s", seconds(*timeout))
        }
        // The others (a lagging subscription, too many input rounds) name no type.
        other => other.to_string(),
    }
}

fn with_hint((cause, hint): (String, Option<&'static str>)) -> String {
    match hint {
        Some(hint) => format!("{cause}; {hint}"),
        None => cause,
    }
}

/// Every error in the chain, through rmcp's wrappers that keep their inner error out of
/// `source()`.
fn chain(err: Cause<'_>) -> Vec<Cause<'_>> {
    let mut all = Vec::new();
    let mut next = Some(err);
    while let Some(err) = next {
        all.push(err);
        next = inner(err);
        if all.len() > 32 {
            break;
        }
    }
    all
}

fn inner(err: Cause<'_>) -> Option<Cause<'_>> {
    if let Some(ClientInitializeError::TransportError { error, .. }) = err.downcast_ref() {
        return Some(error);
    }
    // The 2026-07-28 probe said "legacy" and `initialize` failed too: the second failure is
    // the one that tells what is wrong with the URL.
    if let Some(ClientInitializeError::LegacyFallbackFailed { fallback, .. }) = err.downcast_ref() {
        return Some(fallback.as_ref());
    }
    if let Some(StreamableHttpError::<reqwest::Error>::Client(client)) = err.downcast_ref() {
        return Some(client);
    }
    err.source()
}

/// The cause in words and, where one helps, what to try; `transport` is `None` where the
/// request's transport is not known (a status then gets no transport hint).
fn classify(
    chain: &[Cause<'_>],
    transport: Option<RemoteTransport>,
) -> (String, Option<&'static str>) {
    for err in chain {
        if let Some(status) = err.downcast_ref::<HttpStatusError>() {
            return status_cause(status.status, None, transport);
        }
        if let Some(StreamableHttpError::<reqwest::Error>::HttpStatus(status)) = err.downcast_ref()
        {
            return status_cause(status.status, None, transport);
        }
        if let Some(SseError::Status(status)) = err.downcast_ref::<SseError>() {
            return status_cause(*status, None, transport);
        }
        if let Some(StreamableHttpError::<reqwest::Error>::UnexpectedServerResponse(text)) =
            err.downcast_ref()
            && let Some((status, body)) = parse_status_text(text)
        {
            return status_cause(status, first_text_line(body), transport);
        }
        if let Some(io) = err.downcast_ref::<std::io::Error>() {
            match io.kind() {
                std::io::ErrorKind::ConnectionRefused => {
                    return (
                        "connection refused".to_owned(),
                        Some("is the server running and listening on that host and port?"),
                    );
                }
                std::io::ErrorKind::TimedOut => return timed_out(),
                _ => {}
            }
        }
        if let Some(request) = err.downcast_ref::<reqwest::Error>()
            && request.is_timeout()
        {
            return timed_out();
        }
    }
    let text: Vec<String> = chain.iter().map(ToString::to_string).collect();
    let all = text.join(" | ");
    if all.contains("dns error") {
        return (
            "the host name could not be resolved".to_owned(),
            Some("check the URL's host name and your network or DNS settings"),
        );
    }
    let lower = all.to_ascii_lowercase();
    if ["tls", "certificate", "invalidcontenttype", "handshake"]
        .iter()
        .any(|word| lower.contains(word))
    {
        return (
            "the TLS handshake failed".to_owned(),
            Some("check the scheme (http:// or https://) and the server's certificate"),
        );
    }
    // Nothing known: the innermost cause, which is the most specific one.
    let innermost = text.last().cloned().unwrap_or_default();
    (innermost, None)
}

fn timed_out() -> (String, Option<&'static str>) {
    (
        "the connection timed out".to_owned(),
        Some("check the host, the port and any firewall between"),
    )
}

fn status_cause(
    status: u16,
    body: Option<&str>,
    transport: Option<RemoteTransport>,
) -> (String, Option<&'static str>) {
    let reason = reqwest::StatusCode::from_u16(status)
        .ok()
        .and_then(|code| code.canonical_reason())
        .map(|reason| format!(" {reason}"))
        .unwrap_or_default();
    let body = body.map(|line| format!(" ({line})")).unwrap_or_default();
    let hint = match status {
        401 | 403 => Some("check the credentials the config sends (headers, token)"),
        404 | 405 | 501 => transport.map(|transport| match transport {
            RemoteTransport::StreamableHttp => {
                "the URL does not serve Streamable HTTP MCP: check the path (often /mcp), or set \"type\": \"sse\" for a legacy SSE endpoint"
            }
            RemoteTransport::Sse => {
                "the URL does not serve an SSE MCP endpoint: check the path (often /sse), or set \"type\": \"http\" for Streamable HTTP"
            }
        }),
        429 | 500..=599 => Some("the server is failing or busy; try again later"),
        _ => None,
    };
    (format!("HTTP {status}{reason}{body}"), hint)
}

/// `HTTP 404 Not Found: body` (rmcp's text for a status it does not model) as status and body.
fn parse_status_text(text: &str) -> Option<(u16, &str)> {
    let rest = text.strip_prefix("HTTP ")?;
    let code = rest.get(..3)?.parse().ok()?;
    let body = rest.split_once(": ").map_or("", |(_, body)| body);
    Some((code, body))
}

/// The first line of a text body worth showing: none for an HTML page, at most 200 characters.
fn first_text_line(body: &str) -> Option<&str> {
    let line = body.lines().map(str::trim).find(|line| !line.is_empty())?;
    if line.starts_with('<') {
        return None;
    }
    let end = line
        .char_indices()
        .nth(200)
        .map_or(line.len(), |(index, _)| index);
    line.get(..end)
}

/// `timeout` in seconds for a message: at most two decimals, no trailing zeros ("0.5", "6").
pub(crate) fn seconds(timeout: std::time::Duration) -> String {
    let text = format!("{:.2}", timeout.as_secs_f64());
    text.trim_end_matches('0').trim_end_matches('.').to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_text_and_body_lines() {
        assert_eq!(
            parse_status_text("HTTP 404 Not Found: Cannot POST /mcp"),
            Some((404, "Cannot POST /mcp"))
        );
        assert_eq!(first_text_line("\n  <!DOCTYPE html>\n<p>x</p>"), None);
        assert_eq!(
            first_text_line("\nno such route\nmore"),
            Some("no such route")
        );
        let (cause, hint) = status_cause(
            404,
            Some("no such route"),
            Some(RemoteTransport::StreamableHttp),
        );
        assert_eq!(cause, "HTTP 404 Not Found (no such route)");
        assert!(hint.is_some_and(|h| h.contains("\"type\": \"sse\"")));
    }

    #[test]
    fn an_io_cause_deep_in_the_chain_is_named() {
        let io = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        let line = describe(
            "http://127.0.0.1:9/mcp",
            RemoteTransport::StreamableHttp,
            &io,
        );
        assert_eq!(
            line,
            "cannot reach http://127.0.0.1:9/mcp: connection refused; is the server running and listening on that host and port?"
        );
    }

    #[test]
    fn seconds_show_at_most_two_decimals() {
        use std::time::Duration;
        assert_eq!(super::seconds(Duration::from_millis(500)), "0.5");
        assert_eq!(super::seconds(Duration::from_secs(6)), "6");
        assert_eq!(super::seconds(Duration::from_millis(4_494)), "4.49");
        assert_eq!(super::seconds(Duration::from_nanos(5_999_992_609)), "6");
    }
}
