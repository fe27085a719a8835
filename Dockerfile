# changegate: multi-stage build, small non-root runtime image.
# Build:  docker build -t changegate .
# Run:    docker run -p 8080:8080 -v changegate-data:/var/lib/changegate \
#           -v "$PWD/config:/etc/changegate:ro" changegate
# The simulators (for deploy/compose.yml only, never for production):
#         docker build --target sim -t changegate-sim .
FROM rust:1-bookworm AS build
WORKDIR /src
COPY . .
# Only the service: the simulators (workspace member `sim`) stay out of the image.
RUN cargo build --release --locked -p changegate

# The simulators' binary, built on top of the service's build (its
# dependencies are compiled once). Only `--target sim` builds this stage
# (BuildKit, Docker's default builder, skips stages a target does not need).
FROM build AS sim-build
RUN cargo build --release --locked -p changegate-sim --bin changegate-sim

# What both runtime images share: curl for the health checks, and the
# unprivileged user (uid and gid 10001) they run as.
FROM debian:bookworm-slim AS runtime
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates curl \
    && rm -rf /var/lib/apt/lists/* \
    && groupadd --system --gid 10001 changegate \
    && useradd --system --uid 10001 --gid 10001 --home-dir /var/lib/changegate changegate \
    && mkdir -p /var/lib/changegate /etc/changegate \
    && chown changegate:changegate /var/lib/changegate

# The simulators of GitLab, the approval system and the deploy pipeline, as
# deploy/compose.yml runs them. They listen on 127.0.0.1 only.
FROM runtime AS sim
COPY --from=sim-build /src/target/release/changegate-sim /usr/local/bin/changegate-sim
USER 10001:10001
ENTRYPOINT ["changegate-sim"]

# The service: the default target, so it comes last.
FROM runtime AS changegate
COPY --from=build /src/target/release/changegate /usr/local/bin/changegate
COPY config/default.toml /etc/changegate/default.toml
# Numeric, so that Kubernetes' runAsNonRoot can verify it (a user name it cannot).
USER 10001:10001
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
