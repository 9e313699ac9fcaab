# synod in a container: a multi-stage build (Rust toolchain only in the build stage, no protoc
# or anything else needed), a small Debian runtime image with the one binary.
#
#   docker build -t synod .
#   docker compose -f deploy/docker-compose.yml up     # a 3-replica cluster, see docs/deploy.md
#
# The image runs `synod server --config /etc/synod/node.toml`: mount a config there (and a
# volume on /var/lib/synod for the write-ahead log).

# The newest stable Rust 1.x (the workspace needs >= 1.85; some dependencies may need newer).
FROM rust:1-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked -p synod \
 && cp target/release/synod /usr/local/bin/synod \
 && strip /usr/local/bin/synod

FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates curl \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --home-dir /var/lib/synod --create-home --shell /usr/sbin/nologin synod
COPY --from=build /usr/local/bin/synod /usr/local/bin/synod
USER synod
WORKDIR /var/lib/synod
VOLUME ["/var/lib/synod"]
# peer, native client, admin HTTP, Redis (the ports of deploy/cluster.toml)
EXPOSE 7100 7200 7300 6379
ENV SYNOD_CONFIG=/etc/synod/node.toml
# No HEALTHCHECK here: the admin port listens on the replica's own address from its config,
# which the image does not know; deploy/docker-compose.yml sets one per replica.
ENTRYPOINT ["synod", "server"]
