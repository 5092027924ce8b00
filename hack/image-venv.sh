#!/bin/sh
# Installs a package's Python environment in a Dockerfile's build stages, in steps so that
# the big one is a layer of its own, rebuilt only when what it installs changes:
#   hack/image-venv.sh requirements PACKAGE [EXTRA]
#       /requirements.txt: PACKAGE's locked dependencies (uv.lock, with their hashes);
#       EXTRA is an optional dependency group of PACKAGE (the operator's controller, the
#       trainer's cpu or gpu). A stage of its own: a lock changed elsewhere (a development
#       tool) exports the same file, and the stage that copies it keeps its cache.
#   hack/image-venv.sh dependencies [TARGETARCH]
#       /opt/venv: what /requirements.txt lists
#   hack/image-venv.sh package DIR [TARGETARCH]
#       /opt/app: the package in DIR itself, with its commands in /opt/app/bin
# The stages run on the build machine's platform: for another architecture (TARGETARCH
# amd64 or arm64, default the build machine's), that architecture's wheels are installed,
# and none of them is run.
set -eu
step=$1
case "$step" in
  requirements) what=$2 extra=${3:-} arch=$(uname -m) ;;
  dependencies) arch=${2:-} ;;
  package) what=$2 arch=${3:-} ;;
  *) echo "image-venv.sh: the step is requirements, dependencies or package, not $step" >&2; exit 2 ;;
esac
[ -n "$arch" ] || arch=$(uname -m)
case "$arch" in
  amd64 | x86_64) platform=x86_64-manylinux_2_28 ;;
  arm64 | aarch64) platform=aarch64-manylinux_2_28 ;;
  *) echo "image-venv.sh: no wheels are locked for architecture $arch" >&2; exit 1 ;;
esac
uv=/opt/uv/bin/uv
case "$step" in
  requirements)
    if [ -n "$extra" ]; then set -- --extra "$extra"; else set --; fi
    "$uv" export --frozen --no-dev --no-emit-workspace --package "$what" "$@" \
      --output-file /requirements.txt --quiet
    ;;
  dependencies)
    "$uv" venv --quiet /opt/venv
    "$uv" pip install --quiet --python /opt/venv/bin/python --python-platform "$platform" \
      --require-hashes --no-deps --requirements /requirements.txt
    ;;
  package)
    "$uv" pip install --quiet --python /opt/venv/bin/python --python-platform "$platform" \
      --no-deps --target /opt/app "./$what"
    ;;
esac
