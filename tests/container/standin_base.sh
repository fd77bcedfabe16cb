#!/usr/bin/env bash
# A stand-in for the official python:3.11-slim-bookworm image, made from Debian's own packages, for
# machines that reach Debian's archive but no image registry. Test environment only: users build
# FROM the official image (the Dockerfile's default PYTHON_IMAGE).
#   standin_base.sh IMAGE CACHE_DIR
# The root filesystem tarball is kept in CACHE_DIR (keyed by the package list) and imported only when
# the engine does not have IMAGE yet, so reruns cost nothing.
set -euo pipefail
image="$1"
cache="$2"
packages="python3,python3-venv,python3-pip,python-is-python3,ca-certificates"
suite=bookworm

if podman image exists "$image"; then
  exit 0
fi
mkdir -p "$cache"
key="$(printf '%s %s' "$suite" "$packages" | sha256sum | cut -c1-12)"
tar="${cache}/standin-${suite}-${key}.tar"
if [ ! -s "$tar" ]; then
  mmdebstrap --quiet --variant=minbase --mode=root --format=tar --include="$packages" "$suite" "${tar}.part"
  mv "${tar}.part" "$tar"
fi
# What the official image sets: a PATH with /usr/local first, a UTF-8 locale, python as the command.
podman import --quiet \
  --change 'ENV PATH=/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'ENV LANG=C.UTF-8' \
  --change 'CMD ["python3"]' \
  "$tar" "$image" >/dev/null
