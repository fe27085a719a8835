# changegate: multi-stage build, small non-root runtime image.
# Build:  docker build -t changegate .
# Run:    docker run -p 8080:8080 -v changegate-data:/var/lib/changegate \
#           -v "$PWD/config:/etc/changegate:ro" changegate
FROM rust:1-bookworm AS build
WORKDIR /src
COPY . .
# Only the service: the simulators (workspace member `sim`) stay out of the image.
RUN cargo build --release --locked -p changegate

FROM debian:bookworm-slim
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates curl \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --home-dir /var/lib/changegate changegate \
    && mkdir -p /var/lib/changegate /etc/changegate \
    && chown changegate /var/lib/changegate
COPY --from=build /src/target/release/changegate /usr/local/bin/changegate
COPY config/default.toml /etc/changegate/default.toml
USER changegate
WORKDIR /var/lib/changegate
# Mount your configuration over /etc/changegate; the file is watched for changes.
VOLUME ["/var/lib/changegate", "/etc/changegate"]
ENV CHANGEGATE_CONFIG=/etc/changegate/default.toml \
    CHANGEGATE_LISTEN=0.0.0.0:8080 \
    CHANGEGATE_DATABASE_URL=sqlite:///var/lib/changegate/changegate.db
EXPOSE 8080
HEALTHCHECK --interval=10s --timeout=3s --start-period=5s \
    CMD curl -fsS http://127.0.0.1:8080/healthz || exit 1
ENTRYPOINT ["changegate"]
CMD ["serve"]
