//! The loopback page where a person types a secret: `GET /secret/NONCE` shows one form with
//! one password field, `POST /secret/NONCE` (`application/x-www-form-urlencoded`, field
//! `value`) hands the value to [`Refs::submit`] and kills the nonce.
//!
//! Admission is `tether_http::Admission`, the one every listener of tether's uses: the `Host`
//! header must name this listener (`127.0.0.1:PORT` or `localhost:PORT`), which defeats DNS
//! rebinding (421); the POST must carry an `Origin` of the same listener
//! ([`OriginRule::Required`]), which defeats cross-site form posts (403). The page has no
//! bearer token (the browser has none); a refusal is answered with a page that says why. No
//! value appears in a URL, a log line or a response.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use tether_config::SecretValue;
use tether_http::{Admission, OriginRule, Refusal};
use zeroize::Zeroizing;

use crate::refs::{Refs, Submitted};
use crate::submit::{AnnouncementKey, PROOF_PATH, is_challenge};

/// The largest form body taken (a PEM key fits; anything bigger is refused unread).
const MAX_BODY: usize = 64 * 1024;

#[derive(Clone)]
struct PageState {
    refs: Arc<Refs>,
    admission: Admission,
    key: AnnouncementKey,
}

/// The page's routes (`/secret/{nonce}`, and [`PROOF_PATH`] where it proves it holds `key`,
/// the key of its announcement), admitting by `admission` (the listener's, without a bearer
/// token).
pub fn router(refs: Arc<Refs>, admission: Admission, key: AnnouncementKey) -> Router {
    Router::new()
        .route("/secret/{nonce}", get(show).post(submit))
        .route(PROOF_PATH, get(prove))
        .with_state(PageState {
            refs,
            admission,
            key,
        })
}

/// Serves the page alone on `listener` until the process ends: its address.
pub fn serve(
    listener: tokio::net::TcpListener,
    refs: Arc<Refs>,
    key: AnnouncementKey,
) -> std::io::Result<SocketAddr> {
    let address = listener.local_addr()?;
    let app = router(refs, Admission::for_address(address), key).fallback(not_found);
    tokio::spawn(async move {
        if let Err(error) = axum::serve(listener, app).await {
            tracing::warn!("the secret entry page stopped: {error}");
        }
    });
    Ok(address)
}

/// HTML-escapes text for an element or an attribute.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

fn html(status: StatusCode, title: &str, body: &str) -> Response {
    let page = format!(
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<title>{title}</title>\n<style>body{{font-family:sans-serif;max-width:36em;margin:2em auto;padding:0 1em;line-height:1.5}}label,input,button{{font-size:1.1em}}input{{width:100%;box-sizing:border-box;padding:.4em}}button{{margin-top:1em;padding:.4em 1.2em}}</style>\n</head>\n<body>\n<main>\n{body}\n</main>\n</body>\n</html>\n",
        title = escape(title)
    );
    let mut response = (status, page).into_response();
    let headers = response.headers_mut();
    for (name, value) in [
        (header::CONTENT_TYPE, "text/html; charset=utf-8"),
        (header::CACHE_CONTROL, "no-store"),
        // Not `no-referrer`: under it a browser sends `Origin: null` with the form's own POST
        // (Fetch's request-origin serialisation), which the Origin check must refuse.
        (header::REFERRER_POLICY, "same-origin"),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::X_FRAME_OPTIONS, "DENY"),
        (
            header::CONTENT_SECURITY_POLICY,
            "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
        ),
    ] {
        headers.insert(name, HeaderValue::from_static(value));
    }
    response
}

fn refused(status: StatusCode, why: &str) -> Response {
    html(
        status,
        "Refused",
        &format!("<h1>Refused</h1>\n<p>{}</p>", escape(why)),
    )
}

/// The page that answers a refused request: why, in words for the person.
fn refusal(refusal: Refusal) -> Response {
    let why = match refusal {
        Refusal::Host => "Unexpected Host header.",
        Refusal::Origin => "This form only accepts submissions from its own page.",
        // The page's admission has no bearer token.
        Refusal::Bearer => "Not allowed.",
    };
    refused(refusal.status(), why)
}

fn gone() -> Response {
    html(
        StatusCode::NOT_FOUND,
        "Link no longer valid",
        "<h1>This link is no longer valid</h1>\n<p>It was already used, it expired, or it never existed. Ask the agent to request the value again.</p>",
    )
}

/// Any other path.
pub async fn not_found() -> Response {
    refused(StatusCode::NOT_FOUND, "Nothing here.")
}

