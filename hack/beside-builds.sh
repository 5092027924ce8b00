#!/usr/bin/env bash
# Runs a command (make test's pytest) while hack/build-binaries.sh builds, beside it and at
# the lowest CPU priority, every Go-built tool not built yet. `make images` has built what
# the local cluster runs; the tools only later tests use (kwok, Toxiproxy, kind, the
# registry, Kueue, the gang schedulers: 25 of a cold run's 48 minutes of Go builds on a
# slow day) build while the first tests run on the cores they leave idle. A program that
# finds a binary missing while its tool is claimed by the build waits for it
# (tfjob_localcluster.binaries), and a test that needs one waits before its time limit
# starts (tests/support/tool_builds.py). With every tool built, the build is done at once.
#
#   hack/beside-builds.sh COMMAND [ARG...]
#
# Exits with the command's status, or with the build's if the command passed. Stopped, it
# stops the build (its own process group) too.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cache=${TFJOB_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tfjob-operator}
mkdir -p "$cache/logs" "$cache/tmp"
log_file=$cache/logs/beside-builds.log
claimed=$(mktemp -u "$cache/tmp/claimed.XXXXXX")

setsid nice -n 19 "$here/build-binaries.sh" --claimed "$claimed" all >"$log_file" 2>&1 &
builder=$!
stop_builder() {
  [ -z "$builder" ] || kill -- "-$builder" 2>/dev/null || true
  rm -f "$claimed"
}
trap stop_builder EXIT
trap 'exit 130' INT TERM

# The command starts once every tool to build is claimed, so that it never finds a tool
# neither built nor claimed.
until [ -e "$claimed" ]; do
  if ! kill -0 "$builder" 2>/dev/null; then
    wait "$builder" || true
    builder=
    echo "beside-builds: the Go-built tools' build stopped before it began building; its log, $log_file:" >&2
    tail -n 40 "$log_file" >&2
    exit 1
  fi
  sleep 0.2
done
echo "==> the Go-built tools not built yet are built beside the tests (log: $log_file)"

status=0
"$@" || status=$?
build_status=0
if kill -0 "$builder" 2>/dev/null; then echo "==> waiting for the Go-built tools' build beside the tests"; fi
wait "$builder" || build_status=$?
builder=
if [ "$build_status" -ne 0 ]; then
  echo "beside-builds: the Go-built tools' build failed ($build_status); the end of its log, $log_file:" >&2
  tail -n 40 "$log_file" >&2
fi
[ "$status" -ne 0 ] && exit "$status"
exit "$build_status"
