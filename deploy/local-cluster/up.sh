#!/usr/bin/env bash
# A one-node Kubernetes cluster from scratch on this machine (`make k8s-up`): etcd, kube-apiserver,
# kube-controller-manager, kube-scheduler, and a kubelet on containerd + runc, all bound to $K8S_IP (a
# loopback address), certificates made with openssl. Pods are meant to run with hostNetwork: the CNI
# configuration is the loopback plugin only (no pod network) and there is no kube-proxy.
# Binaries: built once by build-k8s.sh into ~/.cache/replicator/k8s-<version>/bin. Needs root (cgroups,
# mounts). Every host change it makes is recorded under $K8S_RUN and undone by down.sh.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
source "${here}/env.sh"

[[ "$(id -u)" == 0 ]] || { echo "k8s-up: needs root (cgroups, mounts, containerd)" >&2; exit 1; }
missing=()
for c in etcd containerd ctr runc openssl kubectl catatonit podman iptables python3; do
  command -v "$c" >/dev/null || missing+=("$c")
done
[[ -x /usr/lib/cni/loopback ]] || missing+=("/usr/lib/cni/loopback")
if [[ ${#missing[@]} -gt 0 ]]; then
  echo "k8s-up: missing ${missing[*]}: apt-get install etcd-server containerd runc containernetworking-plugins catatonit podman iptables openssl" >&2
  exit 1
fi
for s in "${K8S_SERVICES[@]}"; do
  if [[ -s "${K8S_RUN}/pids/${s}" ]] && kill -0 "$(cat "${K8S_RUN}/pids/${s}")" 2>/dev/null; then
    echo "k8s-up: ${s} already runs (pid $(cat "${K8S_RUN}/pids/${s}")); make k8s-down first" >&2
    exit 1
  fi
done

started=$(date +%s)
"${here}/build-k8s.sh"
mkdir -p "${K8S_RUN}"/{pids,cmd,logs,host,etcd,cni/net.d,kubelet,pod-logs,containerd/root,containerd/state}

# What the kubelet changes on the host, as it was: down.sh puts it back.
for k in vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops kernel.keys.root_maxkeys \
         kernel.keys.root_maxbytes; do
  echo "${k}=$(sysctl -n "$k")"
done >"${K8S_RUN}/host/sysctl"
# containerd 1.6 keeps shim sockets and fifos in /run/containerd whatever its state dir: down.sh removes
# that directory (once empty) when it was not there before.
[[ -e /run/containerd ]] && echo "existed" >"${K8S_RUN}/host/run-containerd"
for t in filter nat mangle; do
  iptables -t "$t" -S 2>/dev/null | awk '$1 == "-N" {print $2}' >"${K8S_RUN}/host/iptables-${t}" || true
  ip6tables -t "$t" -S 2>/dev/null | awk '$1 == "-N" {print $2}' >"${K8S_RUN}/host/ip6tables-${t}" || true
done

"${here}/pki.sh"
pki="${K8S_RUN}/pki"

# start NAME NICE CMD...: a daemon in its own session, its pid recorded for down.sh and its command
# line for restart.sh.
start() {
  local name="$1" niceness="$2"; shift 2
  printf '%s\0' nice -n "$niceness" "$@" >"${K8S_RUN}/cmd/${name}"
  setsid nice -n "$niceness" "$@" >>"${K8S_RUN}/logs/${name}.log" 2>&1 </dev/null &
  echo $! >"${K8S_RUN}/pids/${name}"
}
# wait_for WHAT SECONDS CMD...
wait_for() {
  local what="$1" seconds="$2"; shift 2
  local deadline=$(( $(date +%s) + seconds ))
  until "$@" >/dev/null 2>&1; do
    if ! kill -0 "$(cat "${K8S_RUN}/pids/${what}")" 2>/dev/null || (( $(date +%s) > deadline )); then
      echo "k8s-up: ${what} exited or was not ready within ${seconds} s; its log ends:" >&2
      tail -20 "${K8S_RUN}/logs/${what}.log" >&2 || true
      exit 1
    fi
    sleep 1
  done
}

start etcd 10 etcd --name local --data-dir "${K8S_RUN}/etcd" \
  --listen-client-urls "http://${K8S_IP}:${K8S_ETCD_PORT}" --advertise-client-urls "http://${K8S_IP}:${K8S_ETCD_PORT}" \
  --listen-peer-urls "http://${K8S_IP}:${K8S_ETCD_PEER_PORT}" \
  --initial-advertise-peer-urls "http://${K8S_IP}:${K8S_ETCD_PEER_PORT}" \
  --initial-cluster "local=http://${K8S_IP}:${K8S_ETCD_PEER_PORT}" --listen-metrics-urls "" --log-level warn

# containerd with its own root, state and sockets; CRI with the local pause image and loopback-only CNI.
cat >"${K8S_RUN}/cni/net.d/10-loopback.conflist" <<CNI
{"cniVersion": "0.4.0", "name": "loopback-only", "plugins": [{"type": "loopback"}]}
CNI
cat >"${K8S_RUN}/containerd/config.toml" <<TOML
version = 2
root = "${K8S_RUN}/containerd/root"
state = "${K8S_RUN}/containerd/state"
[grpc]
  address = "${K8S_CONTAINERD_SOCK}"
[ttrpc]
  address = "${K8S_CONTAINERD_SOCK}.ttrpc"
[debug]
  address = ""
[metrics]
  address = ""
[plugins."io.containerd.internal.v1.opt"]
  path = "${K8S_RUN}/containerd/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "${K8S_PAUSE_IMAGE}"
  stream_server_address = "${K8S_IP}"
  stream_server_port = "0"
  enable_selinux = false
  # Without CAP_SYS_RESOURCE (not granted here) runc cannot lower oom_score_adj to the kubelet's -998
  # for sandboxes: "nsexec: failed to update /proc/self/oom_score_adj: Permission denied".
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "${K8S_RUN}/cni/net.d"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "${K8S_RUN}/runc"
TOML
start containerd 0 containerd --config "${K8S_RUN}/containerd/config.toml"
wait_for containerd 60 ctr --address "$K8S_CONTAINERD_SOCK" version

# The pod sandbox ("pause") image: Debian's static catatonit in pause mode, built here (no registry).
ctr_k8s=(ctr --address "$K8S_CONTAINERD_SOCK" -n k8s.io)
pause_tar="${HOME}/.cache/replicator/pause-catatonit.tar"
if [[ ! -s "$pause_tar" ]]; then
  ctx="$(mktemp -d)"
  cp /usr/bin/catatonit "${ctx}/catatonit"
  printf 'FROM scratch\nCOPY catatonit /catatonit\nENTRYPOINT ["/catatonit", "-P"]\n' >"${ctx}/Containerfile"
  podman build --quiet --isolation chroot -t "$K8S_PAUSE_IMAGE" -f "${ctx}/Containerfile" "$ctx" >/dev/null
  podman save --quiet --format docker-archive -o "${pause_tar}.part" "$K8S_PAUSE_IMAGE" >/dev/null
  mv "${pause_tar}.part" "$pause_tar"
  rm -rf "$ctx"
fi
"${ctr_k8s[@]}" images import "$pause_tar" >/dev/null

start kube-apiserver 10 "${K8S_BIN}/kube-apiserver" \
  --etcd-servers="http://${K8S_IP}:${K8S_ETCD_PORT}" \
  --bind-address="${K8S_IP}" --advertise-address="${K8S_IP}" --secure-port="${K8S_APISERVER_PORT}" \
  --service-cluster-ip-range="${K8S_SERVICE_CIDR}" \
  --client-ca-file="${pki}/ca.crt" --tls-cert-file="${pki}/apiserver.crt" --tls-private-key-file="${pki}/apiserver.key" \
  --kubelet-client-certificate="${pki}/apiserver-kubelet-client.crt" \
  --kubelet-client-key="${pki}/apiserver-kubelet-client.key" --kubelet-certificate-authority="${pki}/ca.crt" \
  --kubelet-preferred-address-types=InternalIP \
  --service-account-issuer=https://kubernetes.default.svc --service-account-key-file="${pki}/sa.pub" \
  --service-account-signing-key-file="${pki}/sa.key" \
  --authorization-mode=Node,RBAC --enable-admission-plugins=NodeRestriction --allow-privileged=false \
  `# Endpoints may not be loopback addresses, so the kubernetes Service gets none (no kube-proxy anyway).` \
  --endpoint-reconciler-type=none \
  `# A watch without resourceVersion is served as a watch-list when WatchList is on (1.34's default),` \
  `# which needs etcd's progress notifications: Debian's etcd 3.4.23 lacks them, so every such watch` \
  `# (Spark's executor pod watch) failed with "a watch stream was requested by the client but the` \
  `# required storage feature RequestWatchProgress is disabled".` \
  --feature-gates=WatchList=false \
  --profiling=false
kubectl_=(kubectl --kubeconfig "$K8S_KUBECONFIG")
wait_for kube-apiserver 180 "${kubectl_[@]}" get --raw /readyz

start kube-controller-manager 10 "${K8S_BIN}/kube-controller-manager" \
  --kubeconfig="${pki}/controller-manager.kubeconfig" \
  --authentication-kubeconfig="${pki}/controller-manager.kubeconfig" \
  --authorization-kubeconfig="${pki}/controller-manager.kubeconfig" \
  --bind-address="${K8S_IP}" --secure-port="${K8S_KCM_PORT}" \
  --tls-cert-file="${pki}/kube-controller-manager-serving.crt" \
  --tls-private-key-file="${pki}/kube-controller-manager-serving.key" \
  --service-account-private-key-file="${pki}/sa.key" --root-ca-file="${pki}/ca.crt" \
  --cluster-signing-cert-file="${pki}/ca.crt" --cluster-signing-key-file="${pki}/ca.key" \
  --use-service-account-credentials=true --service-cluster-ip-range="${K8S_SERVICE_CIDR}" \
  --leader-elect=false --profiling=false
start kube-scheduler 10 "${K8S_BIN}/kube-scheduler" \
  --kubeconfig="${pki}/scheduler.kubeconfig" \
  --authentication-kubeconfig="${pki}/scheduler.kubeconfig" --authorization-kubeconfig="${pki}/scheduler.kubeconfig" \
  --bind-address="${K8S_IP}" --secure-port="${K8S_SCHEDULER_PORT}" \
  --tls-cert-file="${pki}/kube-scheduler-serving.crt" --tls-private-key-file="${pki}/kube-scheduler-serving.key" \
  --leader-elect=false --profiling=false

# The kubelet's cgroup in every v1 hierarchy (it refuses a cgroupRoot that does not exist); cpuset
# needs its CPUs and memory nodes copied from the parent before anything can join it.
for h in /sys/fs/cgroup/*/; do
  [[ -d "$h" ]] || continue
  mkdir -p "${h%/}${K8S_CGROUP_ROOT}"
done
if [[ -f /sys/fs/cgroup/cpuset/cpuset.cpus ]]; then
  cat /sys/fs/cgroup/cpuset/cpuset.cpus >"/sys/fs/cgroup/cpuset${K8S_CGROUP_ROOT}/cpuset.cpus"
  cat /sys/fs/cgroup/cpuset/cpuset.mems >"/sys/fs/cgroup/cpuset${K8S_CGROUP_ROOT}/cpuset.mems"
fi
cat >"${K8S_RUN}/kubelet/config.yaml" <<YAML
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: "${K8S_IP}"
port: ${K8S_KUBELET_PORT}
readOnlyPort: 0
healthzBindAddress: "${K8S_IP}"
healthzPort: ${K8S_KUBELET_HEALTHZ_PORT}
tlsCertFile: "${pki}/kubelet-serving.crt"
tlsPrivateKeyFile: "${pki}/kubelet-serving.key"
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: "${pki}/ca.crt"}
authorization: {mode: Webhook}
containerRuntimeEndpoint: "unix://${K8S_CONTAINERD_SOCK}"
cgroupDriver: cgroupfs
cgroupRoot: "${K8S_CGROUP_ROOT}"
# This machine's kernel runs cgroup v1 (hybrid); 1.34 still supports it when told so explicitly.
failCgroupV1: false
failSwapOn: false
podLogsDir: "${K8S_RUN}/pod-logs"
volumePluginDir: "${K8S_RUN}/kubelet/volume-plugins"
clusterDomain: cluster.local
resolvConf: /etc/resolv.conf
rotateCertificates: false
serverTLSBootstrap: false
# A shared build machine: evict only when really short, never garbage-collect the test's images.
evictionHard: {memory.available: "200Mi", nodefs.available: "2%", imagefs.available: "2%", nodefs.inodesFree: "1%"}
imageGCHighThresholdPercent: 99
imageGCLowThresholdPercent: 98
YAML
start kubelet 10 "${K8S_BIN}/kubelet" --config="${K8S_RUN}/kubelet/config.yaml" \
  --kubeconfig="${pki}/kubelet.kubeconfig" --root-dir="${K8S_RUN}/kubelet" --cert-dir="${K8S_RUN}/kubelet/pki" \
  --hostname-override="${K8S_NODE}" --v=1
node_ready() {
  [[ "$("${kubectl_[@]}" get node "$K8S_NODE" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}')" == True ]]
}
wait_for kubelet 180 node_ready
# Namespaced service accounts need the token controller and a default SA before pods can be created.
wait_for kube-controller-manager 120 "${kubectl_[@]}" -n default get serviceaccount default
echo "k8s-up: node ${K8S_NODE} Ready after $(( $(date +%s) - started )) s; export KUBECONFIG=${K8S_KUBECONFIG}" >&2
