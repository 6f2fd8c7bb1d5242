# The one driftline binary (every stage: serve, ingest, detect, api, migrate, topics, CLI).
#   docker build -t driftline .
# Build stage: Rust on Debian bookworm with what librdkafka and OpenSSL need to compile.
FROM rust:1.95-bookworm AS build
RUN apt-get update \
 && apt-get install -y --no-install-recommends cmake libssl-dev pkg-config \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN cargo build --release --locked --bin driftline \
 && strip target/release/driftline

# Runtime stage: Debian slim with CA certificates and OpenSSL; runs as an unprivileged user.
FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates libssl3 \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --system --gid 10001 driftline \
 && useradd --system --uid 10001 --gid driftline --home-dir /nonexistent --shell /usr/sbin/nologin driftline
COPY --from=build /src/target/release/driftline /usr/local/bin/driftline
USER 10001:10001
EXPOSE 8000
ENTRYPOINT ["/usr/local/bin/driftline"]
CMD ["serve", "--bind", "0.0.0.0:8000", "--data-dir", "/tmp/driftline"]
