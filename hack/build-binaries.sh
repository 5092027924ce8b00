#!/usr/bin/env bash
# Builds the pinned Kubernetes components (control plane, kubelet, kube-proxy, kubeadm,
# kubectl), etcd, CoreDNS, local-path-provisioner, helm, kwok, kind, Kueue, CNCF Distribution's registry and the project's node tools (localcluster/nodetools:
# pause, a fake GPU device plugin), scheduler-plugins and Volcano's scheduler from the Go module proxy into a cache outside the work
# tree, one directory per tool and version. What is already built is skipped; each binary is written to a temporary
# name and renamed when complete, so an interrupted build leaves nothing half-made.
#
#   hack/build-binaries.sh [kubernetes|etcd|coredns|local-path-provisioner|helm|kwok|kind|kueue|registry|scheduler-plugins|volcano|nodetools|all]
#                                 (default: kubernetes etcd coredns local-path-provisioner helm nodetools)
#   hack/build-binaries.sh --print-dir TOOL                  prints where TOOL's binaries live
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

tool_dir() {
  case "$1" in
    kubernetes) echo "$cache/bin/kubernetes-$KUBERNETES_VERSION" ;;
    etcd) echo "$cache/bin/etcd-$ETCD_VERSION" ;;
    coredns) echo "$cache/bin/coredns-$COREDNS_VERSION" ;;
    local-path-provisioner) echo "$cache/bin/local-path-provisioner-$LOCAL_PATH_PROVISIONER_VERSION" ;;
    helm) echo "$cache/bin/helm-$HELM_VERSION" ;;
    kwok) echo "$cache/bin/kwok-$KWOK_VERSION" ;;
    kind) echo "$cache/bin/kind-$KIND_VERSION" ;;
    kueue) echo "$cache/bin/kueue-$KUEUE_VERSION" ;;
    registry) echo "$cache/bin/registry-$DISTRIBUTION_VERSION" ;;
    scheduler-plugins) echo "$cache/bin/scheduler-plugins-$SCHEDULER_PLUGINS_VERSION" ;;
    volcano) echo "$cache/bin/volcano-$VOLCANO_VERSION" ;;
    # Versioned by its sources: any change to them is a new directory.
    nodetools) echo "$cache/bin/nodetools-$(nodetools_version)" ;;
    *) echo "unknown tool: $1" >&2; return 2 ;;
  esac
}

