#!/usr/bin/env bash
# Installs the standalone kustomize binary into .cache/bin (idempotent: a no-op when the pinned
# version is already there). Built from source through the Go module proxy with `go install`.
#   deploy/tools/ensure_kustomize.sh            # -> .cache/bin/kustomize
#   KUSTOMIZE_VERSION=v5.7.1 deploy/tools/ensure_kustomize.sh
set -euo pipefail

VERSION="${KUSTOMIZE_VERSION:-v5.7.1}"
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
BIN_DIR="${ROOT}/.cache/bin"
BIN="${BIN_DIR}/kustomize"

if [[ -x "$BIN" ]] && "$BIN" version 2>/dev/null | grep -q "${VERSION}"; then
  exit 0
fi

GO="$(command -v go || true)"
if [[ -z "$GO" && -x /usr/local/go/bin/go ]]; then
  GO=/usr/local/go/bin/go
fi
if [[ -z "$GO" ]]; then
  echo "ensure_kustomize: Go is needed to install kustomize ${VERSION} (apt-get install golang-go)" >&2
  exit 1
fi

mkdir -p "$BIN_DIR"
echo "ensure_kustomize: go install sigs.k8s.io/kustomize/kustomize/v5@${VERSION} -> ${BIN}" >&2
GOBIN="$BIN_DIR" GOTOOLCHAIN="${GOTOOLCHAIN:-local}" GOFLAGS="${GOFLAGS:-} -buildvcs=false" \
  "$GO" install "sigs.k8s.io/kustomize/kustomize/v5@${VERSION}"
"$BIN" version
