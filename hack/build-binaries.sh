#!/usr/bin/env bash
# Builds the Go-built tools of hack/go-tools.txt (the Kubernetes components, etcd, CoreDNS,
# local-path-provisioner, helm, kwok, kind, Kueue, CNCF Distribution's registry,
# scheduler-plugins, Volcano's scheduler and the project's node tools) at the versions of
# hack/versions.env, from the Go module proxy, into a cache outside the work tree, one
# directory per tool and version. What is already built is skipped; each binary is written
# to a scratch directory and renamed when complete, so an interrupted build leaves nothing
# half-made.
#
#   hack/build-binaries.sh [--claimed FILE] [TOOL...|all]
#                       (default: what the local cluster runs:
#                        kubernetes etcd coredns local-path-provisioner helm nodetools)
#   hack/build-binaries.sh --print-dir TOOL  prints where TOOL's binaries live
#
# Before building anything, the script claims every tool it will build: it holds a lock on
# `<cache>/bin/.<tool>-<version>.building` until that tool's binaries are in place (or the
# build failed). A program that finds a binary missing waits while its tool is claimed
# (tfjob_localcluster.binaries), so `make test` builds the tools only its later tests use
# beside its first ones (hack/beside-builds.sh). --claimed FILE creates FILE once the claims
# are held.
#
# TFJOB_CACHE overrides the cache root (default: ~/.cache/tfjob-operator); Go's GOPATH and
# build cache are under it (go/, go-build/) unless GOPATH or GOCACHE is set, and so are the
# toolchain's usage counters (config/).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=versions.env
source "$here/versions.env"
# The project's node tools' Go module, beside the local cluster that runs them.
nodetools_src=$(cd "$here/../localcluster/nodetools" && pwd)

cache=${TFJOB_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tfjob-operator}
# Go's GOPATH (its module cache, its checksum database's state) and build cache live in
# the project's cache too, not in ~/go and ~/.cache/go-build
# (tfjob_localcluster.gomodule.go_env does the same for Python's `go` calls).
# -modcacherw leaves the module cache writable, so `rm -rf` removes it. An interrupted
# build leaves its work directory in the cache's tmp/, not the host's /tmp.
own_gocache=no
[ -n "${GOCACHE:-}" ] || own_gocache=yes
export GOPATH=${GOPATH:-$cache/go} GOCACHE=${GOCACHE:-$cache/go-build} GOTMPDIR=$cache/tmp
mkdir -p "$GOTMPDIR"
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS="-mod=mod -modcacherw -buildvcs=false"
# The compiler and linker collect their garbage a quarter as often: the same binaries,
# built with a larger heap (cold builds here: Kubernetes 430 s instead of 460 s, helm 101 s
# instead of 124 s, both cores busy).
export GOGC=${GOGC:-400}
# The checksum database does not answer for local-path-provisioner here: its own go.sum
# (which its recipe, replaces:, copies) pins what it needs.
export GONOSUMDB=${GONOSUMDB:+$GONOSUMDB,}github.com/rancher/local-path-provisioner

# The table's rows, without comments.
rows() { grep -Ev '^[[:space:]]*(#|$)' "$here/go-tools.txt"; }
tool_names() { rows | awk '{print $1}'; }
row_of() {
  rows | awk -v tool="$1" '$1 == tool' | grep . || { echo "build-binaries: unknown tool '$1' ($(tool_names | xargs | sed 's/ /, /g'), all)" >&2; return 2; }
}

version_of() {
  local row key
  row=$(row_of "$1") || return
  key=$(awk '{print $2}' <<<"$row")
  if [ "$key" = - ]; then sources_digest; else echo "${!key:?$key is missing from versions.env}"; fi
}

tool_dir() {
  local version
  version=$(version_of "$1") || return
  echo "$cache/bin/$1-$version"
}

# Any change to the node tools' sources is a new directory.
sources_digest() {
  (cd "$nodetools_src" && find . -type f \( -name '*.go' -o -name 'go.mod' -o -name 'go.sum' \) | LC_ALL=C sort |
    xargs sha256sum) | sha256sum | cut -c1-12
}

log() { printf '[build-binaries %s] %s\n' "$(date +%H:%M:%S)" "$*"; }

# Runs a go command with its output kept in a log; prints a line per 100 compiled
# packages so a long cold build shows it is alive, and the log's tail if it fails.
run_logged() {
  local name=$1; shift
  local log_file="$cache/logs/$name.log"
  mkdir -p "$cache/logs"
  "$@" >"$log_file" 2>&1 &
  local pid=$! shown=0 lines
  while kill -0 "$pid" 2>/dev/null; do
    sleep 5
    lines=$(wc -l <"$log_file")
    if [ $((lines / 100)) -gt $((shown / 100)) ]; then shown=$lines; log "$name: $lines packages done"; fi
  done
  if ! wait "$pid"; then
    echo "build-binaries: $name failed; last lines of $log_file:" >&2
    tail -n 40 "$log_file" >&2
    exit 1
  fi
}

