# Shared settings of the local one-node cluster (sourced by up.sh, down.sh and the k8s tests' helpers).
# Everything binds to one loopback address; the ports are the usual ones plus the sandbox port shift, so
# several checkouts on one machine keep apart (K8S_IP / K8S_PORT_SHIFT override).
K8S_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
K8S_VERSION="${K8S_VERSION:-v1.34.4}"
K8S_BIN="${K8S_BIN:-${HOME}/.cache/replicator/k8s-${K8S_VERSION}/bin}"
# All state: certificates, etcd data, containerd root/state, kubelet root, logs, pids. `down` removes it.
K8S_RUN="${K8S_RUN:-${K8S_ROOT}/.cache/k8s}"
K8S_IP="${K8S_IP:-127.0.24.1}"
# ClusterIPs are allocated from here but never routed (no kube-proxy: every pod uses hostNetwork). A
# loopback range, so that a connection to one can never leave the machine.
K8S_SERVICE_CIDR="${K8S_SERVICE_CIDR:-127.0.25.0/24}"
K8S_SHIFT="${K8S_PORT_SHIFT:-${REPLICATOR_SANDBOX_PORT_SHIFT:-0}}"
K8S_ETCD_PORT=$((2379 + K8S_SHIFT))
K8S_ETCD_PEER_PORT=$((2380 + K8S_SHIFT))
K8S_APISERVER_PORT=$((6443 + K8S_SHIFT))
K8S_KUBELET_PORT=$((10250 + K8S_SHIFT))
K8S_KUBELET_HEALTHZ_PORT=$((10248 + K8S_SHIFT))
K8S_KCM_PORT=$((10257 + K8S_SHIFT))
K8S_SCHEDULER_PORT=$((10259 + K8S_SHIFT))
# The node is named by its IP: the kubelet refuses a loopback --node-ip ("nodeIP can't be loopback
# address"), but takes an IP given as --hostname-override as the node's InternalIP as it is.
K8S_NODE="${K8S_IP}"
K8S_PAUSE_IMAGE="localhost/replicator-pause:catatonit"
K8S_CONTAINERD_SOCK="${K8S_RUN}/containerd/containerd.sock"
K8S_KUBECONFIG="${K8S_RUN}/pki/admin.kubeconfig"
# The cgroup (every v1 hierarchy) the kubelet puts its pods under; `down` removes it.
K8S_CGROUP_ROOT="/replicator-k8s"
K8S_SERVICES=(etcd containerd kube-apiserver kube-controller-manager kube-scheduler kubelet)
