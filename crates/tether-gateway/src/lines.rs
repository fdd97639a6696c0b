//! The gateway's own newline-delimited JSON-RPC transport (stdio, and the hand-off's Unix
//! socket): rmcp's stdio transport, but answering `tools/list` from the catalogue's
//! pre-serialized list.
//!
//! Why: profiled with callgrind, a `tools/list` of 849 tools through rmcp's transport spent
//! 64 % of the gateway's instructions serializing the list and 26 % cloning it (rmcp's
//! handler API takes an owned `ListToolsResult`) and dropping the clone — work that is the same
//! for every request until the catalogue changes. Here the handler answers with an empty list
//! carrying [`CATALOGUE_MARKER`] in `_meta`, and [`LineTransport::send`] writes the catalogue's
//! JSON, serialized once per change, in its place. Streamable HTTP keeps rmcp's transport and
//! the handler's full list.
//!
//! Reading follows rmcp's `AsyncRwTransport`: a UTF-8 BOM and a trailing CR are dropped, empty
//! lines skipped, unparsable JSON ignored, well-formed JSON that is not a JSON-RPC message
//! answered with "Invalid request" (a notification is skipped instead), lines over 16 MiB
//! discarded. A read cancelled mid-line (the service loop polls `receive` in a `select!`)
//! keeps its bytes for the next call.

use std::sync::Arc;

use rmcp::RoleServer;
use rmcp::model::{ClientCapabilities, ErrorData, JsonRpcMessage, ServerResult};
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use tokio::io::{
    AsyncBufReadExt as _, AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _,
};

use crate::catalogue::CATALOGUE_MARKER;
use crate::shared::Shared;

/// The longest line read (rmcp's limit too).
const MAX_LINE: usize = 16 * 1024 * 1024;

type Writer<W> = Arc<tokio::sync::Mutex<Option<W>>>;

/// Newline-delimited JSON-RPC on `R`/`W`, with the catalogue served pre-serialized.
pub(crate) struct LineTransport<R, W> {
    reader: tokio::io::BufReader<R>,
    /// The line read so far (kept when a read is cancelled).
    line: Vec<u8>,
    /// Discarding the rest of an overlong line.
    discarding: bool,
    writer: Writer<W>,
    shared: Arc<Shared>,
}

impl<R: AsyncRead + Unpin, W> LineTransport<R, W> {
    pub(crate) fn new(reader: R, writer: W, shared: Arc<Shared>) -> Self {
        Self {
            reader: tokio::io::BufReader::new(reader),
            line: Vec::new(),
            discarding: false,
            writer: Arc::new(tokio::sync::Mutex::new(Some(writer))),
            shared,
        }
    }
}