async fn show(
    State(state): State<PageState>,
    Path(nonce): Path<String>,
    headers: HeaderMap,
) -> Response {
    if let Err(refused) = state.admission.check(&headers, OriginRule::IfPresent) {
        return refusal(refused);
    }
    let Some(info) = state.refs.page(&nonce) else {
        return gone();
    };
    let binding = &info.binding;
    tracing::info!(key = %binding.key, server = %binding.server, "secret entry page shown");
    let body = format!(
        "<h1>Enter {key}</h1>\n<p>tether is setting up the MCP server <strong>{server}</strong>, run as <strong>{launch}</strong>, and needs <strong>{key}</strong>. The value is used for that server and that {kind} only.</p>\n<p>{prompt}</p>\n<p>The value goes to tether on this computer only; the agent never sees it.</p>\n<form method=\"post\" action=\"/secret/{nonce}\" autocomplete=\"off\">\n<label for=\"value\">{key}</label>\n<input id=\"value\" name=\"value\" type=\"password\" required autofocus autocomplete=\"off\" spellcheck=\"false\">\n<button type=\"submit\">Submit</button>\n</form>",
        key = escape(&binding.key),
        server = escape(&binding.server),
        launch = escape(&binding.launch),
        kind = if binding.launch.starts_with("remote ") {
            "remote"
        } else {
            "package"
        },
        prompt = escape(&info.prompt),
        nonce = escape(&nonce),
    );
    html(StatusCode::OK, &format!("Enter {}", binding.key), &body)
}

