//! The HTTP server loop every stage runs: axum's router on hyper, with what `axum::serve` leaves out — a
//! cap on open connections and on those of one address, a few connections reserved for health, readiness
//! and metrics, a deadline for a request's headers (which also closes keep-alive connections left idle),
//! and a deadline on connections that stop moving bytes (a stalled upload, a client that never reads its
//! answer). Slow or idle clients cannot hold the server's memory or sockets, nor blind its probes.

use crate::events::{ConnectionLimitReached, ConnectionRefusedPerPeer, Emit};
use std::collections::HashMap;
use std::future::Future;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::extract::Request;
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio::time::{Instant, Sleep};

use crate::error::ApiError;

/// Bounds on the connections one process serves.
#[derive(Debug, Clone, Copy)]
pub struct ConnectionLimits {
    /// Connections open at once for any request; beyond them only the reserved ones are served.
    pub max_connections: usize,
    /// Connections one client address may hold at once (of both kinds); more are refused at accept.
    pub max_connections_per_peer: usize,
    /// Connections beyond `max_connections` that serve only [`PROBE_PATHS`] (one request each, a short
    /// header deadline): health checks and scrapes answer while slow clients hold every other slot.
    pub reserved_connections: usize,
    /// A request's headers must arrive within this; it also closes a keep-alive connection idle this long.
    pub header_read_timeout: Duration,
    /// A connection on which no byte moves either way for this long is closed.
    pub idle_timeout: Duration,
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        ConnectionLimits {
            max_connections: 1024,
            max_connections_per_peer: 256,
            reserved_connections: 32,
            header_read_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
        }
    }
}

/// What a reserved connection serves.
pub const PROBE_PATHS: [&str; 3] = ["/healthz", "/readyz", "/metrics"];

/// The header deadline of a reserved connection: a probe sends its request at once.
const RESERVED_HEADER_TIMEOUT: Duration = Duration::from_secs(2);

/// Open connections per client address.
struct Peers {
    limit: usize,
    open: Mutex<HashMap<IpAddr, usize>>,
}

/// One open connection of an address, given back when the connection ends.
struct PeerSlot {
    peers: Arc<Peers>,
    address: IpAddr,
}

impl Peers {
    fn enter(self: &Arc<Self>, address: IpAddr) -> Option<PeerSlot> {
        let mut open = self.open.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let count = open.entry(address).or_insert(0);
        if *count >= self.limit {
            return None;
        }
        *count += 1;
        Some(PeerSlot { peers: Arc::clone(self), address })
    }
}

impl Drop for PeerSlot {
    fn drop(&mut self) {
        let mut open = self.peers.open.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(count) = open.get_mut(&self.address) {
            *count -= 1;
            if *count == 0 {
                open.remove(&self.address);
            }
        }
    }
}

/// Middleware of reserved connections: probes pass, anything else is told to come back.
async fn probes_only(request: Request, next: Next) -> Response {
    if PROBE_PATHS.contains(&request.uri().path()) {
        return next.run(request).await;
    }
    let mut response = ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "the server is at server.max_connections; retry".to_owned(),
    )
    .into_response();
    response.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}

