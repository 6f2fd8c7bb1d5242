//! Request bodies, read once for every route before any handler sees them: into one buffer that grows with
//! the data (a body dribbled one byte per TCP segment must not pin one read buffer per byte, as collecting
//! hyper's frames does), under a size limit, within a deadline for the whole body, at a minimum average
//! rate, and within a budget of body bytes the whole process holds at once. The handler then gets the body
//! as one frame and reads it at no further cost.

use crate::events::{Emit, RequestBodyRefused};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http_body_util::BodyExt;
use tokio::time::Instant;

use crate::error::ApiError;

/// How request bodies are read (server settings).
#[derive(Debug, Clone, Copy)]
pub struct BodyLimits {
    /// The largest body any route takes; larger is 413 (routes may refuse smaller ones themselves).
    pub max_bytes: usize,
    /// The whole body must arrive within this, counted from the end of the headers.
    pub timeout: Duration,
    /// After [`RATE_GRACE`], a body must have arrived at this average rate at least.
    pub min_bytes_per_second: usize,
    /// Body bytes all requests together may hold at once; beyond it a request is 503 (retry).
    pub max_bytes_in_flight: usize,
}

impl Default for BodyLimits {
    fn default() -> Self {
        BodyLimits {
            max_bytes: 5 * 1024 * 1024,
            timeout: Duration::from_secs(60),
            min_bytes_per_second: 1024,
            max_bytes_in_flight: 256 * 1024 * 1024,
        }
    }
}

/// How long a body may take before its rate is checked (a client's first segment, a slow start).
pub const RATE_GRACE: Duration = Duration::from_secs(5);

/// The budget shared by every request of one server.
#[derive(Debug)]
pub struct BodyReader {
    limits: BodyLimits,
    in_flight: AtomicUsize,
}

impl BodyReader {
    pub fn new(limits: BodyLimits) -> Arc<Self> {
        Arc::new(BodyReader { limits, in_flight: AtomicUsize::new(0) })
    }

    /// Bytes of bodies held now (for tests and the gauge).
    pub fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::Relaxed)
    }
}

/// Releases what a request counted in the budget when the request is done with its body.
struct Held<'a> {
    reader: &'a BodyReader,
    bytes: usize,
}

impl Held<'_> {
    fn take(&mut self, more: usize) -> bool {
        let limit = self.reader.limits.max_bytes_in_flight;
        let taken = self.reader.in_flight.fetch_update(Ordering::AcqRel, Ordering::Acquire, |held| {
            held.checked_add(more).filter(|total| *total <= limit)
        });
        if taken.is_ok() {
            self.bytes += more;
        }
        taken.is_ok()
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        self.reader.in_flight.fetch_sub(self.bytes, Ordering::AcqRel);
    }
}

/// Why a body was not read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BodyRefused {
    #[error("request body is larger than {0} bytes")]
    TooLarge(usize),
    #[error("request body did not arrive within {0} s")]
    TooSlow(u64),
    #[error("request body arrived at {rate} bytes/s, below the {min} bytes/s the server takes")]
    BelowRate { rate: usize, min: usize },
    #[error("the server is reading too many request bodies at once; retry")]
    Busy,
    #[error("request body could not be read: {0}")]
    Broken(String),
}

impl BodyRefused {
    fn status(&self) -> StatusCode {
        match self {
            BodyRefused::TooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            BodyRefused::TooSlow(_) | BodyRefused::BelowRate { .. } => StatusCode::REQUEST_TIMEOUT,
            BodyRefused::Busy => StatusCode::SERVICE_UNAVAILABLE,
            BodyRefused::Broken(_) => StatusCode::BAD_REQUEST,
        }
    }

    fn reason(&self) -> &'static str {
        match self {
            BodyRefused::TooLarge(_) => "too_large",
            BodyRefused::TooSlow(_) => "deadline",
            BodyRefused::BelowRate { .. } => "below_rate",
            BodyRefused::Busy => "busy",
            BodyRefused::Broken(_) => "broken",
        }
    }
}

/// Middleware: reads the body as described above and hands it on as one frame; answers a refusal with a
/// JSON error and closes the connection (the rest of that body is never read).
pub async fn read_whole_body(
    State(reader): State<Arc<BodyReader>>,
    request: Request,
    next: Next,
) -> Response {
    let (parts, body) = request.into_parts();
    let declared = parts
        .headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    if axum::body::HttpBody::is_end_stream(&body) || declared == Some(0) {
        return next.run(Request::from_parts(parts, body)).await;
    }
    let mut held = Held { reader: &reader, bytes: 0 };
    match read(&mut held, body, declared, Instant::now()).await {
        Ok(bytes) => {
            let response = next.run(Request::from_parts(parts, Body::from(bytes))).await;
            drop(held);
            response
        }
        Err(refused) => {
            RequestBodyRefused { path: parts.uri.path(), kind: refused.reason(), reason: &refused }.emit();
            let mut response = ApiError::new(refused.status(), refused.to_string()).into_response();
            response.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
            response
        }
    }
}

