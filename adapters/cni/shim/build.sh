#!/bin/sh
# Build the workloadnet-cni forwarder: sh build.sh <output-path>
# Static by default so the binary runs on any node whatever its libc; falls back to dynamic linking
# where no static libc is installed (Debian: libc6-dev provides it).
set -eu

out=${1:?usage: build.sh <output-path>}
here=$(cd "$(dirname "$0")" && pwd)
src="$here/workloadnet-cni.c"

cc=${CC:-}
if [ -z "$cc" ]; then
  for c in cc gcc; do
    if command -v "$c" >/dev/null 2>&1; then cc=$c; break; fi
  done
fi
if [ -z "$cc" ]; then
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