nodetools_version() {
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

# Moves freshly built binaries from a scratch dir into place, one rename each.
install_from() {
  local scratch=$1 dir=$2; shift 2
  local name
  mkdir -p "$dir"
  for name in "$@"; do mv -f "$scratch/$name" "$dir/$name"; done
  rm -rf "$scratch"
  built=yes
}

# A module of our own that requires the tool's module, so its replace directives
# (which make `go install` refuse it) can be restated as ordinary versions.
wrapper_module() {
  local name=$1
  local mod="$cache/src/$name"
  mkdir -p "$mod"
  echo "$mod"
}

build_kubernetes() {
  local dir names=(kube-apiserver kube-controller-manager kube-scheduler kubectl kubelet kube-proxy kubeadm)
  dir=$(tool_dir kubernetes)
  if all_present "$dir" "${names[@]}"; then log "kubernetes $KUBERNETES_VERSION: present in $dir"; return; fi
  log "kubernetes $KUBERNETES_VERSION: building ${names[*]} (cold: many minutes on 2 cores)"
  local mod staging_version gomod info build_date minor ldflags=()
  mod=$(wrapper_module "kubernetes-$KUBERNETES_VERSION")
  staging_version="v0.${KUBERNETES_VERSION#v1.}"
  gomod=$(cd "$mod" && go mod download -json "k8s.io/kubernetes@$KUBERNETES_VERSION" | sed -n 's/^\t"GoMod": "\(.*\)",$/\1/p')
  info="${gomod%.mod}.info"
  build_date=$(sed -n 's/.*"Time": *"\([^"]*\)".*/\1/p' "$info")
  {
    echo "module tfjob.dev/hack/kubernetes-build"
    echo
    grep -E '^(go|godebug) ' "$gomod"
    echo
    echo "require k8s.io/kubernetes $KUBERNETES_VERSION"
    echo
    echo "replace ("
    sed -n 's#^[[:space:]]*\(k8s.io/[a-z0-9-]*\) => ./staging/src/.*#\t\1 => \1 '"$staging_version"'#p' "$gomod"
    echo ")"
  } >"$mod/go.mod"
  minor=$(echo "$KUBERNETES_VERSION" | cut -d. -f2)
  local pkg
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags+=("-X $pkg.gitVersion=$KUBERNETES_VERSION" "-X $pkg.gitMajor=1" "-X $pkg.gitMinor=$minor"
      "-X $pkg.gitTreeState=clean" "-X $pkg.buildDate=$build_date")
  done
  local scratch cmds=()
  scratch=$(mktemp -d "$cache/bin/.kubernetes-build.XXXXXX")
  for pkg in "${names[@]}"; do cmds+=("k8s.io/kubernetes/cmd/$pkg"); done
  log "kubernetes: resolving modules (~0.5 GB on a cold module cache)"
  run_logged kubernetes-get env -C "$mod" go get "${cmds[@]/%/@$KUBERNETES_VERSION}"
  log "kubernetes: compiling"
  run_logged kubernetes-build env -C "$mod" go build -v -trimpath -ldflags "-s -w ${ldflags[*]}" -o "$scratch/" "${cmds[@]}"
  install_from "$scratch" "$dir" "${names[@]}"
  log "kubernetes $KUBERNETES_VERSION: built into $dir"
}

build_etcd() {
  local dir mod scratch
  dir=$(tool_dir etcd)
  if all_present "$dir" etcd; then log "etcd $ETCD_VERSION: present in $dir"; return; fi
  log "etcd $ETCD_VERSION: building"
  mod=$(wrapper_module "etcd-$ETCD_VERSION")
  printf 'module tfjob.dev/hack/etcd-build\n\ngo 1.23\n' >"$mod/go.mod"
  run_logged etcd-get env -C "$mod" go get "go.etcd.io/etcd/server/v3@$ETCD_VERSION"
  scratch=$(mktemp -d "$cache/bin/.etcd-build.XXXXXX")
  run_logged etcd-build env -C "$mod" go build -v -trimpath -ldflags "-s -w" -o "$scratch/etcd" go.etcd.io/etcd/server/v3
  install_from "$scratch" "$dir" etcd
  log "etcd $ETCD_VERSION: built into $dir"
}

build_coredns() {
  local dir scratch
  dir=$(tool_dir coredns)
  if all_present "$dir" coredns; then log "coredns $COREDNS_VERSION: present in $dir"; return; fi
  log "coredns $COREDNS_VERSION: building"
  scratch=$(mktemp -d "$cache/bin/.coredns-build.XXXXXX")
  run_logged coredns env GOBIN="$scratch" go install -v -trimpath -ldflags "-s -w" "github.com/coredns/coredns@$COREDNS_VERSION"
  install_from "$scratch" "$dir" coredns
  log "coredns $COREDNS_VERSION: built into $dir"
}

# The module in localcluster/nodetools (its go.sum pins every dependency).
build_nodetools() {
  local dir scratch names=(pause gpu-device-plugin)
  dir=$(tool_dir nodetools)
  if all_present "$dir" "${names[@]}"; then log "nodetools: present in $dir"; return; fi
  log "nodetools: building ${names[*]}"
  scratch=$(mktemp -d "$cache/bin/.nodetools-build.XXXXXX")
  run_logged nodetools env -C "$nodetools_src" go build -v -trimpath -ldflags "-s -w" -o "$scratch/" ./cmd/...
  install_from "$scratch" "$dir" "${names[@]}"
  log "nodetools: built into $dir"
}

build_helm() {
  local dir scratch k8s_minor
  dir=$(tool_dir helm)
  if all_present "$dir" helm; then log "helm $HELM_VERSION: present in $dir"; return; fi
  log "helm $HELM_VERSION: building"
  # Helm assumes this Kubernetes version for `helm template` and `helm lint`
  # when it is not talking to a cluster.
  k8s_minor=$(echo "$KUBERNETES_VERSION" | cut -d. -f2)
  scratch=$(mktemp -d "$cache/bin/.helm-build.XXXXXX")
  run_logged helm env GOBIN="$scratch" go install -v -trimpath -ldflags "-s -w \
    -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION \
    -X helm.sh/helm/v3/internal/version.gitTreeState=clean \
    -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=1 \
    -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=$k8s_minor \
    -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor=1 \
    -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=$k8s_minor" \
    "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
  install_from "$scratch" "$dir" helm
  log "helm $HELM_VERSION: built into $dir"
}

build_kwok() {
  local dir scratch
  dir=$(tool_dir kwok)
  if all_present "$dir" kwok; then log "kwok $KWOK_VERSION: present in $dir"; return; fi
  log "kwok $KWOK_VERSION: building"
  scratch=$(mktemp -d "$cache/bin/.kwok-build.XXXXXX")
  run_logged kwok env GOBIN="$scratch" go install -v -trimpath -ldflags "-s -w" "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION"
  install_from "$scratch" "$dir" kwok
  log "kwok $KWOK_VERSION: built into $dir"
}

build_kind() {
  local dir scratch
  dir=$(tool_dir kind)
  if all_present "$dir" kind; then log "kind $KIND_VERSION: present in $dir"; return; fi
  log "kind $KIND_VERSION: building (it needs a container engine to create clusters)"
  scratch=$(mktemp -d "$cache/bin/.kind-build.XXXXXX")
  run_logged kind env GOBIN="$scratch" go install -v -trimpath -ldflags "-s -w" "sigs.k8s.io/kind@$KIND_VERSION"
  install_from "$scratch" "$dir" kind
  log "kind $KIND_VERSION: built into $dir"
}

build_registry() {
  local dir scratch
  dir=$(tool_dir registry)
  if all_present "$dir" registry; then log "registry $DISTRIBUTION_VERSION: present in $dir"; return; fi
  log "registry (CNCF Distribution) $DISTRIBUTION_VERSION: building"
  scratch=$(mktemp -d "$cache/bin/.registry-build.XXXXXX")
  run_logged registry env GOBIN="$scratch" go install -v -trimpath -ldflags "-s -w" \
    "github.com/distribution/distribution/v3/cmd/registry@$DISTRIBUTION_VERSION"
  install_from "$scratch" "$dir" registry
  log "registry $DISTRIBUTION_VERSION: built into $dir"
}

# The module proxy here answers for pinned versions but not for a module's version list,
# which `go install module@version` reads: the command is built in a module of our own.
build_kueue() {
  local dir mod scratch
  dir=$(tool_dir kueue)
  if all_present "$dir" kueue; then log "kueue $KUEUE_VERSION: present in $dir"; return; fi
  log "kueue $KUEUE_VERSION: building"
  mod=$(wrapper_module "kueue-$KUEUE_VERSION")
  printf 'module tfjob.dev/hack/kueue-build\n\ngo 1.25.0\n' >"$mod/go.mod"
  run_logged kueue-get env -C "$mod" go get "sigs.k8s.io/kueue/cmd/kueue@$KUEUE_VERSION"
  scratch=$(mktemp -d "$cache/bin/.kueue-build.XXXXXX")
  run_logged kueue-build env -C "$mod" go build -v -trimpath -ldflags "-s -w" -o "$scratch/kueue" sigs.k8s.io/kueue/cmd/kueue
  install_from "$scratch" "$dir" kueue
  log "kueue $KUEUE_VERSION: built into $dir"
}

# Builds Go commands of a module whose go.mod pins other modules by replace directives
# (which `go install` refuses) in a module of our own that restates them. The module's
# go.sum comes too: the checksum database does not answer for every k8s.io version they pin.
#   build_with_replaces TOOL MODULE VERSION BINARY=PACKAGE...
build_with_replaces() {
  local tool=$1 module=$2 version=$3; shift 3
  local dir mod info gomod scratch pair i names=() pkgs=()
  for pair in "$@"; do names+=("${pair%%=*}"); pkgs+=("${pair#*=}"); done
  dir=$(tool_dir "$tool")
  if all_present "$dir" "${names[@]}"; then log "$tool $version: present in $dir"; return; fi
  log "$tool $version: building ${names[*]} (cold: many minutes on 2 cores)"
  mod=$(wrapper_module "$tool-$version")
  info=$(cd "$mod" && go mod download -json "$module@$version")
  gomod=$(sed -n 's/^\t"GoMod": "\(.*\)",$/\1/p' <<<"$info")
  install -m 0644 "$(sed -n 's/^\t"Dir": "\(.*\)",$/\1/p' <<<"$info")/go.sum" "$mod/go.sum"
  {
    echo "module tfjob.dev/hack/$tool-build"
    echo
    grep -E '^go ' "$gomod"
    echo
    echo "require $module $version"
    echo
    sed -n '/^replace/,$p' "$gomod"
  } >"$mod/go.mod"
  run_logged "$tool-get" env -C "$mod" go get "${pkgs[@]/%/@$version}"
  scratch=$(mktemp -d "$cache/bin/.$tool-build.XXXXXX")
  for i in "${!names[@]}"; do
    run_logged "$tool-build" env -C "$mod" go build -v -trimpath -ldflags "-s -w" -o "$scratch/${names[$i]}" "${pkgs[$i]}"
  done
  install_from "$scratch" "$dir" "${names[@]}"
  log "$tool $version: built into $dir"
}

# scheduler-plugins' kube-scheduler, with its Coscheduling plugin compiled in.
build_scheduler_plugins() {
  build_with_replaces scheduler-plugins sigs.k8s.io/scheduler-plugins "$SCHEDULER_PLUGINS_VERSION" \
    scheduler=sigs.k8s.io/scheduler-plugins/cmd/scheduler
}

# The default StorageClass's provisioner. The checksum database does not answer for this
# module here: its own go.sum (copied by build_with_replaces) pins what it needs.
build_local_path_provisioner() {
  GONOSUMDB=github.com/rancher/local-path-provisioner build_with_replaces local-path-provisioner \
    github.com/rancher/local-path-provisioner "$LOCAL_PATH_PROVISIONER_VERSION" \
    local-path-provisioner=github.com/rancher/local-path-provisioner
}

# Volcano's scheduler (its controllers and webhooks are not needed beside this operator).
build_volcano() {
  build_with_replaces volcano volcano.sh/volcano "$VOLCANO_VERSION" \
    vc-scheduler=volcano.sh/volcano/cmd/scheduler
}

if [ "${1:-}" = "--print-dir" ]; then
  tool_dir "${2:?--print-dir needs a tool name}"
  exit 0
fi

command -v go >/dev/null || { echo "build-binaries: the Go toolchain is required (go not on PATH)" >&2; exit 1; }
# The toolchain's own usage counters (telemetry) go to XDG_CONFIG_HOME's go/telemetry:
# the cache's config/, not ~/.config. GOENV keeps the user's `go env -w` settings read
# (where go looks for them by default; asking `go env` would count in ~/.config).
export GOENV=${GOENV:-${XDG_CONFIG_HOME:-$HOME/.config}/go/env} XDG_CONFIG_HOME=$cache/config
mkdir -p "$cache/bin" "$cache/src"
# One build at a time per cache; scratch dirs of an interrupted build are never reused.
exec 9>"$cache/.build.lock"
flock 9
rm -rf "$cache"/bin/.*-build.* 2>/dev/null || true

tools=("$@")
[ ${#tools[@]} -gt 0 ] || tools=(kubernetes etcd coredns local-path-provisioner helm nodetools)
[ "${tools[0]}" = all ] && tools=(kubernetes etcd coredns local-path-provisioner helm kwok kind kueue registry scheduler-plugins volcano nodetools)
for tool in "${tools[@]}"; do
  case "$tool" in
    kubernetes | etcd | coredns | local-path-provisioner | helm | kwok | kind | kueue | registry | scheduler-plugins | volcano | nodetools) "build_${tool//-/_}" ;;
    *) echo "build-binaries: unknown tool '$tool' (kubernetes, etcd, coredns, local-path-provisioner, helm, kwok, kind, kueue, registry, scheduler-plugins, volcano, nodetools, all)" >&2; exit 2 ;;
  esac
done
# The compiled packages (about 10 GB once every tool is built) serve only the next build of
# a new version, which Go's module cache (kept) already makes offline: the project's own
# build cache is emptied once something was built.
if [ "${built:-}" = yes ] && [ "$own_gocache" = yes ]; then
  log "emptying Go's build cache ($(du -sh "$GOCACHE" | cut -f1)): the binaries are built"
  go clean -cache
fi
for tool in "${tools[@]}"; do printf '%-10s %s\n' "$tool" "$(tool_dir "$tool")"; done
