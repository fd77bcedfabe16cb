#!/usr/bin/env bash
# Builds kube-apiserver, kube-controller-manager, kube-scheduler and kubelet from the Kubernetes source
# served by the Go module proxy, into ~/.cache/replicator/k8s-<version>/bin (a no-op when all four are
# there). kube-proxy is not built: the local cluster runs its pods with hostNetwork and no Service
# traffic goes through ClusterIPs.
#
# `go install k8s.io/kubernetes/cmd/...@v` refuses the module (its go.mod replaces the 31 staging
# modules with ./staging/...), so this writes a wrapper module that replaces each staging module with
# its published v0.<minor>.<patch> of the same release, taken from that release's own go.mod.
#   deploy/local-cluster/build-k8s.sh                  # K8S_VERSION=v1.34.4
#   K8S_VERSION=v1.35.4 deploy/local-cluster/build-k8s.sh
set -euo pipefail

VERSION="${K8S_VERSION:-v1.34.4}"
CACHE="${K8S_CACHE:-${HOME}/.cache/replicator/k8s-${VERSION}}"
BIN="${CACHE}/bin"
SRC="${CACHE}/wrapper"
CMDS=(kube-apiserver kube-controller-manager kube-scheduler kubelet)

mkdir -p "$BIN"
# One build at a time per version: a second caller waits, then finds the binaries there.
exec 9>"${CACHE}/.build.lock"
flock 9
missing=()
for c in "${CMDS[@]}"; do [[ -x "${BIN}/${c}" ]] || missing+=("$c"); done
if [[ ${#missing[@]} -eq 0 ]]; then
  exit 0
fi

GO="$(command -v go || echo /usr/local/go/bin/go)"
export GOTOOLCHAIN="${GOTOOLCHAIN:-local}" CGO_ENABLED=0 GOFLAGS="${GOFLAGS:-} -buildvcs=false"

mkdir -p "$SRC"
cd "$SRC"
# The staging modules, as the release's go.mod lists them in its replace block.
modfile="$("$GO" mod download -json "k8s.io/kubernetes@${VERSION}" | sed -n 's/.*"GoMod": "\(.*\)",*/\1/p')"
staging_version="v0.${VERSION#v1.}"
{
  echo "module local/k8s-build"
  echo
  echo "go $(sed -n 's/^go \([0-9.]*\)$/\1/p' "$modfile")"
  echo
  echo "replace ("
  sed -n '/^replace (/,/^)/p' "$modfile" | sed -n 's#^\s*\(k8s.io/[a-z0-9-]*\) => ./staging/.*#\t\1 => \1 '"${staging_version}"'#p'
  echo ")"
} >go.mod
echo "build-k8s: $(grep -c ' => ' go.mod) staging modules replaced with ${staging_version}" >&2

pkgs=()
for c in "${CMDS[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/${c}@${VERSION}"); done
"$GO" get "${pkgs[@]}"

minor="${VERSION#v1.}"; minor="${minor%%.*}"
ldflags="-s -w"
for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags+=" -X ${p}.gitVersion=${VERSION} -X ${p}.gitMajor=1 -X ${p}.gitMinor=${minor}"
  ldflags+=" -X ${p}.gitTreeState=clean -X ${p}.buildDate=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
done
start=$(date +%s)
for c in "${missing[@]}"; do
  echo "build-k8s: go build ${c} ${VERSION}" >&2
  "$GO" build -trimpath -ldflags "$ldflags" -o "${BIN}/${c}.partial" "k8s.io/kubernetes/cmd/${c}"
  mv "${BIN}/${c}.partial" "${BIN}/${c}"
  echo "build-k8s: ${c} done after $(( $(date +%s) - start )) s" >&2
done