/// `GET /announce/proof?challenge=HEX`: the proof that this listener is the page its
/// announcement file names (`tether secrets submit` asks before it sends a value). Plain text,
/// never cached; a browser page on another site is refused by the admission.
async fn prove(
    State(state): State<PageState>,
    uri: axum::http::Uri,
    headers: HeaderMap,
) -> Response {
    if let Err(refused) = state.admission.check(&headers, OriginRule::IfPresent) {
        return refusal(refused);
    }
    let challenge = uri
        .query()
        .unwrap_or_default()
        .split('&')
        .find_map(|pair| pair.strip_prefix("challenge="));
    let Some(challenge) = challenge.filter(|c| is_challenge(c)) else {
        return refused(StatusCode::BAD_REQUEST, "Expected a challenge.");
    };
    let mut response = state.key.proof(challenge).into_response();
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

/// Decodes one `application/x-www-form-urlencoded` component (`+` is a space).
fn form_decode(text: &[u8]) -> Option<Zeroizing<Vec<u8>>> {
    let mut out = Zeroizing::new(Vec::with_capacity(text.len()));
    let mut i = 0;
    while i < text.len() {
        match text[i] {
            b'+' => out.push(b' '),
            b'%' => {
                let hex = text.get(i + 1..i + 3)?;
                let hex = std::str::from_utf8(hex).ok()?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 2;
            }
            b => out.push(b),
        }
        i += 1;
    }
    Some(out)
}

/// The `value` field of a form body.
fn form_value(body: &[u8]) -> Option<SecretValue> {
    body.split(|b| *b == b'&').find_map(|pair| {
        let (name, value) = match pair.iter().position(|b| *b == b'=') {
            Some(at) => (&pair[..at], &pair[at + 1..]),
            None => (pair, &[][..]),
        };
        if name != b"value" {
            return None;
        }
        let bytes = form_decode(value)?;
        let text = std::str::from_utf8(&bytes).ok()?;
        Some(SecretValue::new(text.to_owned()))
    })
}

async fn submit(
    State(state): State<PageState>,
    Path(nonce): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    // The body is copied out of `Bytes` only once it is accepted; the copy is zeroized.
    if let Err(refused) = state.admission.check(&headers, OriginRule::Required) {
        return refusal(refused);
    }
    let form = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|t| {
            t.split(';').next().is_some_and(|m| {
                m.trim()
                    .eq_ignore_ascii_case("application/x-www-form-urlencoded")
            })
        });
    if !form {
        return refused(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "Expected a form (application/x-www-form-urlencoded).",
        );
    }
    if body.len() > MAX_BODY {
        return refused(StatusCode::PAYLOAD_TOO_LARGE, "The value is too long.");
    }
    let Some(info) = state.refs.page(&nonce) else {
        return gone();
    };
    let Some(value) = form_value(&body).filter(|v| !v.is_empty()) else {
        return refused(StatusCode::BAD_REQUEST, "The form had no value.");
    };
    tether_log::register([&value]);
    match state.refs.submit(&nonce, value) {
        Submitted::Accepted => {
            tracing::info!(key = %info.binding.key, "secret submitted on the entry page");
            html(
                StatusCode::OK,
                "Received",
                &format!(
                    "<h1>Received</h1>\n<p>tether has {}. You can close this page and go back to the agent.</p>",
                    escape(&info.binding.key)
                ),
            )
        }
        Submitted::Unknown => gone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn form_values_decode_plus_and_percent() {
        let value = form_value(b"other=1&value=a+b%26c%3D%25").expect("a value");
        assert_eq!(value.expose(), "a b&c=%");
        assert!(form_value(b"value=%zz").is_none());
        assert!(form_value(b"nothing=1").is_none());
    }

    #[test]
    fn escaping_keeps_markup_out() {
        assert_eq!(
            escape("<a href=\"x\">'&"),
            "&lt;a href=&quot;x&quot;&gt;&#39;&amp;"
        );
    }

    /// The page served alone on a loopback port, and a pending ref's page URL.
    async fn listening() -> (Arc<Refs>, SocketAddr, String) {
        let refs = Arc::new(Refs::new(crate::refs::IDLE_TTL));
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
            .await
            .expect("a loopback port");
        let key = AnnouncementKey::generate().expect("a key");
        let address = serve(listener, refs.clone(), key).expect("serving the page");
        let binding = crate::refs::Binding {
            server: "io.x/y".into(),
            launch: "npm package y 1.0.0".into(),
            key: "TOKEN".into(),
        };
        let (_, url) = refs
            .request(binding, "the token", &format!("http://{address}"))
            .expect("a ref");
        (refs, address, url)
    }

    fn client() -> reqwest::Client {
        reqwest::Client::builder()
            .no_proxy()
            .build()
            .expect("an HTTP client")
    }

    /// POSTs the form `value=v` to `url` with these `Host` and `Origin` headers (`None`: the
    /// listener's own Host, no Origin): the status and the body.
    async fn post(url: &str, host: Option<&str>, origin: Option<&str>) -> (u16, String) {
        let mut request = client()
            .post(url)
            .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
            .body("value=v");
        if let Some(host) = host {
            request = request.header(header::HOST, host);
        }
        if let Some(origin) = origin {
            request = request.header(header::ORIGIN, origin);
        }
        let response = request.send().await.expect("a POST");
        let status = response.status().as_u16();
        (status, response.text().await.expect("a body"))
    }

    #[tokio::test]
    async fn the_page_refuses_another_host_name_and_posts_from_elsewhere() {
        let (refs, address, url) = listening().await;
        let nonce = url.rsplit('/').next().expect("a nonce").to_owned();
        let own = format!("http://{address}");

        // A page under another name that resolves here (DNS rebinding): 421, GET and POST.
        let shown = client()
            .get(&url)
            .header(header::HOST, format!("rebound.test:{}", address.port()))
            .send()
            .await
            .expect("a GET");
        assert_eq!(shown.status().as_u16(), 421);
        assert!(
            shown
                .text()
                .await
                .expect("a body")
                .contains("Unexpected Host header.")
        );
        let (status, _) = post(&url, Some("rebound.test"), Some(&own)).await;
        assert_eq!(status, 421);
        // The listener's address on another port is another listener.
        let other_port = format!("127.0.0.1:{}", address.port().wrapping_add(1));
        assert_eq!(post(&url, Some(&other_port), Some(&own)).await.0, 421);

        // A POST without an Origin, from another site, or from an opaque origin: 403.
        for origin in [None, Some("http://evil.example"), Some("null")] {
            let (status, body) = post(&url, None, origin).await;
            assert_eq!(status, 403, "{origin:?}");
            assert!(
                body.contains("only accepts submissions from its own page"),
                "{body}"
            );
        }
        // None of that reached the ref: its page is still there and takes the value once.
        assert!(refs.page(&nonce).is_some());
        let shown = client().get(&url).send().await.expect("a GET");
        assert_eq!(shown.status().as_u16(), 200);
        let (status, body) = post(&url, None, Some(&own)).await;
        assert_eq!(status, 200, "{body}");
        assert!(body.contains("You can close this page"), "{body}");
        let localhost = format!("http://localhost:{}", address.port());
        assert_eq!(post(&url, None, Some(&localhost)).await.0, 404);
        assert!(refs.page(&nonce).is_none());
    }
}
