#!/usr/bin/env bash
# Builds the replicator image with whatever engine this machine has: docker when its daemon answers,
# else podman, else buildah (`make image`). Extra arguments go to the engine's build command as they
# are, e.g. `--build-arg PYTHON_IMAGE=registry.example/python:3.11.14-slim-bookworm`.
#   IMAGE   tag to build (default replicator:<version in pyproject.toml>)
#   ENGINE  docker | podman | buildah, to choose instead of detecting
set -euo pipefail
cd "$(dirname "$0")/../.."

version="$(sed -n 's/^version = "\(.*\)"$/\1/p' pyproject.toml)"
image="${IMAGE:-replicator:${version}}"
engine="${ENGINE:-}"
if [ -z "$engine" ]; then
  if command -v docker >/dev/null && docker info >/dev/null 2>&1; then engine=docker
  elif command -v podman >/dev/null; then engine=podman
  elif command -v buildah >/dev/null; then engine=buildah
  else
    echo "no container engine found: install docker (with a running daemon), podman or buildah" >&2
    exit 1
  fi
fi

revision="$(git rev-parse HEAD 2>/dev/null || echo unknown)"
args=(--build-arg "VERSION=${version}" --build-arg "REVISION=${revision}"
      --build-arg "CREATED=$(date -u +%Y-%m-%dT%H:%M:%SZ)" -t "$image" -f Dockerfile)
echo "building ${image} with ${engine}" >&2
case "$engine" in
  docker) DOCKER_BUILDKIT=1 docker build "${args[@]}" "$@" . ;;
  # The docker format keeps HEALTHCHECK and SHELL, which the OCI image format has no field for.
  podman) podman build --format docker "${args[@]}" "$@" . ;;
  buildah) buildah bud --format docker "${args[@]}" "$@" . ;;
  *) echo "ENGINE must be docker, podman or buildah, not '${engine}'" >&2; exit 2 ;;
esac
