//! What every HTTP stage (ingest, the query API, the operations port) shares: per-project API keys, the
//! JSON error body, request metrics, the guard of keyless local mode, readiness, and path parameters read
//! as names. Stages meet only through the bus and the store; this crate is how they answer alike.

pub mod auth;
pub mod body;
mod error;
mod events;
pub mod guard;
pub mod metrics;
mod params;
pub mod readiness;
pub mod refusals;
pub mod requests;
mod serve;

pub use auth::{Admin, ApiKey, Auth, AuthError, Caller, Ingester, Principal, Reader, Scope};
pub use body::BodyLimits;
pub use error::ApiError;
pub use params::{server_name, tool_name, Params};
pub use serve::{serve, ConnectionLimits};

/// The OpenAPI document of every stage on one port, with the bearer-key security scheme.
pub fn openapi_document(parts: Vec<utoipa::openapi::OpenApi>) -> utoipa::openapi::OpenApi {
    use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityRequirement, SecurityScheme};
    let mut document = utoipa::openapi::OpenApiBuilder::new()
        .info(
            utoipa::openapi::InfoBuilder::new()
                .title("driftline")
                .version(env!("CARGO_PKG_VERSION"))
                .description(Some(
                    "Tool-list drift and return-shape drift of MCP servers: ingest and query API.",
                ))
                .build(),
        )
        .build();
    for part in parts {
        document.merge(part);
    }
    let components = document.components.get_or_insert_with(Default::default);
    components.add_security_scheme(
        "api_key",
        SecurityScheme::Http(
            HttpBuilder::new().scheme(HttpAuthScheme::Bearer).description(Some("A project API key")).build(),
        ),
    );
    document.security = Some(vec![SecurityRequirement::new("api_key", Vec::<String>::new())]);
    document
}
