#!/usr/bin/env bash
# Restarts one component of the local cluster with the command line up.sh started it with, e.g.
# `deploy/local-cluster/restart.sh kubelet` (the k8s tests restart the kubelet under a running pod).
set -euo pipefail
source "$(dirname "$0")/env.sh"
name="$1"
cmdfile="${K8S_RUN}/cmd/${name}"
[[ -s "$cmdfile" ]] || { echo "restart: ${name} was not started by up.sh (no ${cmdfile})" >&2; exit 1; }
pidfile="${K8S_RUN}/pids/${name}"
if [[ -s "$pidfile" ]] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then
  pid="$(cat "$pidfile")"
  kill -TERM "$pid"
  for _ in $(seq 60); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
  kill -0 "$pid" 2>/dev/null && kill -KILL "$pid"
fi
mapfile -d '' -t cmd <"$cmdfile"
setsid "${cmd[@]}" >>"${K8S_RUN}/logs/${name}.log" 2>&1 </dev/null &
echo $! >"$pidfile"
echo "restart: ${name} pid $(cat "$pidfile")" >&2