/// The bytes of one outgoing message, with its line end.
fn encode(shared: &Shared, item: &TxJsonRpcMessage<RoleServer>) -> Vec<u8> {
    if let JsonRpcMessage::Response(response) = item
        && let ServerResult::ListToolsResult(list) = &response.result
        && list
            .meta
            .as_ref()
            .is_some_and(|meta| meta.contains_key(CATALOGUE_MARKER))
        && let Ok(id) = serde_json::to_string(&response.id)
    {
        let catalogue = shared.catalogue();
        let mut bytes = Vec::with_capacity(catalogue.listed_json.len() + id.len() + 48);
        bytes.extend_from_slice(br#"{"jsonrpc":"2.0","id":"#);
        bytes.extend_from_slice(id.as_bytes());
        bytes.extend_from_slice(br#","result":{"tools":"#);
        bytes.extend_from_slice(catalogue.listed_json.as_bytes());
        bytes.extend_from_slice(b"}}\n");
        return bytes;
    }
    // Serializing rmcp's own message types cannot fail.
    let mut bytes = serde_json::to_vec(item).unwrap_or_default();
    bytes.push(b'\n');
    bytes
}

async fn write<W: AsyncWrite + Unpin>(writer: &Writer<W>, bytes: &[u8]) -> std::io::Result<()> {
    let mut writer = writer.lock().await;
    let Some(writer) = writer.as_mut() else {
        return Err(std::io::Error::new(
            std::io::ErrorKind::NotConnected,
            "the transport is closed",
        ));
    };
    writer.write_all(bytes).await?;
    writer.flush().await
}

impl<R, W> Transport<RoleServer> for LineTransport<R, W>
where
    R: AsyncRead + Send + Unpin,
    W: AsyncWrite + Send + Unpin + 'static,
{
    type Error = std::io::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleServer>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        let bytes = encode(&self.shared, &item);
        drop(item);
        let writer = Arc::clone(&self.writer);
        async move { write(&writer, &bytes).await }
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleServer>> {
        loop {
            let room = (MAX_LINE + 1).saturating_sub(self.line.len());
            let read = (&mut self.reader)
                .take(room as u64)
                .read_until(b'\n', &mut self.line)
                .await;
            match read {
                Ok(0) => return None,
                Ok(_) => {}
                Err(error) => {
                    tracing::debug!(%error, "reading from the client failed");
                    return None;
                }
            }
            if !self.line.ends_with(b"\n") {
                if self.line.len() > MAX_LINE {
                    tracing::warn!("a message over 16 MiB from the client is discarded");
                    self.line.clear();
                    self.discarding = true;
                }
                continue;
            }
            if std::mem::take(&mut self.discarding) {
                self.line.clear();
                continue;
            }
            let parsed = parse(&self.line);
            self.line.clear();
            match parsed {
                Parsed::Message(message) => return Some(*message),
                Parsed::Skip => {}
                Parsed::Invalid => {
                    let error = TxJsonRpcMessage::<RoleServer>::error(
                        ErrorData::invalid_request("Invalid request", None),
                        None,
                    );
                    if write(&self.writer, &encode(&self.shared, &error))
                        .await
                        .is_err()
                    {
                        return None;
                    }
                }
            }
        }
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        let writer = self.writer.lock().await.take();
        if let Some(mut writer) = writer {
            writer.shutdown().await?;
        }
        Ok(())
    }
}

/// A client's first message, read before the servers start so that tether declares to them
/// only what this client can answer (see [`read_first_line`]).
pub struct FirstLine<R> {
    /// The capabilities the client's first request declares (its `initialize`, or a
    /// 2026-07-28 request's `_meta`); `None` when it declares none or the client sent none.
    pub capabilities: Option<ClientCapabilities>,
    /// Whether the client closed its side before sending a message.
    pub closed: bool,
    /// What to serve the client from: the bytes read, then the rest.
    pub reader: tokio::io::Chain<std::io::Cursor<Vec<u8>>, tokio::io::BufReader<R>>,
}

/// Reads the client's first message (blank lines before it included, at most 16 MiB) and
/// hands back a reader that yields it again. Nothing is lost: what the client sent after it
/// (a client may send `notifications/initialized` and more at once) stays in the buffer.
pub async fn read_first_line<R: AsyncRead + Unpin>(reader: R) -> std::io::Result<FirstLine<R>> {
    let mut reader = tokio::io::BufReader::new(reader);
    let mut read = Vec::new();
    let mut start = 0;
    loop {
        let room = (MAX_LINE + 1).saturating_sub(read.len() - start);
        let got = (&mut reader)
            .take(room as u64)
            .read_until(b'\n', &mut read)
            .await?;
        let line = &read[start..];
        let blank = line.iter().all(u8::is_ascii_whitespace);
        if got == 0 || !line.ends_with(b"\n") || !blank {
            break;
        }
        start = read.len();
    }
    let line = &read[start..];
    let capabilities = declared_capabilities(line);
    Ok(FirstLine {
        capabilities,
        closed: line.iter().all(u8::is_ascii_whitespace) && !line.ends_with(b"\n"),
        reader: std::io::Cursor::new(read).chain(reader),
    })
}

/// The capabilities the client declares in the request on `line`: an `initialize`'s
/// `params.capabilities`, or a 2026-07-28 request's (`server/discover` or any other, with no
/// `initialize`) `params._meta["io.modelcontextprotocol/clientCapabilities"]`.
fn declared_capabilities(line: &[u8]) -> Option<ClientCapabilities> {
    let line = line.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(line);
    let message: serde_json::Value = serde_json::from_slice(line.trim_ascii()).ok()?;
    let params = message.get("params")?;
    let declared = if message.get("method")? == "initialize" {
        params.get("capabilities")?
    } else {
        params
            .get("_meta")?
            .get("io.modelcontextprotocol/clientCapabilities")?
    };
    serde_json::from_value(declared.clone()).ok()
}

enum Parsed {
    Message(Box<RxJsonRpcMessage<RoleServer>>),
    Skip,
    Invalid,
}

/// One line (with its `\n`) as a message, as rmcp's transport reads it.
fn parse(line: &[u8]) -> Parsed {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let line = line.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(line);
    if line.is_empty() {
        return Parsed::Skip;
    }
    match serde_json::from_slice(line) {
        Ok(message) => Parsed::Message(Box::new(message)),
        Err(error) => match error.classify() {
            // Not JSON: no id to answer; answering could start an error storm.
            serde_json::error::Category::Syntax | serde_json::error::Category::Eof => {
                tracing::debug!("ignoring an unparsable message from the client");
                Parsed::Skip
            }
            serde_json::error::Category::Data | serde_json::error::Category::Io => {
                // A notification nobody knows (no id) is skipped; anything else is refused.
                let notification = serde_json::from_slice::<serde_json::Value>(line)
                    .ok()
                    .is_some_and(|value| {
                        value.get("method").is_some() && value.get("id").is_none()
                    });
                if notification {
                    Parsed::Skip
                } else {
                    Parsed::Invalid
                }
            }
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_parse_as_rmcp_reads_them() {
        let request = b"\xEF\xBB\xBF{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/list\"}\r\n";
        assert!(matches!(parse(request), Parsed::Message(_)));
        assert!(matches!(parse(b"\n"), Parsed::Skip));
        assert!(matches!(parse(b"not json\n"), Parsed::Skip));
        assert!(matches!(
            parse(
                b"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/unknown-thing\",\"params\":7}\n"
            ),
            Parsed::Skip | Parsed::Message(_)
        ));
        assert!(matches!(
            parse(b"{\"id\":3,\"hello\":true}\n"),
            Parsed::Invalid
        ));
    }

    /// All that `first` read, and the rest after it.
    async fn replayed<R: AsyncRead + Unpin>(first: FirstLine<R>) -> Vec<u8> {
        let mut all = Vec::new();
        let mut reader = first.reader;
        reader.read_to_end(&mut all).await.expect("reading back");
        all
    }

    #[tokio::test]
    async fn the_first_line_is_read_for_its_capabilities_and_given_back_with_the_rest() {
        let input = concat!(
            "\n  \r\n",
            r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","#,
            r#""capabilities":{"elicitation":{"form":{}},"roots":{"listChanged":true},"experimental":{"x":{}}},"#,
            r#""clientInfo":{"name":"c","version":"1"}}}"#,
            "\n",
            r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
            "\n",
        );
        let first = read_first_line(input.as_bytes()).await.expect("reading");
        assert!(!first.closed);
        let capabilities = first.capabilities.clone().expect("an initialize");
        let declared = serde_json::to_value(tether_driver::passed_on_capabilities(&capabilities))
            .expect("serializing");
        assert_eq!(
            declared,
            serde_json::json!({"elicitation": {"form": {}}, "roots": {"listChanged": true}})
        );
        assert_eq!(replayed(first).await, input.as_bytes());
    }

    #[tokio::test]
    async fn another_first_message_or_none_declares_nothing_and_loses_nothing() {
        let input = "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/list\"}\nmore";
        let first = read_first_line(input.as_bytes()).await.expect("reading");
        assert!(first.capabilities.is_none());
        assert!(!first.closed);
        assert_eq!(replayed(first).await, input.as_bytes());

        let first = read_first_line(&b"\n\n"[..]).await.expect("reading");
        assert!(first.closed && first.capabilities.is_none());
        let first = read_first_line(&b""[..]).await.expect("reading");
        assert!(first.closed && first.capabilities.is_none());
        // A half-sent message before the client left is not an initialize, and stays.
        let first = read_first_line(&b"{\"method\":\"initia"[..])
            .await
            .expect("reading");
        assert!(!first.closed && first.capabilities.is_none());
        assert_eq!(replayed(first).await, b"{\"method\":\"initia");
    }
}
