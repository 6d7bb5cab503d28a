#!/usr/bin/env bash
# Builds the images of compose/ha: muster (compose/build.sh), and etcd and haproxy FROM scratch
# from this host's Debian packages (binary + the shared libraries `ldd` lists, paths kept).
# Nothing is pulled from a registry.
#
#   compose/ha/build.sh                 # images muster:dev, muster-etcd:dev, muster-haproxy:dev
#   MUSTER_PROFILE=dev compose/ha/build.sh
#   MUSTER_IMAGE=… MUSTER_ETCD_IMAGE=… MUSTER_HAPROXY_IMAGE=… compose/ha/build.sh
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
etcd_image=${MUSTER_ETCD_IMAGE:-muster-etcd:dev}
haproxy_image=${MUSTER_HAPROXY_IMAGE:-muster-haproxy:dev}

say() { printf '\033[1m==> %s\033[0m\n' "$*" >&2; }
die() { printf '\033[1;31mha/build.sh: error: %s\033[0m\n' "$*" >&2; exit 1; }

etcd_bin=$(command -v etcd || true)
[ -n "$etcd_bin" ] || die "etcd is not installed: apt-get install etcd-server"
haproxy_bin=$(command -v haproxy || true)
[ -n "$haproxy_bin" ] || die "haproxy is not installed: apt-get install haproxy"

bash "$here/../build.sh"

# Copies BINARY to DEST (as /usr/…/name) with every shared library it needs, paths kept.
stage() {
  local bin=$1 dest=$2 target=$3
  rm -rf "$dest"
  mkdir -p "$dest$(dirname "$target")"
  cp -L "$bin" "$dest$target"
  # `ldd` prints "name => /path (addr)" and "/lib64/ld-linux… (addr)"; take every absolute path.
  ldd "$bin" | grep -o '/[^ ]*' | sort -u | while read -r lib; do
    mkdir -p "$dest$(dirname "$lib")"
    cp -L "$lib" "$dest$lib"
  done
  # A writable /tmp and an empty /data for whoever needs them.
  mkdir -p "$dest/tmp" "$dest/data"
  chmod 1777 "$dest/tmp"
}

say "staging $etcd_bin and its libraries"
stage "$etcd_bin" "$here/etcd-root" /usr/bin/etcd
say "staging $haproxy_bin and its libraries"
stage "$haproxy_bin" "$here/haproxy-root" /usr/sbin/haproxy

say "docker build -t $etcd_image"
docker build -q -t "$etcd_image" -f "$here/Dockerfile.etcd" "$here" >/dev/null
say "docker build -t $haproxy_image"
docker build -q -t "$haproxy_image" -f "$here/Dockerfile.haproxy" "$here" >/dev/null

say "smoke test: etcd and haproxy start inside their images"
# (Whole outputs read: a closed pipe would fail the run under pipefail.)
docker run --rm --network none "$etcd_image" --version | sed -n 1p
docker run --rm --network none --entrypoint /usr/sbin/haproxy "$haproxy_image" -v | sed -n 1p
say "done. Next: see compose/README.md (Several discovery replicas on etcd)"
