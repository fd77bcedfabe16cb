#!/usr/bin/env bash
# Certificates and kubeconfigs of the local cluster, made with openssl into $K8S_RUN/pki (idempotent:
# existing files are kept). One CA signs everything; every identity is what the component's default
# RBAC expects (system:kube-controller-manager, system:kube-scheduler, system:node:<node>).
set -euo pipefail
source "$(dirname "$0")/env.sh"
pki="${K8S_RUN}/pki"
mkdir -p "$pki"
cd "$pki"
umask 077

if [[ ! -s ca.crt ]]; then
  openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 30 -subj "/CN=replicator-local-ca" 2>/dev/null
fi
svc_ip="$(python3 -c "import ipaddress,sys; print(next(ipaddress.ip_network(sys.argv[1]).hosts()))" "$K8S_SERVICE_CIDR")"

# cert NAME CN ORG SANS(kind:value,...) USAGE
cert() {
  local name="$1" cn="$2" org="$3" sans="$4" usage="$5"
  [[ -s "${name}.crt" ]] && return 0
  local subj="/CN=${cn}"
  [[ -n "$org" ]] && subj="/O=${org}/CN=${cn}"
  {
    echo "basicConstraints=CA:FALSE"
    echo "keyUsage=critical,digitalSignature,keyEncipherment"
    echo "extendedKeyUsage=${usage}"
    [[ -n "$sans" ]] && echo "subjectAltName=${sans}"
  } >"${name}.ext"
  openssl req -newkey rsa:2048 -nodes -keyout "${name}.key" -out "${name}.csr" -subj "$subj" 2>/dev/null
  openssl x509 -req -in "${name}.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 30 \
    -extfile "${name}.ext" -out "${name}.crt" 2>/dev/null
  rm -f "${name}.csr" "${name}.ext"
}

cert apiserver kube-apiserver "" \
  "IP:${K8S_IP},IP:${svc_ip},DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,DNS:localhost" \
  serverAuth
cert apiserver-kubelet-client kube-apiserver-kubelet-client system:masters "" clientAuth
cert admin admin system:masters "" clientAuth
cert controller-manager system:kube-controller-manager "" "" clientAuth
cert scheduler system:kube-scheduler "" "" clientAuth
cert kubelet-client "system:node:${K8S_NODE}" system:nodes "" clientAuth
cert kubelet-serving "system:node:${K8S_NODE}" system:nodes "IP:${K8S_IP}" serverAuth
cert kube-controller-manager-serving kube-controller-manager "" "IP:${K8S_IP}" serverAuth
cert kube-scheduler-serving kube-scheduler "" "IP:${K8S_IP}" serverAuth
if [[ ! -s sa.key ]]; then
  openssl genrsa -out sa.key 2048 2>/dev/null
  openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
fi

kubeconfig() {
  local file="$1" user="$2"
  [[ -s "$file" ]] && return 0
  kubectl config --kubeconfig="$file" set-cluster local --server="https://${K8S_IP}:${K8S_APISERVER_PORT}" \
    --certificate-authority="${pki}/ca.crt" --embed-certs=true >/dev/null
  kubectl config --kubeconfig="$file" set-credentials "$user" --client-certificate="${pki}/${user}.crt" \
    --client-key="${pki}/${user}.key" --embed-certs=true >/dev/null
  kubectl config --kubeconfig="$file" set-context local --cluster=local --user="$user" >/dev/null
  kubectl config --kubeconfig="$file" use-context local >/dev/null
}
kubeconfig admin.kubeconfig admin
kubeconfig controller-manager.kubeconfig controller-manager
kubeconfig scheduler.kubeconfig scheduler
kubeconfig kubelet.kubeconfig kubelet-client
