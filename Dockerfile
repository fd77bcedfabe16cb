# syntax=docker/dockerfile:1
# Container image of the exactly-once Kafka replicator (PySpark Structured Streaming, local master).
#   make image            (or: docker build -t replicator:0.1.0 .)
#   docker run --rm -v "$PWD/config.yaml:/etc/replicator/config.yaml:ro" -p 9400:9400 replicator:0.1.0
# The base image of both stages is a build argument: the official image by default; a mirror of it
# (or a compatible Debian bookworm image with python3, venv and pip) with --build-arg PYTHON_IMAGE=...
ARG PYTHON_IMAGE=python:3.11.14-slim-bookworm
ARG VERSION=0.1.0

# --- builder: wheels of the package and of every dependency (pyspark ships as an sdist), and the
# --- venv installed from those wheels only ----------------------------------------------------
FROM ${PYTHON_IMAGE} AS builder
ARG VERSION
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY replicator ./replicator
# The runtime stage copies /opt/venv (same base, so the same interpreter path) and nothing else: no
# wheel, source or pip cache reaches it. (Not `RUN --mount=from=builder` in the runtime stage: podman
# 4.3 mounts an empty directory there when the builder stage comes from its layer cache.)
RUN pip wheel --wheel-dir /wheels . \
 && python -m venv /opt/venv \
 && /opt/venv/bin/pip install --no-index --find-links /wheels "kafka-replicator==${VERSION}"

# --- runtime ---------------------------------------------------------------------------------
FROM ${PYTHON_IMAGE}
SHELL ["/bin/bash", "-o", "pipefail", "-c"]

# Java 17 for Spark's JVM; procps because Spark's launch scripts call `ps`.
# JAVA_HOME gets an architecture-independent path through a symlink. `apt-get clean` as well as the
# lists: a base without the official image's apt auto-clean would otherwise keep ~130 MB of .debs.
RUN apt-get update \
 && apt-get install -y --no-install-recommends openjdk-17-jre-headless procps \
 && apt-get clean \
 && rm -rf /var/lib/apt/lists/* \
 && ln -s "/usr/lib/jvm/java-17-openjdk-$(dpkg --print-architecture)" /usr/lib/jvm/java-17 \
 && /usr/lib/jvm/java-17/bin/java -version

ENV JAVA_HOME=/usr/lib/jvm/java-17 \
    VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:/usr/lib/jvm/java-17/bin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    PYSPARK_PYTHON=/opt/venv/bin/python \
    PYSPARK_DRIVER_PYTHON=/opt/venv/bin/python \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    SPARK_LOCAL_DIRS=/tmp/spark \
    TMPDIR=/tmp/spark \
    HOME=/home/replicator

COPY --from=builder /opt/venv /opt/venv
RUN replicator --version

COPY deploy/spark/spark_main.py /opt/replicator/spark_main.py
COPY --chmod=0755 deploy/spark/entrypoint.sh /opt/replicator/spark-entrypoint.sh

RUN groupadd --system --gid 10001 replicator \
 && useradd --system --uid 10001 --gid 10001 --home-dir /home/replicator --create-home \
      --shell /usr/sbin/nologin replicator \
 && install -d -o 10001 -g 10001 -m 0750 /tmp/spark /etc/replicator

# Spark's class-data archive (AppCDS) and the zip-free SPARK_HOME its workers start from, recorded
# here because a pod cannot keep them: its root filesystem is read-only and every start is a fresh
# container. Halves the driver JVM's start-up CPU (BENCHMARKS.md); read-only at run time.
ENV REPLICATOR_SPARK_CLASS_CACHE=/opt/replicator/spark-cache
RUN replicator spark-warmup \
 && rm -rf /tmp/spark/* /home/replicator/.cache \
 && chmod -R a+rX /opt/replicator/spark-cache

USER 10001:10001
WORKDIR /tmp/spark
EXPOSE 9400

HEALTHCHECK --interval=30s --timeout=5s --start-period=120s --retries=3 \
  CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/healthz' % os.environ.get('REPLICATOR_METRICS_PORT', '9400'), timeout=4)"]

# Metadata last: REVISION and CREATED change with every build and would otherwise invalidate the
# cached layers after them. PYTHON_IMAGE is declared again to be known in this stage.
ARG PYTHON_IMAGE
ARG VERSION
ARG REVISION=unknown
ARG CREATED=unknown
LABEL org.opencontainers.image.title="replicator" \
      org.opencontainers.image.description="Exactly-once cross-cluster Kafka replication as a PySpark Structured Streaming job" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.created="${CREATED}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.base.name="${PYTHON_IMAGE}"

ENTRYPOINT ["replicator"]
CMD ["run", "--config", "/etc/replicator/config.yaml"]
