#!/usr/bin/env bash
# Stops the local cluster of up.sh and undoes everything it did to the host (`make k8s-down`): every
# process by its recorded pid (and the containerd shims of this containerd, found by its socket), every
# mount under $K8S_RUN, the kubelet's cgroups, the sysctls and iptables chains the kubelet set, and
# finally $K8S_RUN itself. Safe to run twice, or after a failed up.
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
source "${here}/env.sh"
[[ -d "$K8S_RUN" ]] || exit 0

# stop NAME: SIGTERM, then SIGKILL after 20 s.
stop() {
  local pidfile="${K8S_RUN}/pids/$1" pid
  [[ -s "$pidfile" ]] || return 0
  pid="$(cat "$pidfile")"
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null
    for _ in $(seq 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
    kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null
  fi
  rm -f "$pidfile"
}

# The kubelet first, so nothing restarts the containers that are stopped next.
stop kubelet
ctr_k8s=(ctr --address "$K8S_CONTAINERD_SOCK" -n k8s.io)
if [[ -S "$K8S_CONTAINERD_SOCK" ]]; then
  for t in $("${ctr_k8s[@]}" tasks ls -q 2>/dev/null); do
    "${ctr_k8s[@]}" tasks kill -s SIGKILL "$t" >/dev/null 2>&1
  done
  sleep 1
  for t in $("${ctr_k8s[@]}" tasks ls -q 2>/dev/null); do "${ctr_k8s[@]}" tasks delete -f "$t" >/dev/null 2>&1; done
  for c in $("${ctr_k8s[@]}" containers ls -q 2>/dev/null); do "${ctr_k8s[@]}" containers delete "$c" >/dev/null 2>&1; done
fi
for s in kube-scheduler kube-controller-manager kube-apiserver containerd etcd; do stop "$s"; done
# Shims outlive containerd; these are the ones started for this containerd (their -address is our socket).
for p in /proc/[0-9]*; do
  cmd="$( { tr '\0' ' ' <"${p}/cmdline"; } 2>/dev/null)" || continue
  if [[ "$cmd" == *containerd-shim*"-address ${K8S_CONTAINERD_SOCK} "* ]]; then
    kill -KILL "${p#/proc/}" 2>/dev/null
  fi
done

# Mounts under the run directory (secret/configmap tmpfs volumes, rootfs overlays, shm), deepest first.
for _ in 1 2 3; do
  mapfile -t mounts < <(awk -v run="$K8S_RUN" 'index($5, run) == 1 {print $5}' /proc/self/mountinfo | sort -r)
  [[ ${#mounts[@]} -eq 0 ]] && break
  for m in "${mounts[@]}"; do umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null; done
done

# The kubelet's cgroups (pods, QoS classes), deepest first, in every hierarchy.
for h in /sys/fs/cgroup/*/; do
  root="${h%/}${K8S_CGROUP_ROOT}"
  [[ -d "$root" ]] || continue
  find "$root" -depth -type d -exec rmdir {} \; 2>/dev/null
  [[ -d "$root" ]] && echo "k8s-down: could not remove cgroup ${root} (processes left: $(cat "${root}/cgroup.procs" 2>/dev/null | tr '\n' ' '))" >&2
done

# Sysctls the kubelet sets, back to what up.sh recorded.
if [[ -s "${K8S_RUN}/host/sysctl" ]]; then
  while IFS= read -r kv; do sysctl -q -w "$kv" >/dev/null; done <"${K8S_RUN}/host/sysctl"
fi
# iptables chains the kubelet added (KUBE-IPTABLES-HINT, KUBE-KUBELET-CANARY, ...), and jumps to them.
for tool in iptables ip6tables; do
  for t in filter nat mangle; do
    before="${K8S_RUN}/host/${tool}-${t}"
    [[ -f "$before" ]] || continue
    mapfile -t added < <("$tool" -t "$t" -S 2>/dev/null | awk '$1 == "-N" && $2 ~ /^KUBE-/ {print $2}' | grep -vxFf "$before")
    for chain in "${added[@]}"; do
      "$tool" -t "$t" -S 2>/dev/null | awk -v c="$chain" '$1 == "-A" && $0 ~ ("-j " c "( |$)") {$1 = "-D"; print}' |
        while IFS= read -r rule; do eval "$tool -t $t $rule"; done
      "$tool" -t "$t" -F "$chain" 2>/dev/null
      "$tool" -t "$t" -X "$chain" 2>/dev/null
    done
  done
done

if [[ ! -s "${K8S_RUN}/host/run-containerd" && -d /run/containerd ]]; then
  find /run/containerd -depth -type d -empty -delete 2>/dev/null
fi

# The host's state as up.sh found it outlives the run directory for the check below.
K8S_HOST_BEFORE="$(mktemp -d)"
trap 'rm -rf "$K8S_HOST_BEFORE"' EXIT
cp -a "${K8S_RUN}/host/." "$K8S_HOST_BEFORE/" 2>/dev/null
rm -rf "$K8S_RUN" 2>/dev/null || echo "k8s-down: ${K8S_RUN} not fully removed (something still mounted?)" >&2

# What must be gone now, checked rather than assumed: a process of the cluster (its binaries, a shim of
# its containerd, or a container whose root is under the run directory), a mount, a cgroup, an iptables
# chain the kubelet added, the run directory. Any left is named and the exit code is 1.
left=()
for p in /proc/[0-9]*; do
  pid="${p#/proc/}"
  [[ "$pid" == "$$" ]] && continue
  cmd="$( { tr '\0' ' ' <"${p}/cmdline"; } 2>/dev/null)" || continue
  root="$(readlink "${p}/root" 2>/dev/null)" || root=""
  if [[ "$cmd" == *"${K8S_BIN}/"* || "$cmd" == *"${K8S_CONTAINERD_SOCK}"* ||
        "$cmd" == *"--config ${K8S_RUN}/"* || "$cmd" == *"--data-dir ${K8S_RUN}/"* || "$root" == "${K8S_RUN}/"* ]]; then
    left+=("process ${pid}: ${cmd:0:120}")
  fi
done
while read -r m; do left+=("mount ${m}"); done < <(awk -v run="$K8S_RUN" 'index($5, run) == 1 {print $5}' /proc/self/mountinfo)
for h in /sys/fs/cgroup/*/; do [[ -d "${h%/}${K8S_CGROUP_ROOT}" ]] && left+=("cgroup ${h%/}${K8S_CGROUP_ROOT}"); done
for tool in iptables ip6tables; do
  command -v "$tool" >/dev/null || continue
  for t in filter nat mangle; do
    while read -r chain; do
      grep -qxF "$chain" "${K8S_HOST_BEFORE}/${tool}-${t}" 2>/dev/null || left+=("${tool} -t ${t} chain ${chain}")
    done < <("$tool" -t "$t" -S 2>/dev/null | awk '$1 == "-N" && $2 ~ /^KUBE-/ {print $2}')
  done
done
[[ -e "$K8S_RUN" ]] && left+=("directory ${K8S_RUN}")
[[ ! -s "${K8S_HOST_BEFORE}/run-containerd" && -e /run/containerd ]] && left+=("directory /run/containerd")
if [[ ${#left[@]} -gt 0 ]]; then
  printf 'k8s-down: left behind: %s\n' "${left[@]}" >&2
  exit 1
fi
echo "k8s-down: stopped; nothing left (no process, mount, cgroup, KUBE- iptables chain or ${K8S_RUN})" >&2
