#!/usr/bin/env bash
# Installs the custom resource definitions the manifests use that can be obtained here: the
# prometheus-operator's ServiceMonitor CRD, from the operator's Go module (the Go module proxy serves
# it; no GitHub needed). The spark-operator's SparkApplication CRD is not served by any registry
# reachable here, so it is not installed.
set -euo pipefail
source "$(dirname "$0")/env.sh"
PROMETHEUS_OPERATOR_VERSION="${PROMETHEUS_OPERATOR_VERSION:-v0.85.0}"
GO="$(command -v go || echo /usr/local/go/bin/go)"
dir="$(GOFLAGS=-mod=mod "$GO" mod download -json "github.com/prometheus-operator/prometheus-operator@${PROMETHEUS_OPERATOR_VERSION}" |
  sed -n 's/.*"Dir": "\(.*\)",*/\1/p')"
kubectl --kubeconfig "$K8S_KUBECONFIG" apply --server-side \
  -f "${dir}/example/prometheus-operator-crd/monitoring.coreos.com_servicemonitors.yaml"
kubectl --kubeconfig "$K8S_KUBECONFIG" wait --for=condition=Established --timeout=60s crd/servicemonitors.monitoring.coreos.com
