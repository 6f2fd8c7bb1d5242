//! Local mode that a web page cannot drive. Without API keys every request acts for the `default` project
//! with every scope, so the loopback-only bind is the only fence, and a browser on the same machine can
//! climb it: a page on another origin can submit a form (or a `no-cors` fetch) to 127.0.0.1, and a DNS
//! name rebound to 127.0.0.1 makes the browser treat driftline as the page's own origin. In that mode:
//!
//! - `Host` must name this machine (`localhost`, `*.localhost`, a loopback address) or one of
//!   `server.allowed_hosts`: a rebound name gets 421;
//! - a state-changing request (POST, PUT, PATCH, DELETE) carrying an `Origin` other than the server's own,
//!   or `Sec-Fetch-Site: cross-site`, gets 403;
//! - a state-changing request must say `Content-Type: application/json` (OTLP also takes
//!   `application/x-protobuf`): the types a cross-site form or simple request can send get 415.
//!
//! With API keys a forged request lacks the key, so only `server.allowed_hosts`, when set, applies.
//! `/healthz`, `/readyz` and `/metrics` are never Host-checked: they hold no project data, and kubelet
//! probes and Prometheus reach them by pod address.

use crate::events::{Emit, GuardRefused};
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

/// What the guard enforces.
#[derive(Debug, Clone, Default)]
pub struct LocalGuard {
    /// Local mode (no API keys): all three checks.
    pub open: bool,
    /// Extra names (lowercase, without port) `Host` may carry; when set, checked in every mode.
    pub allowed_hosts: Vec<String>,
}

fn refuse(status: StatusCode, message: String) -> Response {
    GuardRefused { status, reason: &message }.emit();
    (status, axum::Json(serde_json::json!({"error": message}))).into_response()
}

/// The host part of a `Host` value or an origin's authority, lowercase, without the port.
fn host_of(authority: &str) -> String {
    let authority = authority.trim().to_ascii_lowercase();
    if let Some(rest) = authority.strip_prefix('[') {
        // [::1]:8000
        return rest.split(']').next().map(|h| format!("[{h}]")).unwrap_or_default();
    }
    authority.split(':').next().unwrap_or_default().to_owned()
}

fn is_local(host: &str) -> bool {
    if host == "localhost" || host.ends_with(".localhost") {
        return true;
    }
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    bare.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// At most 100 characters of a header value in an error message.
fn quote(value: &str) -> String {
    let short: String = value.chars().take(100).collect();
    format!("{short:?}")
}

impl LocalGuard {
    fn host_allowed(&self, host: &str) -> bool {
        (self.open && is_local(host)) || self.allowed_hosts.iter().any(|allowed| allowed == host)
    }

    /// `None` when the request may go on.
    pub fn check(&self, method: &Method, path: &str, headers: &HeaderMap) -> Option<Response> {
        if !self.open && self.allowed_hosts.is_empty() {
            return None;
        }
        if matches!(path, "/healthz" | "/readyz" | "/metrics") && *method == Method::GET {
            return None;
        }
        let host_header = headers.get(header::HOST).and_then(|v| v.to_str().ok());
        if let Some(value) = host_header {
            let host = host_of(value);
            if !self.host_allowed(&host) {
                return Some(refuse(
                    StatusCode::MISDIRECTED_REQUEST,
                    format!(
                        "host {} is not served here: add it to server.allowed_hosts, or use 127.0.0.1",
                        quote(value)
                    ),
                ));
            }
        }
        if !self.open || matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS) {
            return None;
        }
        let site = headers.get("sec-fetch-site").and_then(|v| v.to_str().ok()).unwrap_or("");
        if site.eq_ignore_ascii_case("cross-site") {
            return Some(refuse(
                StatusCode::FORBIDDEN,
                "cross-site request refused (no API keys: local mode)".into(),
            ));
        }
        if let Some(origin) = headers.get(header::ORIGIN).and_then(|v| v.to_str().ok()) {
            // The page's own origin is `http://<the Host it asked for>`; anything else is another site's.
            let same = host_header.is_some_and(|host| {
                origin
                    .strip_prefix("http://")
                    .or_else(|| origin.strip_prefix("https://"))
                    .is_some_and(|authority| authority.eq_ignore_ascii_case(host.trim()))
            });
            if !same {
                return Some(refuse(
                    StatusCode::FORBIDDEN,
                    format!("cross-origin request refused: Origin {} is not this server", quote(origin)),
                ));
            }
        }
        let content_type = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("");
        let media = content_type.split(';').next().unwrap_or_default().trim().to_ascii_lowercase();
        let protobuf = path == "/v1/traces" && media == "application/x-protobuf";
        if media != "application/json" && !protobuf {
            return Some(refuse(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                format!(
                    "send Content-Type: application/json (got {}); without API keys driftline refuses the \
                     types a cross-site form can send",
                    quote(content_type)
                ),
            ));
        }
        None
    }
}