all_present() {
  local dir=$1; shift
  local name
  for name in "$@"; do [ -x "$dir/$name" ] || return 1; done
}

# Whether every binary of a tool's row is in its directory.
is_built() {
  local pairs pair names=()
  read -r _ _ _ pairs < <(row_of "$1")
  for pair in $pairs; do names+=("${pair%%=*}"); done
  all_present "$(tool_dir "$1")" "${names[@]}"
}

# Builds one tool by its row's recipe into a scratch directory, then moves its binaries
# into place, one rename each.
build() {
  local tool=$1 key recipe pairs pair version dir scratch names=() pkgs=()
  read -r _ key recipe pairs < <(row_of "$tool")
  for pair in $pairs; do names+=("${pair%%=*}"); pkgs+=("${pair#*=}"); done
  version=$(version_of "$tool")
  dir=$(tool_dir "$tool")
  if all_present "$dir" "${names[@]}"; then log "$tool $version: present in $dir"; return; fi
  log "$tool $version: building ${names[*]}"
  scratch=$(mktemp -d "$cache/bin/.$tool-build.XXXXXX")
  case "$recipe" in
    install) build_installed ;;
    module:*) build_in_module "${recipe#module:}" ;;
    replaces:*) build_in_module "${recipe#replaces:}" replaces ;;
    kubernetes) build_kubernetes ;;
    nodetools) run_logged nodetools env -C "$nodetools_src" go build -v -trimpath -ldflags "-s -w" -o "$scratch/" ./cmd/... ;;
    *) echo "build-binaries: $tool: unknown recipe '$recipe' in go-tools.txt" >&2; exit 2 ;;
  esac
  mkdir -p "$dir"
  for pair in "${names[@]}"; do mv -f "$scratch/$pair" "$dir/$pair"; done
  rm -rf "$scratch"
  built=yes
  release_claim "$tool"
  log "$tool $version: built into $dir"
}

# The claims' lock descriptors by tool. A claim's file is removed before its lock is
# released, so a program that opens it afterwards finds the binaries in place instead.
declare -A claims=()
claim_file() { echo "$(tool_dir "$1" | sed 's#/\([^/]*\)$#/.\1#').building"; }
claim() {
  local fd
  exec {fd}>"$(claim_file "$1")"
  flock "$fd"
  claims[$1]=$fd
}
release_claim() {
  local fd=${claims[$1]:-}
  [ -n "$fd" ] || return 0
  rm -f "$(claim_file "$1")"
  exec {fd}>&-
  unset "claims[$1]"
}

# The linker flags of a tool's binaries: stripped; helm's also say its version and the
# Kubernetes version it assumes for `helm template` and `helm lint` without a cluster.
ldflags() {
  local minor
  minor=$(echo "$KUBERNETES_VERSION" | cut -d. -f2)
  case "$1" in
    helm) echo "-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION
      -X helm.sh/helm/v3/internal/version.gitTreeState=clean
      -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=$minor
      -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=$minor" ;;
    *) echo "-s -w" ;;
  esac
}

# The build tags of a tool's binaries: Prometheus without its service discoveries (the
# tests scrape static targets), which spares building the clouds' SDKs.
go_tags() {
  case "$1" in
    prometheus) echo "remove_all_sd" ;;
    *) echo "" ;;
  esac
}

# The recipes below read build's locals: tool, version, scratch, names, pkgs.
build_installed() {
  local i
  for i in "${!pkgs[@]}"; do
    run_logged "$tool" env GOBIN="$scratch" go install -v -trimpath -tags "$(go_tags "$tool")" -ldflags "$(ldflags "$tool")" "${pkgs[$i]}@$version"
  done
}

# A module of our own, in the cache, that requires the tool's module.
build_in_module() {
  local module=$1 replaces=${2:-} mod info gomod i
  mod="$cache/src/$tool-$version"
  mkdir -p "$mod"
  info=$(cd "$mod" && go mod download -json "$module@$version")
  gomod=$(sed -n 's/^\t"GoMod": "\(.*\)",$/\1/p' <<<"$info")
  {
    echo "module tfjob.dev/hack/$tool-build"
    echo
    grep -E '^go ' "$gomod"
    echo
    echo "require $module $version"
    if [ -n "$replaces" ]; then
      echo
      sed -n '/^replace/,$p' "$gomod"
    fi
  } >"$mod/go.mod"
  # The checksum database does not answer for every version a replace pins.
  [ -z "$replaces" ] || install -m 0644 "$(sed -n 's/^\t"Dir": "\(.*\)",$/\1/p' <<<"$info")/go.sum" "$mod/go.sum"
  run_logged "$tool-get" env -C "$mod" go get "${pkgs[@]/%/@$version}"
  for i in "${!names[@]}"; do
    run_logged "$tool-build" env -C "$mod" go build -v -trimpath -tags "$(go_tags "$tool")" -ldflags "$(ldflags "$tool")" -o "$scratch/${names[$i]}" "${pkgs[$i]}"
  done
}

