#!/usr/bin/env bash
# Builds self-contained `muster` and `muster-discovery` binaries on this host and the FROM-scratch
# image around them. Nothing is pulled from a registry. Safe to run again: cargo and docker both
# rebuild only what changed.
#
#   compose/build.sh                      # release build, image muster:dev
#   MUSTER_PROFILE=dev compose/build.sh   # faster debug build (bigger, slower binaries)
#   MUSTER_IMAGE=muster:x compose/build.sh
#
# The binaries are linked statically against glibc (-C target-feature=+crt-static). glibc >= 2.34
# has its `files` and `dns` name-service code inside libc itself, so getaddrinfo() resolves compose
# service names in an image without libnss_*.so; the smoke test at the end checks that it runs.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(dirname "$here")
profile=${MUSTER_PROFILE:-release}
image=${MUSTER_IMAGE:-muster:dev}

say() { printf '\033[1m==> %s\033[0m\n' "$*" >&2; }
die() { printf '\033[1;31mbuild.sh: error: %s\033[0m\n' "$*" >&2; exit 1; }
trap 'die "failed at line $LINENO: $BASH_COMMAND"' ERR

command -v cargo >/dev/null || die "cargo is not on PATH"
command -v docker >/dev/null || die "docker is not on PATH"
docker info >/dev/null 2>&1 || die "the Docker daemon is not reachable (docker info failed)"

triple=$(rustc -vV | sed -n 's/^host: //p')
case "$triple" in
  *-linux-gnu) ;;
  *) die "host target $triple: this script links statically against glibc and needs a *-linux-gnu host" ;;
esac
case "$profile" in
  dev) outdir=debug ;;
  *) outdir=$profile ;;
esac

say "cargo build --profile $profile --target $triple (static glibc) -p muster-agent -p muster-discovery"
# An explicit --target keeps these artifacts in target/$triple/ and keeps +crt-static away from
# build scripts and proc macros, so host builds in target/{debug,release} are not invalidated.
(cd "$root" && RUSTFLAGS="${RUSTFLAGS:-} -C target-feature=+crt-static" \
  cargo build --profile "$profile" --target "$triple" -p muster-agent -p muster-discovery)

stage="$here/bin"
mkdir -p "$stage/data"
for bin in muster muster-discovery; do
  src="$root/target/$triple/$outdir/$bin"
  [ -x "$src" ] || die "$src was not built"
  if readelf -lW "$src" | grep -q 'Requesting program interpreter'; then
    die "$src is dynamically linked (has a PT_INTERP); it would not start in a FROM-scratch image"
  fi
  if readelf -dW "$src" 2>/dev/null | grep -q '(NEEDED)'; then
    die "$src needs shared libraries: $(readelf -dW "$src" | grep '(NEEDED)' | tr -s ' ')"
  fi
  # Copy then rename, so a concurrent docker build never sees a half-written file.
  cp "$src" "$stage/.$bin.tmp.$$"
  mv -f "$stage/.$bin.tmp.$$" "$stage/$bin"
  say "staged $bin ($(du -h "$stage/$bin" | cut -f1), statically linked)"
done

# The agent's discovery client loads the system trust store when it starts, even for http://
# URLs, and refuses to start without one; https:// discovery needs it anyway. Use the host's.
ca_bundle=${MUSTER_CA_BUNDLE:-}
if [ -z "$ca_bundle" ]; then
  for f in /etc/ssl/certs/ca-certificates.crt /etc/pki/tls/certs/ca-bundle.crt /etc/ssl/ca-bundle.pem /etc/ssl/cert.pem; do
    if [ -s "$f" ]; then ca_bundle=$f; break; fi
  done
fi
[ -n "$ca_bundle" ] && [ -s "$ca_bundle" ] ||
  die "no CA certificate bundle found on this host (apt-get install ca-certificates, or set MUSTER_CA_BUNDLE=FILE)"
cp "$ca_bundle" "$stage/.ca-certificates.crt.tmp.$$"
mv -f "$stage/.ca-certificates.crt.tmp.$$" "$stage/ca-certificates.crt"
say "staged CA certificates from $ca_bundle"

say "docker build -t $image $here"
docker build -t "$image" "$here"

say "smoke test: both binaries start inside the image"
docker run --rm --network none "$image" --version
docker run --rm --network none --entrypoint /muster-discovery "$image" --version

say "done: image $image (FROM scratch). Next: see compose/README.md"
