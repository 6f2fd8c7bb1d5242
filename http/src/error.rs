//! The HTTP stages' one error type: a status and a short JSON body naming the problem.

use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use driftline_schemas::api::{ErrorBody, ErrorDetail};

use crate::auth::AuthError;

/// Every failure the HTTP stages answer with: a status and a JSON body naming the problem.
#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub body: ErrorBody,
    pub retry_after: Option<u32>,
}

impl ApiError {
    pub fn new(status: StatusCode, error: impl Into<String>) -> Self {
        ApiError { status, body: ErrorBody { error: error.into(), details: Vec::new() }, retry_after: None }
    }

    pub fn bad_request(error: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, error)
    }

    pub fn with_details(mut self, details: Vec<ErrorDetail>) -> Self {
        self.body.details = details;
        self
    }

    pub fn not_found(what: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, what)
    }

    /// The store cannot answer: the client should retry.
    pub fn store_unavailable(err: impl std::fmt::Display) -> Self {
        tracing::error!(error = %err, "store query failed");
        Self::unavailable(format!("the store cannot answer right now: {err}"))
    }

    /// A dependency is down: the client should retry, nothing was accepted.
    pub fn unavailable(error: impl Into<String>) -> Self {
        ApiError { retry_after: Some(1), ..Self::new(StatusCode::SERVICE_UNAVAILABLE, error) }
    }
}

impl From<AuthError> for ApiError {
    fn from(err: AuthError) -> Self {
        let status = match err {
            AuthError::Unauthenticated => StatusCode::UNAUTHORIZED,
            AuthError::Forbidden(_) => StatusCode::FORBIDDEN,
        };
        ApiError::new(status, err.to_string())
    }
}

impl From<driftline_bus::BusError> for ApiError {
    fn from(err: driftline_bus::BusError) -> Self {
        tracing::error!(error = %err, "publish failed");
        ApiError::unavailable(format!("the bus did not accept the data; nothing was stored: {err}"))
    }
}

/// Longest error message and detail reason answered: a bad value is quoted, never echoed whole.
const MAX_MESSAGE_CHARS: usize = 300;

fn bounded(text: String) -> String {
    if text.chars().count() <= MAX_MESSAGE_CHARS {
        return text;
    }
    let mut cut: String = text.chars().take(MAX_MESSAGE_CHARS).collect();
    cut.push_str("… (cut)");
    cut
}

impl IntoResponse for ApiError {
    fn into_response(mut self) -> Response {
        self.body.error = bounded(std::mem::take(&mut self.body.error));
        for detail in &mut self.body.details {
            detail.reason = bounded(std::mem::take(&mut detail.reason));
        }
        let mut response = (self.status, Json(self.body)).into_response();
        if let Some(seconds) = self.retry_after {
            response.headers_mut().insert(header::RETRY_AFTER, seconds.into());
        }
        response
    }
}
