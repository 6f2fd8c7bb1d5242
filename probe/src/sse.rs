//! The legacy HTTP+SSE transport (MCP 2024-11-05), which rmcp no longer ships: a GET opens an event
//! stream whose first `endpoint` event names where to POST requests; responses and notifications arrive
//! as `message` events on the stream. Servers built on older SDKs still speak only this.

use std::future::Future;

use futures::StreamExt;
use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};
use rmcp::transport::Transport;
use rmcp::RoleClient;
use sse_stream::SseStream;
use tokio::sync::mpsc;

/// Messages buffered between the event stream and the session.
const INCOMING: usize = 64;

#[derive(Debug, thiserror::Error)]
pub enum SseError {
    #[error("{0}")]
    Http(String),
    #[error("the server's message endpoint {0:?} is not on the same origin as the SSE url")]
    ForeignEndpoint(String),
    #[error("the event stream ended before the server named its message endpoint")]
    NoEndpoint,
}

pub(crate) struct SseTransport {
    client: reqwest::Client,
    endpoint: url::Url,
    headers: http::HeaderMap,
    incoming: mpsc::Receiver<ServerJsonRpcMessage>,
    reader: tokio::task::JoinHandle<()>,
}

fn http_error(err: impl std::fmt::Display) -> SseError {
    SseError::Http(err.to_string())
}

/// Opens the event stream and waits for the `endpoint` event.
pub(crate) async fn connect(
    url: &str,
    headers: &[(http::HeaderName, http::HeaderValue)],
) -> Result<SseTransport, SseError> {
    let base = url::Url::parse(url).map_err(http_error)?;
    let headers: http::HeaderMap = headers.iter().cloned().collect();
    let client = reqwest::Client::builder().build().map_err(http_error)?;
    let response = client
        .get(base.clone())
        .headers(headers.clone())
        .header(http::header::ACCEPT, "text/event-stream")
        .send()
        .await
        .and_then(reqwest::Response::error_for_status)
        .map_err(http_error)?;
    let mut events = SseStream::from_bytes_stream(response.bytes_stream());
    let endpoint = loop {
        match events.next().await {
            Some(Ok(event)) if event.event.as_deref() == Some("endpoint") => {
                break event.data.unwrap_or_default();
            }
            Some(Ok(_)) => continue,
            Some(Err(err)) => return Err(http_error(err)),
            None => return Err(SseError::NoEndpoint),
        }
    };
    let endpoint = base.join(endpoint.trim()).map_err(http_error)?;
    // Requests carry the configured headers (credentials): they go only where the stream came from.
    if endpoint.origin() != base.origin() {
        return Err(SseError::ForeignEndpoint(endpoint.to_string()));
    }
    let (sender, incoming) = mpsc::channel(INCOMING);
    let reader = tokio::spawn(async move {
        while let Some(event) = events.next().await {
            let Ok(event) = event else { break };
            if !matches!(event.event.as_deref(), None | Some("message")) {
                continue;
            }
            match serde_json::from_str::<ServerJsonRpcMessage>(event.data.as_deref().unwrap_or_default()) {
                Ok(message) => {
                    if sender.send(message).await.is_err() {
                        break;
                    }
                }
                Err(err) => tracing::debug!(error = %err, "sse message is not JSON-RPC; skipped"),
            }
        }
    });
    Ok(SseTransport { client, endpoint, headers, incoming, reader })
}

impl Transport<RoleClient> for SseTransport {
    type Error = SseError;

    fn send(
        &mut self,
        item: ClientJsonRpcMessage,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        let request = self.client.post(self.endpoint.clone()).headers(self.headers.clone()).json(&item);
        async move {
            request.send().await.and_then(reqwest::Response::error_for_status).map_err(http_error)?;
            Ok(())
        }
    }

    fn receive(&mut self) -> impl Future<Output = Option<ServerJsonRpcMessage>> + Send {
        self.incoming.recv()
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        self.reader.abort();
        Ok(())
    }
}