async fn read(
    held: &mut Held<'_>,
    mut body: Body,
    declared: Option<usize>,
    started: Instant,
) -> Result<Bytes, BodyRefused> {
    let limits = held.reader.limits;
    if declared.is_some_and(|length| length > limits.max_bytes) {
        return Err(BodyRefused::TooLarge(limits.max_bytes));
    }
    let deadline = started + limits.timeout;
    // One buffer that grows with what arrives (never ahead of it: a declared length is a claim).
    let mut buffer: Vec<u8> = Vec::new();
    loop {
        let now = Instant::now();
        let elapsed = now.duration_since(started);
        if elapsed > RATE_GRACE {
            let rate = (buffer.len() as f64 / elapsed.as_secs_f64()) as usize;
            if rate < limits.min_bytes_per_second {
                return Err(BodyRefused::BelowRate { rate, min: limits.min_bytes_per_second });
            }
        }
        // Wake at the next rate check too, so a body that stops altogether is cut there.
        let next_check = if elapsed < RATE_GRACE {
            started + RATE_GRACE + Duration::from_millis(1)
        } else {
            now + Duration::from_secs(1)
        };
        let frame = match tokio::time::timeout_at(next_check.min(deadline), body.frame()).await {
            Err(_) if Instant::now() >= deadline => {
                return Err(BodyRefused::TooSlow(limits.timeout.as_secs()))
            }
            Err(_) => continue,
            Ok(None) => break,
            Ok(Some(Err(err))) => return Err(BodyRefused::Broken(err.to_string())),
            Ok(Some(Ok(frame))) => frame,
        };
        let Ok(data) = frame.into_data() else { continue };
        if buffer.len() + data.len() > limits.max_bytes {
            return Err(BodyRefused::TooLarge(limits.max_bytes));
        }
        // The budget counts capacity (what the buffer really holds), grown by doubling up to the limit.
        let needed = buffer.len() + data.len();
        if needed > buffer.capacity() {
            let grown = needed.max(buffer.capacity() * 2).min(limits.max_bytes);
            if !held.take(grown.saturating_sub(held.bytes)) {
                return Err(BodyRefused::Busy);
            }
            buffer.reserve_exact(grown - buffer.len());
        }
        // Copied, so the frame (a slice of a connection's read buffer) is released at once.
        buffer.extend_from_slice(&data);
    }
    if Instant::now() > deadline {
        return Err(BodyRefused::TooSlow(limits.timeout.as_secs()));
    }
    Ok(Bytes::from(buffer))
}

/// One line per refused body, within the refusal log budget (`refusals.rs`).
#[cfg(test)]
mod tests {
    use std::convert::Infallible;

    use futures_util::{stream, StreamExt};
    use hyper::body::Frame;

    use super::*;

    fn limits_reader(max_bytes: usize, in_flight: usize) -> Arc<BodyReader> {
        BodyReader::new(BodyLimits {
            max_bytes,
            timeout: Duration::from_secs(60),
            min_bytes_per_second: 1024,
            max_bytes_in_flight: in_flight,
        })
    }

    fn chunks(parts: Vec<&'static [u8]>) -> Body {
        Body::new(http_body_util::StreamBody::new(stream::iter(
            parts.into_iter().map(|p| Ok::<_, Infallible>(Frame::data(Bytes::from_static(p)))),
        )))
    }

    async fn check(reader: &BodyReader, body: Body, declared: Option<usize>) -> Result<Bytes, BodyRefused> {
        let mut held = Held { reader, bytes: 0 };
        read(&mut held, body, declared, Instant::now()).await
    }

    #[tokio::test]
    async fn frames_are_joined_into_one_buffer_within_the_limits() {
        let reader = limits_reader(8, 1024);
        assert_eq!(
            check(&reader, chunks(vec![b"ab", b"", b"cd"]), None).await,
            Ok(Bytes::from_static(b"abcd"))
        );
        assert_eq!(
            check(&reader, chunks(vec![b"abcd", b"efghi"]), None).await,
            Err(BodyRefused::TooLarge(8))
        );
        assert_eq!(check(&reader, chunks(vec![b"a"]), Some(9)).await, Err(BodyRefused::TooLarge(8)));
        assert_eq!(reader.in_flight(), 0, "every request gave its bytes back");
    }

    #[tokio::test]
    async fn the_budget_of_bytes_in_flight_refuses_what_does_not_fit_and_is_given_back() {
        let reader = limits_reader(1024, 6);
        let mut first = Held { reader: &reader, bytes: 0 };
        let body = read(&mut first, chunks(vec![b"abcd"]), None, Instant::now()).await;
        assert_eq!(body, Ok(Bytes::from_static(b"abcd")));
        assert_eq!(reader.in_flight(), 4, "held while its request runs");
        assert_eq!(check(&reader, chunks(vec![b"efg"]), None).await, Err(BodyRefused::Busy));
        drop(first);
        assert_eq!(check(&reader, chunks(vec![b"efg"]), None).await, Ok(Bytes::from_static(b"efg")));
        assert_eq!(reader.in_flight(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_below_the_rate_is_cut_after_the_grace_and_one_past_the_deadline_too() {
        let reader = limits_reader(1 << 20, 1 << 20);
        // One byte, then nothing: cut at the first check after the grace.
        let stalled = Body::new(http_body_util::StreamBody::new(
            stream::iter([Ok::<_, Infallible>(Frame::data(Bytes::from_static(b"{")))])
                .chain(stream::pending()),
        ));
        let started = Instant::now();
        let refused = check(&reader, stalled, None).await;
        assert!(matches!(refused, Err(BodyRefused::BelowRate { min: 1024, .. })), "{refused:?}");
        let took = Instant::now().duration_since(started);
        assert!(took >= RATE_GRACE && took < RATE_GRACE + Duration::from_secs(2), "{took:?}");
        // Fast enough, but never ending: the deadline.
        let roomy = limits_reader(64 << 20, 64 << 20);
        let endless = Body::new(http_body_util::StreamBody::new(stream::unfold((), |()| async {
            tokio::time::sleep(Duration::from_millis(100)).await;
            Some((Ok::<_, Infallible>(Frame::data(Bytes::from_static(&[b' '; 4096]))), ()))
        })));
        assert_eq!(check(&roomy, endless, None).await, Err(BodyRefused::TooSlow(60)));
        assert_eq!(roomy.in_flight(), 0);
    }
}
