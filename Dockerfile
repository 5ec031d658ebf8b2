# The matchmaker server image: compiled in the official Rust image, run from Debian slim as an
# unprivileged user with the embedded store on the /data volume.
#
#   docker build -t matchmaker .
#   docker run --rm -p 127.0.0.1:50051:50051 -p 127.0.0.1:9090:9090 -v mm-data:/data \
#     -e MATCHMAKER_AUTH__ALLOW_INSECURE=true matchmaker
#
# The server listens on 0.0.0.0 inside the container, and with auth off it refuses a
# non-loopback address: enable auth (MATCHMAKER_AUTH__ENABLED=true and
# MATCHMAKER_AUTH__JWT_SECRET) or, for a local trial, set MATCHMAKER_AUTH__ALLOW_INSECURE=true
# as above. docs/deploying.md has the details.

# Both stages are Debian 13 (trixie), so the binary's glibc is the runtime's. The tags are exact:
# the Rust release the code requires (Cargo.toml rust-version) and a dated Debian image; bump the
# date to pick up Debian's security updates.
FROM rust:1.95.0-slim-trixie AS build
WORKDIR /src
# Only what the build reads: the manifests, the build script, the proto, the compiled-in default
# config and the sources (Cargo.toml names the benches, so their files come along).
COPY Cargo.toml Cargo.lock build.rs ./
COPY proto/matchmaker ./proto/matchmaker
COPY config ./config
COPY benches ./benches
COPY src ./src
# The commit, for matchmaker_build_info (the build context has no .git):
# docker build --build-arg MATCHMAKER_GIT_SHA="$(git rev-parse --short=12 HEAD)" .
ARG MATCHMAKER_GIT_SHA=unknown
ENV MATCHMAKER_GIT_SHA=${MATCHMAKER_GIT_SHA}
# --locked: exactly the versions in Cargo.lock. The release profile keeps line tables for
# profiling (debug = 1); the image has no use for them, so they are left out here. The caches
# keep downloaded crates and compiled dependencies between builds; the target directory is a
# cache, so the binary is copied out of it in the same step.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    CARGO_PROFILE_RELEASE_DEBUG=0 cargo build --release --locked --bin matchmaker \
    && install -D -m 0755 target/release/matchmaker /out/matchmaker

FROM debian:trixie-20260406-slim
LABEL org.opencontainers.image.title="matchmaker" \
      org.opencontainers.image.description="gRPC matchmaking server" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=build /out/matchmaker /usr/local/bin/matchmaker
# Trust roots for fetching an identity provider's key set over HTTPS (auth.jwks_url), taken
# from the build image, which has them for cargo.
COPY --from=build /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
# The server runs as uid/gid 10001 (numeric, so Kubernetes can check runAsNonRoot without a
# passwd entry) and owns only the data directory.
RUN mkdir /data && chown 10001:10001 /data
USER 10001:10001
VOLUME /data
# gRPC (with grpc.health.v1 and reflection), Prometheus metrics at /metrics.
EXPOSE 50051 9090
# Flags win over every other config source; anything appended to `docker run IMAGE` (for
# example `--config /etc/matchmaker/matchmaker.toml` or `--log-json`) is added to them.
ENTRYPOINT ["/usr/local/bin/matchmaker", "serve", "--addr", "0.0.0.0:50051", "--metrics-addr", "0.0.0.0:9090", "--data-dir", "/data"]
