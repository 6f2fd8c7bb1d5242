//! The request middleware: every request counted, timed and logged under its route template.

use std::time::Instant;

use axum::extract::{MatchedPath, Request};
use axum::http::Method;
use axum::middleware::Next;
use axum::response::Response;

use crate::events::{Emit, RequestServed};

/// Middleware: counts and times every request, and logs it, under its route template (not the raw path,
/// which would make a label per server name).
pub async fn track(request: Request, next: Next) -> Response {
    let route = request.extensions().get::<MatchedPath>().map_or("unmatched", |p| p.as_str()).to_owned();
    // Labels from a closed set: a client's made-up method must not become a new series for ever.
    let method = match *request.method() {
        Method::GET => "GET",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::DELETE => "DELETE",
        Method::HEAD => "HEAD",
        Method::OPTIONS => "OPTIONS",
        Method::PATCH => "PATCH",
        _ => "other",
    };
    let started = Instant::now();
    let response = next.run(request).await;
    let status = response.status().as_u16();
    RequestServed { method, route: &route, status, seconds: started.elapsed().as_secs_f64() }.emit();
    response
}
