#!/bin/sh
# Makes an image's /opt/venv in a Dockerfile's build stage: the locked dependencies of
# PACKAGE (uv.lock, with its hashes) as wheels for the target architecture, then PACKAGE
# itself from DIR. The stage runs on the build machine's platform, so an image for
# another architecture gets that architecture's wheels without running any of them.
#   hack/image-venv.sh PACKAGE DIR [TARGETARCH] [EXTRA]
# TARGETARCH (amd64, arm64) defaults to the build machine's; EXTRA is an optional
# dependency group of PACKAGE (the trainer's gpu).
set -eu
package=$1 dir=$2 arch=${3:-} extra=${4:-}
[ -n "$arch" ] || arch=$(uname -m)
case "$arch" in
  amd64 | x86_64) platform=x86_64-manylinux_2_28 ;;
  arm64 | aarch64) platform=aarch64-manylinux_2_28 ;;
  *) echo "image-venv.sh: no wheels are locked for architecture $arch" >&2; exit 1 ;;
esac
uv=/opt/uv/bin/uv
if [ -n "$extra" ]; then set -- --extra "$extra"; else set --; fi
"$uv" export --frozen --no-dev --no-emit-workspace --package "$package" "$@" \
  --output-file /tmp/requirements.txt --quiet
"$uv" venv --quiet /opt/venv
"$uv" pip install --quiet --python /opt/venv/bin/python --python-platform "$platform" \
  --require-hashes --no-deps --requirements /tmp/requirements.txt
"$uv" pip install --quiet --python /opt/venv/bin/python --python-platform "$platform" \
  --no-deps "./$dir"
rm /tmp/requirements.txt