/// Serves `app` on `listener` until `shutdown` resolves, then lets the open requests finish (at most
/// `drain` long).
pub async fn serve(
    listener: TcpListener,
    app: axum::Router,
    limits: ConnectionLimits,
    shutdown: impl Future<Output = ()>,
    drain: Duration,
) -> std::io::Result<()> {
    let general = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let reserved = Arc::new(Semaphore::new(limits.reserved_connections));
    let peers = Arc::new(Peers { limit: limits.max_connections_per_peer.max(1), open: Mutex::default() });
    let reserved_app = app.clone().layer(axum::middleware::from_fn(probes_only));
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    // HTTP/1.1 only, served by hyper's HTTP/1 connection itself: hyper-util's `auto` connection first reads
    // a few bytes to tell HTTP/2 apart, and hyper's read buffer then doubles to 16 KiB on every connection.
    let mut builder = http1::Builder::new();
    builder.timer(TokioTimer::new()).header_read_timeout(limits.header_read_timeout);
    let mut reserved_builder = http1::Builder::new();
    reserved_builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout.min(RESERVED_HEADER_TIMEOUT))
        .keep_alive(false);
    let peer_refusal = serde_json::json!({"error": format!(
        "too many connections from this address (server.max_connections_per_peer = {})",
        limits.max_connections_per_peer
    )})
    .to_string();
    let peer_refusal = format!(
        "HTTP/1.1 429 Too Many Requests\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{peer_refusal}",
        peer_refusal.len()
    );
    tokio::pin!(shutdown);
    loop {
        // A general slot if one is free, else a reserved one; with neither, new connections wait in the
        // listen backlog until one closes.
        // A general slot if one is free, else a reserved one (`true`); with neither, new connections wait
        // in the listen backlog until one closes. The permit is held for as long as the connection.
        let (permit, reserved_slot) =
            match (general.clone().try_acquire_owned(), reserved.clone().try_acquire_owned()) {
                (Ok(permit), _) => (permit, false),
                (Err(_), Ok(permit)) => (permit, true),
                (Err(_), Err(_)) => tokio::select! {
                    permit = general.clone().acquire_owned() => match permit {
                        Ok(permit) => (permit, false),
                        Err(_) => break,
                    },
                    permit = reserved.clone().acquire_owned() => match permit {
                        Ok(permit) => (permit, true),
                        Err(_) => break,
                    },
                    () = &mut shutdown => break,
                },
            };
        if reserved_slot || general.available_permits() == 0 {
            let (max_connections, reserved_connections) =
                (limits.max_connections, limits.reserved_connections);
            ConnectionLimitReached { max_connections, reserved_connections }.emit();
        }
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(err) => {
                    // Out of file descriptors and the like: back off a moment instead of spinning.
                    tracing::warn!(error = %err, "cannot accept a connection");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let Some(peer_slot) = peers.enter(peer.ip()) else {
            ConnectionRefusedPerPeer { peer: peer.ip(), limit: limits.max_connections_per_peer }.emit();
            // Best effort, never waiting on the client: the answer fits one segment of a fresh socket.
            let _ = stream.try_write(peer_refusal.as_bytes());
            continue;
        };
        let _ = stream.set_nodelay(true);
        let io = TokioIo::new(Inactivity::new(stream, limits.idle_timeout));
        let connection = match reserved_slot {
            false => builder.serve_connection(io, TowerToHyperService::new(app.clone())),
            true => reserved_builder.serve_connection(io, TowerToHyperService::new(reserved_app.clone())),
        };
        let connection = graceful.watch(connection);
        tokio::spawn(async move {
            // Closed by the client, a timeout, or a protocol error: nothing to answer any more.
            if let Err(err) = connection.await {
                tracing::debug!(error = %err, "connection closed");
            }
            drop((permit, peer_slot));
        });
    }
    drop(listener);
    if tokio::time::timeout(drain, graceful.shutdown()).await.is_err() {
        tracing::warn!(drain_seconds = drain.as_secs(), "requests still open at shutdown were cut");
    }
    Ok(())
}

/// A stream that fails with `TimedOut` once no byte has moved either way for `limit`.
struct Inactivity<S> {
    inner: S,
    limit: Duration,
    deadline: Pin<Box<Sleep>>,
}

impl<S> Inactivity<S> {
    fn new(inner: S, limit: Duration) -> Self {
        Inactivity { inner, limit, deadline: Box::pin(tokio::time::sleep(limit)) }
    }

    fn moved(&mut self) {
        self.deadline.as_mut().reset(Instant::now() + self.limit);
    }

    fn expired(&mut self, cx: &mut Context<'_>) -> bool {
        self.deadline.as_mut().poll(cx).is_ready()
    }
}

fn timed_out() -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::TimedOut, "no bytes moved within server.idle_timeout_seconds")
}

impl<S: AsyncRead + Unpin> AsyncRead for Inactivity<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        match Pin::new(&mut this.inner).poll_read(cx, buf) {
            Poll::Ready(result) => {
                if buf.filled().len() > before {
                    this.moved();
                }
                Poll::Ready(result)
            }
            Poll::Pending if this.expired(cx) => Poll::Ready(Err(timed_out())),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Inactivity<S> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        match Pin::new(&mut this.inner).poll_write(cx, data) {
            Poll::Ready(Ok(written)) => {
                if written > 0 {
                    this.moved();
                }
                Poll::Ready(Ok(written))
            }
            Poll::Pending if this.expired(cx) => Poll::Ready(Err(timed_out())),
            other => other,
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        match Pin::new(&mut this.inner).poll_flush(cx) {
            Poll::Pending if this.expired(cx) => Poll::Ready(Err(timed_out())),
            other => other,
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}
