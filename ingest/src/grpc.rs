//! OTLP/gRPC trace ingest (`opentelemetry.proto.collector.trace.v1.TraceService/Export`, port 4317 by
//! default): what the OpenTelemetry SDKs' default exporters and a Collector's `otlp` exporter speak. The
//! checks and limits of `POST /v1/traces`: the API key from the `authorization` metadata (`Bearer KEY`), the
//! message size, gzip, the same mapping and validation, partial success naming what was refused, and the
//! answer only once the bus has the tool calls.

use std::net::SocketAddr;

use axum::http::StatusCode;
use driftline_http::{ApiError, Scope};
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use tonic::codec::CompressionEncoding;
use tonic::{Request, Response, Status};

use crate::IngestState;

/// The TraceService over an ingest's state.
pub struct TraceGrpc {
    state: IngestState,
}

#[tonic::async_trait]
impl TraceService for TraceGrpc {
    async fn export(
        &self,
        request: Request<ExportTraceServiceRequest>,
    ) -> Result<Response<ExportTraceServiceResponse>, Status> {
        let headers = request.metadata().clone().into_headers();
        let who = self.state.auth.authorize(&headers, Scope::Ingest).map_err(|err| status(err.into()))?;
        let answer =
            crate::export_traces(&self.state, &who.project, request.get_ref()).await.map_err(status)?;
        Ok(Response::new(answer))
    }
}

/// The HTTP path's refusal as a gRPC status, with its message.
fn status(err: ApiError) -> Status {
    let message = err.body.error;
    match err.status {
        StatusCode::UNAUTHORIZED => Status::unauthenticated(message),
        StatusCode::FORBIDDEN => Status::permission_denied(message),
        StatusCode::PAYLOAD_TOO_LARGE => Status::resource_exhausted(message),
        StatusCode::SERVICE_UNAVAILABLE | StatusCode::TOO_MANY_REQUESTS => Status::unavailable(message),
        code if code.is_client_error() => Status::invalid_argument(message),
        _ => Status::internal(message),
    }
}

/// The service with the HTTP path's size limit (on the decompressed message) and gzip accepted.
pub fn service(state: IngestState) -> TraceServiceServer<TraceGrpc> {
    let limit = state.limits.max_body_bytes;
    TraceServiceServer::new(TraceGrpc { state })
        .accept_compressed(CompressionEncoding::Gzip)
        .send_compressed(CompressionEncoding::Gzip)
        .max_decoding_message_size(limit)
}

/// Serves OTLP/gRPC on `listener` until `shutdown` resolves.
pub async fn serve(
    state: IngestState,
    listener: tokio::net::TcpListener,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), tonic::transport::Error> {
    let address: Option<SocketAddr> = listener.local_addr().ok();
    tracing::info!(address = ?address, "otlp grpc listening");
    // As the HTTP listener guards against slow and greedy clients: a request (its message read, checked and
    // put on the bus) has 30 s; a connection carries at most 16 requests at once and 64 streams; a peer that
    // stops answering keepalive pings is dropped.
    tonic::transport::Server::builder()
        .timeout(std::time::Duration::from_secs(30))
        .concurrency_limit_per_connection(16)
        .max_concurrent_streams(Some(64))
        .http2_keepalive_interval(Some(std::time::Duration::from_secs(30)))
        .http2_keepalive_timeout(Some(std::time::Duration::from_secs(10)))
        .add_service(service(state))
        .serve_with_incoming_shutdown(tokio_stream::wrappers::TcpListenerStream::new(listener), shutdown)
        .await
}
