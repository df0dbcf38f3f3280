#!/usr/bin/env bash
# Build the image FROM scratch out of this machine's release build (the Dockerfile's `prebuilt`
# target: nothing is pulled), then prove its root file system: `lakestream --version`, and with a
# connector file, `run --once` against KAFKA_BOOTSTRAP / SCHEMA_REGISTRY_URL, chrooted into it
# (containers cannot run here: crun cannot set RLIMIT_NOFILE). Needs podman (apt) and root.
# Usage: scripts/image.sh [TAG] [CONNECTOR.properties]
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/cache/lakestream-target}"
TAG="${1:-ghcr.io/lakestream/lakestream:$(sed -n 's/^appVersion: "\(.*\)"/\1/p' helm/lakestream/Chart.yaml)}"
PROPS="${2:-}"
command -v podman >/dev/null || { apt-get install -y -q podman >/dev/null; }
cargo build --release --locked --bins
ctx="$(mktemp -d)"
trap 'rm -rf "$ctx"' EXIT
root="$ctx/rootfs"
mkdir -p "$root/usr/local/bin" "$root/tmp" "$root/etc/ssl/certs"
cp "$CARGO_TARGET_DIR/release/lakestream" "$CARGO_TARGET_DIR/release/lakestream-registry" "$root/usr/local/bin/"
# the shared libraries the binaries load, at their paths (glibc, OpenSSL, zlib, libgcc)
for lib in $(for b in lakestream lakestream-registry; do ldd "$root/usr/local/bin/$b"; done | awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}' | sort -u); do
  mkdir -p "$root$(dirname "$lib")"
  cp -L "$lib" "$root$lib"
done
cp /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/"
printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' > "$root/etc/passwd"
printf 'root:x:0:\nnonroot:x:65532:\n' > "$root/etc/group"
chmod 1777 "$root/tmp"
podman build -q --target prebuilt -t "$TAG" -f Dockerfile "$ctx" >/dev/null
echo "built $TAG"
podman image inspect "$TAG" --format '{{.Config.User}} {{.Config.Entrypoint}} {{index .Labels "org.opencontainers.image.licenses"}}'
mnt="$(podman image mount "$TAG")"
trap 'podman image unmount "$TAG" >/dev/null 2>&1 || true; rm -rf "$ctx"' EXIT
chroot --userspec=65532:65532 "$mnt" /usr/local/bin/lakestream --version
if [ -n "$PROPS" ]; then
  # a writable copy of the image's root file system (image layers mount read-only), with the
  # connector file and its (local) table at the same paths
  copy="$ctx/run"
  mkdir -p "$copy" && cp -a "$mnt/." "$copy/"
  table="$(sed -n 's/^table\.path=//p' "$PROPS" | head -1)"
  mkdir -p "$copy$(dirname "$table")" && cp -a "$table" "$copy$table"
  chown -R 65532:65532 "$copy$table"
  cp "$PROPS" "$copy/tmp/connector.properties"
  chroot --userspec=65532:65532 "$copy" /usr/local/bin/lakestream run --once /tmp/connector.properties
fi
