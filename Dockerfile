# syntax=docker/dockerfile:1
# The harnessx image named by deploy/kubernetes (ghcr.io/example/harnessx:0.1.0):
# harness-worker (the default command), harness-supervisor and harnessx, with the PostgreSQL
# and Temporal extras (the same image runs the pool's workers and, with HARNESSX_TEMPORAL or
# `harness-worker --temporal`, Temporal workers: deploy/kubernetes/temporal), in a virtual
# environment at /opt/harnessx, running as uid 10001.
#
#   docker build -t ghcr.io/example/harnessx:0.1.0 .
#
# Your agents go into an image built FROM this one:
#   FROM ghcr.io/example/harnessx:0.1.0
#   COPY --chown=10001:10001 dist/myapp-*.whl /tmp/
#   RUN /opt/harnessx/bin/pip install --no-cache-dir /tmp/myapp-*.whl

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# ---------------------------------------------------------------- build
FROM ${PYTHON_IMAGE} AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PYTHONDONTWRITEBYTECODE=1
RUN python -m venv /opt/harnessx
WORKDIR /src
# Only what the package build reads (see .dockerignore for the rest).
COPY pyproject.toml README.md ./
COPY harnessx ./harnessx
COPY harness_workers ./harness_workers
COPY supervisor ./supervisor
# The build fails here if either binding could not load in the image.
RUN /opt/harnessx/bin/pip install --no-cache-dir ".[postgres,temporal]" \
    && /opt/harnessx/bin/harness-worker --help >/dev/null \
    && /opt/harnessx/bin/harness-supervisor --help >/dev/null \
    && /opt/harnessx/bin/python -c "import asyncpg, harnessx.store; harnessx.store.PostgresBackend" \
    && /opt/harnessx/bin/python -c "import temporalio.worker, redis.asyncio, harnessx.temporal._cli"

# -------------------------------------------------------------- runtime
FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="harnessx" \
      org.opencontainers.image.description="Durable LLM-agent runs: harness-worker, harness-supervisor, harnessx" \
      org.opencontainers.image.version="0.1.0" \
      org.opencontainers.image.licenses="Apache-2.0"
RUN groupadd --system --gid 10001 harnessx \
    && useradd --system --uid 10001 --gid 10001 --home-dir /var/lib/harnessx --create-home \
       --shell /usr/sbin/nologin harnessx
COPY --from=build /opt/harnessx /opt/harnessx
COPY docs/operations.md /opt/harnessx/share/doc/operations.md
# No .pyc writes (the root filesystem is read-only in Kubernetes), unbuffered JSON logs,
# metrics on every interface of the container.
ENV PATH=/opt/harnessx/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HARNESSX_LOG_FORMAT=json \
    HARNESSX_METRICS_ADDR=0.0.0.0:9464
WORKDIR /var/lib/harnessx
USER 10001:10001
# 9464: harness-worker; 9465: harness-supervisor (both /metrics, /healthz, /readyz).
EXPOSE 9464 9465
# SIGTERM drains the worker (runs handed back at their next boundary); allow at least
# HARNESSX_DRAIN_TIMEOUT (60 s) before a SIGKILL, e.g. `docker stop -t 90`.
STOPSIGNAL SIGTERM
CMD ["harness-worker"]