/// The middleware: `axum::middleware::from_fn_with_state(Arc<LocalGuard>, guard)`.
pub async fn guard(State(guard): State<Arc<LocalGuard>>, request: Request, next: Next) -> Response {
    if let Some(refused) = guard.check(request.method(), request.uri().path(), request.headers()) {
        return refused;
    }
    next.run(request).await
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;

    use super::*;

    fn check(guard: &LocalGuard, method: Method, path: &str, headers: &[(&str, &str)]) -> u16 {
        let mut map = HeaderMap::new();
        for (name, value) in headers {
            map.insert(
                axum::http::HeaderName::from_bytes(name.as_bytes()).expect("name"),
                HeaderValue::from_str(value).expect("value"),
            );
        }
        guard.check(&method, path, &map).map_or(200, |r| r.status().as_u16())
    }

    const JSON: (&str, &str) = ("content-type", "application/json");

    #[test]
    fn local_mode_serves_this_machine_only() {
        let open = LocalGuard { open: true, allowed_hosts: vec!["driftline.internal".into()] };
        for host in [
            "127.0.0.1:8000",
            "localhost:8000",
            "LOCALHOST",
            "app.localhost:1",
            "[::1]:8000",
            "127.9.9.9",
            "driftline.internal:80",
        ] {
            assert_eq!(check(&open, Method::GET, "/api/tools", &[("host", host)]), 200, "{host}");
        }
        for host in
            ["evil.example", "evil.example:8000", "127.0.0.1.evil.example", "10.0.0.1:8000", "[::2]:8000"]
        {
            assert_eq!(check(&open, Method::GET, "/api/tools", &[("host", host)]), 421, "{host}");
        }
        assert_eq!(check(&open, Method::GET, "/api/tools", &[]), 200, "no Host header (HTTP/1.0)");
    }

    #[test]
    fn local_mode_refuses_what_another_site_can_send() {
        let open = LocalGuard { open: true, allowed_hosts: Vec::new() };
        let host = ("host", "127.0.0.1:8000");
        let post = |headers: &[(&str, &str)]| check(&open, Method::POST, "/v1/spans", headers);
        assert_eq!(post(&[host, JSON]), 200, "curl, SDKs: no Origin");
        assert_eq!(post(&[host, JSON, ("origin", "http://127.0.0.1:8000")]), 200, "the dashboard");
        assert_eq!(post(&[host, JSON, ("origin", "http://evil.example")]), 403);
        assert_eq!(
            post(&[host, JSON, ("origin", "http://127.0.0.1:9999")]),
            403,
            "another port is another origin"
        );
        assert_eq!(post(&[host, JSON, ("origin", "null")]), 403, "sandboxed frames");
        assert_eq!(post(&[host, JSON, ("sec-fetch-site", "cross-site")]), 403);
        assert_eq!(post(&[host, ("content-type", "text/plain")]), 415);
        assert_eq!(post(&[host, ("content-type", "application/x-www-form-urlencoded")]), 415);
        assert_eq!(post(&[host, ("content-type", "multipart/form-data; boundary=x")]), 415);
        assert_eq!(post(&[host]), 415, "a form-less POST still names its type");
        assert_eq!(post(&[host, ("content-type", "Application/JSON; charset=utf-8")]), 200);
        let otlp = [host, ("content-type", "application/x-protobuf")];
        assert_eq!(check(&open, Method::POST, "/v1/traces", &otlp), 200);
        assert_eq!(check(&open, Method::POST, "/v1/spans", &otlp), 415);
        assert_eq!(
            check(&open, Method::PUT, "/api/servers/s/tools", &[host, ("content-type", "text/plain")]),
            415
        );
        assert_eq!(
            check(&open, Method::GET, "/api/tools", &[host, ("origin", "http://evil.example")]),
            200,
            "reads are same-origin-policed by the browser"
        );
    }

    #[test]
    fn with_keys_only_configured_hosts_are_checked() {
        let keyed = LocalGuard { open: false, allowed_hosts: Vec::new() };
        assert_eq!(
            check(
                &keyed,
                Method::POST,
                "/v1/spans",
                &[("host", "evil.example"), ("content-type", "text/plain")]
            ),
            200
        );
        let named = LocalGuard { open: false, allowed_hosts: vec!["driftline.example.com".into()] };
        assert_eq!(check(&named, Method::GET, "/api/tools", &[("host", "driftline.example.com:443")]), 200);
        assert_eq!(check(&named, Method::GET, "/api/tools", &[("host", "127.0.0.1:8000")]), 421);
        // Kubelet probes and Prometheus scrapes come by pod address.
        for path in ["/healthz", "/readyz", "/metrics"] {
            assert_eq!(check(&named, Method::GET, path, &[("host", "10.1.2.3:8000")]), 200, "{path}");
        }
        assert_eq!(check(&named, Method::POST, "/metrics", &[("host", "10.1.2.3:8000")]), 421);
        assert_eq!(
            check(
                &named,
                Method::POST,
                "/v1/spans",
                &[("host", "driftline.example.com"), ("origin", "http://x")]
            ),
            200
        );
    }
}
