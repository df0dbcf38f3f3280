# syntax=docker/dockerfile:1
# lakestream's image, as the Helm chart runs it (ghcr.io/lakestream/lakestream:<appVersion>):
# the two binaries only, non-root (65532), ENTRYPOINT lakestream (the chart passes `run ...`).
#
#   docker build -t ghcr.io/lakestream/lakestream:0.1.0 .            # from source (default)
#   scripts/image.sh                                                   # from this machine's build,
#                                                                      # FROM scratch (no pull; CI)
ARG RUST_IMAGE=docker.io/library/rust:1.95-slim-bookworm
ARG RUNTIME_IMAGE=gcr.io/distroless/cc-debian12:nonroot

# --- build: release binaries (librdkafka is built by rdkafka-sys: cmake, a C++ compiler)
FROM ${RUST_IMAGE} AS build
RUN apt-get update && apt-get install -y --no-install-recommends cmake g++ make pkg-config libssl-dev zlib1g-dev \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN cargo build --release --locked --bins \
    && mkdir -p /out/lib && cp target/release/lakestream target/release/lakestream-registry /out/ \
    && cp -L "$(ldconfig -p | awk '/libz.so.1 /{print $NF; exit}')" /out/lib/

# --- prebuilt: the binaries and their shared libraries from a root file system prepared by
# scripts/image.sh (FROM scratch: nothing to pull)
FROM scratch AS prebuilt
COPY rootfs/ /
USER 65532:65532
ENV TMPDIR=/tmp
ENTRYPOINT ["/usr/local/bin/lakestream"]
LABEL org.opencontainers.image.title="lakestream" \
      org.opencontainers.image.description="Exactly-once changelog source connector: Apache Hudi / Iceberg tables to Kafka as Debezium-style Avro" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.source="https://github.com/lakestream/lakestream" \
      org.opencontainers.image.version="0.1.0"

# --- release (default): distroless glibc + OpenSSL + CA certificates, nonroot; zlib copied in
FROM ${RUNTIME_IMAGE} AS release
COPY --from=build /out/lakestream /out/lakestream-registry /usr/local/bin/
COPY --from=build /out/lib/ /usr/lib/
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/lakestream"]
LABEL org.opencontainers.image.title="lakestream" \
      org.opencontainers.image.description="Exactly-once changelog source connector: Apache Hudi / Iceberg tables to Kafka as Debezium-style Avro" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.source="https://github.com/lakestream/lakestream" \
      org.opencontainers.image.version="0.1.0"
