#!/bin/sh
# npm's pretest step: make sure the Debian packages the test suites need (packaging/test-packages.txt,
# which .ci/run reads too) are installed. Does nothing when they all are. Otherwise installs the missing
# ones when it can (root, apt-get); when it cannot, stops at once naming each missing package and the
# command that installs it, rather than letting suites fail one by one minutes later.
# WORKLOADNET_SKIP_PACKAGE_CHECK=1 skips the check (e.g. a non-Debian machine with equivalents).
set -eu

list="$(cd "$(dirname "$0")" && pwd)/test-packages.txt"
[ "${WORKLOADNET_SKIP_PACKAGE_CHECK:-}" = 1 ] && exit 0

wanted=$(sed -e 's/#.*//' "$list" | tr -s ' \t' '\n\n' | sed -e '/^$/d')

if ! command -v dpkg-query >/dev/null 2>&1; then
  echo "pretest: this is not a Debian system (no dpkg-query), so the packages the tests need cannot be checked:" >&2
  for p in $wanted; do echo "  $p" >&2; done
  echo "pretest: install their equivalents, then run: WORKLOADNET_SKIP_PACKAGE_CHECK=1 npm test" >&2
  exit 1
fi

missing() {
  # dpkg-query exits 1 when a package is unknown to it; that case is simply "missing".
  installed=$(dpkg-query -W -f='${Package} ${db:Status-Status}\n' $wanted 2>/dev/null | sed -n 's/ installed$//p' || true)
  for p in $wanted; do
    printf '%s\n' "$installed" | grep -qx "$p" || printf '%s ' "$p"
  done
}

absent=$(missing)
[ -z "$absent" ] && exit 0

if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "pretest: installing the Debian packages the tests need: $absent" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  # shellcheck disable=SC2086 # one word per package
  apt-get install -y -qq --no-install-recommends $absent >/dev/null
  still=$(missing)
  if [ -n "$still" ]; then
    echo "pretest: still missing after apt-get install: $still" >&2
    exit 1
  fi
  exit 0
fi

echo "pretest: the tests need these Debian packages, which are not installed:" >&2
for p in $absent; do echo "  $p" >&2; done
if [ "$(id -u)" = 0 ]; then
  why="there is no apt-get here"
else
  why="npm test runs as an ordinary user"
fi
echo "pretest: cannot install them ($why). Install them with:" >&2
echo "  apt-get install -y --no-install-recommends ${absent% }" >&2
echo "(or run npm test as root on Debian, which installs them)" >&2
exit 1