# k8s.io/kubernetes requires its staging modules at v0.0.0 with replace directives to its
# own tree: they are restated at the staging version of the release, and the version
# variables set as its release build sets them.
build_kubernetes() {
  local mod staging_version gomod info build_date minor pkg ldflags=() cmds=()
  mod="$cache/src/kubernetes-$version"
  mkdir -p "$mod"
  staging_version="v0.${version#v1.}"
  gomod=$(cd "$mod" && go mod download -json "k8s.io/kubernetes@$version" | sed -n 's/^\t"GoMod": "\(.*\)",$/\1/p')
  info="${gomod%.mod}.info"
  build_date=$(sed -n 's/.*"Time": *"\([^"]*\)".*/\1/p' "$info")
  {
    echo "module tfjob.dev/hack/kubernetes-build"
    echo
    grep -E '^(go|godebug) ' "$gomod"
    echo
    echo "require k8s.io/kubernetes $version"
    echo
    echo "replace ("
    sed -n 's#^[[:space:]]*\(k8s.io/[a-z0-9-]*\) => ./staging/src/.*#\t\1 => \1 '"$staging_version"'#p' "$gomod"
    echo ")"
  } >"$mod/go.mod"
  minor=$(echo "$version" | cut -d. -f2)
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags+=("-X $pkg.gitVersion=$version" "-X $pkg.gitMajor=1" "-X $pkg.gitMinor=$minor"
      "-X $pkg.gitTreeState=clean" "-X $pkg.buildDate=$build_date")
  done
  for pkg in "${names[@]}"; do cmds+=("k8s.io/kubernetes/cmd/$pkg"); done
  log "kubernetes: resolving modules (~0.5 GB on a cold module cache; cold, the build takes many minutes on 2 cores)"
  run_logged kubernetes-get env -C "$mod" go get "${cmds[@]/%/@$version}"
  log "kubernetes: compiling"
  run_logged kubernetes-build env -C "$mod" go build -v -trimpath -ldflags "-s -w ${ldflags[*]}" -o "$scratch/" "${cmds[@]}"
}

claimed_file=
if [ "${1:-}" = "--claimed" ]; then
  claimed_file=${2:?--claimed needs a file}
  shift 2
fi
if [ "${1:-}" = "--print-dir" ]; then
  tool_dir "${2:?--print-dir needs a tool name}"
  exit 0
fi

tools=("$@")
[ ${#tools[@]} -gt 0 ] || tools=(kubernetes etcd coredns local-path-provisioner helm nodetools)
[ "${tools[0]}" = all ] && mapfile -t tools < <(tool_names)
for tool in "${tools[@]}"; do row_of "$tool" >/dev/null || exit 2; done
missing=()
for tool in "${tools[@]}"; do is_built "$tool" || missing+=("$tool"); done
# What is built needs neither Go nor the lock: a program asking for built tools while a
# build runs (`make test`'s, beside its tests) goes on at once.
if [ ${#missing[@]} -gt 0 ]; then
  command -v go >/dev/null || { echo "build-binaries: the Go toolchain is required (go not on PATH)" >&2; exit 1; }
  # The toolchain's own usage counters (telemetry) go to XDG_CONFIG_HOME's go/telemetry:
  # the cache's config/, not ~/.config. GOENV keeps the user's `go env -w` settings read
  # (where go looks for them by default; asking `go env` would count in ~/.config).
  export GOENV=${GOENV:-${XDG_CONFIG_HOME:-$HOME/.config}/go/env} XDG_CONFIG_HOME=$cache/config
  mkdir -p "$cache/bin" "$cache/src"
  # One build at a time per cache; scratch dirs of an interrupted build are never reused,
  # and a claim left by one (its lock gone with its process) is a stale file.
  exec 9>"$cache/.build.lock"
  flock 9
  rm -rf "$cache"/bin/.*-build.* "$cache"/bin/.*.building 2>/dev/null || true
  for tool in "${missing[@]}"; do is_built "$tool" || claim "$tool"; done
fi
[ -z "$claimed_file" ] || touch "$claimed_file"
for tool in "${tools[@]}"; do build "$tool"; done
# The compiled packages (about 10 GB once every tool is built) serve only the next build of
# a new version, which Go's module cache (kept) already makes offline: the project's own
# build cache is emptied once something was built.
if [ "${built:-}" = yes ] && [ "$own_gocache" = yes ]; then
  log "emptying Go's build cache ($(du -sh "$GOCACHE" | cut -f1)): the binaries are built"
  go clean -cache
fi
for tool in "${tools[@]}"; do printf '%-10s %s\n' "$tool" "$(tool_dir "$tool")"; done
