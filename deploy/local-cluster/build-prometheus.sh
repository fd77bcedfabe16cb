#!/usr/bin/env bash
# Debian's prometheus (2.42+ds) is built without Kubernetes service discovery ("field
# kubernetes_sd_configs not found in type config.ScrapeConfig"), so the k8s tests use a Prometheus
# built from the Go module proxy with only that discovery compiled in, into
# ~/.cache/replicator/prometheus-<version>/prometheus (a no-op when it is there). Prints its path.
set -euo pipefail
VERSION="${PROMETHEUS_VERSION:-v0.316.0}"  # the Go module version of Prometheus 3.x
BIN="${HOME}/.cache/replicator/prometheus-${VERSION}"
if [[ ! -x "${BIN}/prometheus" ]]; then
  mkdir -p "$BIN"
  exec 9>"${BIN}/.build.lock"
  flock 9
  if [[ ! -x "${BIN}/prometheus" ]]; then
    GO="$(command -v go || echo /usr/local/go/bin/go)"
    GOTOOLCHAIN="${GOTOOLCHAIN:-local}" CGO_ENABLED=0 GOFLAGS="${GOFLAGS:-} -buildvcs=false" GOBIN="$BIN" \
      nice -n 19 "$GO" install -tags remove_all_sd,enable_kubernetes_sd "github.com/prometheus/prometheus/cmd/prometheus@${VERSION}" >&2
  fi
fi
echo "${BIN}/prometheus"
