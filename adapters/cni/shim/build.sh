#!/bin/sh
# Build the workloadnet-cni forwarder: sh build.sh [--optional] <output-path>
# Static by default so the binary runs on any node whatever its libc; falls back to dynamic linking
# where no static libc is installed (Debian: libc6-dev provides it).
# --optional (npm run build): without a C compiler, say what is missing and succeed, so that the daemon
# builds and runs on a machine without one; only install-cni needs the forwarder, and it says so.
set -eu

optional=
if [ "${1:-}" = --optional ]; then
  optional=1
  shift
fi
out=${1:?usage: build.sh [--optional] <output-path>}
here=$(cd "$(dirname "$0")" && pwd)
src="$here/workloadnet-cni.c"

cc=${CC:-}
if [ -z "$cc" ]; then
  for c in cc gcc; do
    if command -v "$c" >/dev/null 2>&1; then cc=$c; break; fi
  done
fi
if [ -z "$cc" ]; then
  if [ -n "$optional" ]; then
    kept=
    [ -e "$out" ] && kept=" (keeping the existing $out, which may be out of date)"
    echo "build.sh: no C compiler (cc or gcc), so the CNI forwarder $out was not built$kept." >&2
    echo "build.sh: the daemon runs without it; install-cni needs it: apt-get install gcc libc6-dev, then npm run build" >&2
    exit 0
  fi
  echo "build.sh: no C compiler found (cc or gcc); install gcc and libc6-dev" >&2
  exit 1
fi

mkdir -p "$(dirname "$out")"
tmp="$out.tmp.$$"
trap 'rm -f "$tmp"' EXIT

flags="-O2 -std=c11 -Wall -Wextra"
if ! "$cc" $flags -static -s -o "$tmp" "$src" 2>/dev/null; then
  echo "build.sh: static linking failed, linking $out dynamically" >&2
  "$cc" $flags -s -o "$tmp" "$src"
fi
chmod 0755 "$tmp"
# rename(2) so that a runtime exec'ing the old binary never sees a half-written one.
mv -f "$tmp" "$out"
