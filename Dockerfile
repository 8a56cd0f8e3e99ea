# syntax=docker/dockerfile:1
# The Pallas image: one `pallas` program for every part of the product (docs/api.md §2):
#   pallas operator | pallas agent --config FILE | pallas registry | pallas run -f FILE | pallas chat URL
# Build: docker build -t pallas:0.1.0 .
#
# Base image: pinned to an exact Python patch release and Debian release (the same base in both
# stages, so the venv's interpreter path exists in the final stage). The digest pin
# (`python:3.11.17-slim-bookworm@sha256:…`) is added by the release pipeline, which resolves it
# where the registry is reachable; none is written here because none could be verified from
# the machines this file is developed on (they reach no container registry).
# BASE_IMAGE replaces it where no registry is reachable: `make image` (hack/build/image) builds on a
# Debian base it makes from Debian packages (python3, python3-venv, python3-pip,
# python-is-python3), which offers the same `python` and `pip` commands.
ARG BASE_IMAGE=python:3.11.17-slim-bookworm

# --- builder: a wheel of the project, installed with its pinned dependencies into a venv ---------
FROM ${BASE_IMAGE} AS builder

ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_ROOT_USER_ACTION=ignore \
    PYTHONDONTWRITEBYTECODE=1

WORKDIR /src
# Only what the wheel is built from (.dockerignore keeps everything else out of the context).
COPY pyproject.toml README.md ./
COPY requirements/install requirements/build.lock requirements/runtime.lock requirements/
COPY api/ api/
COPY runtime/ runtime/
COPY operator/ operator/
COPY registry/ registry/

# Nothing here is resolved against the package index: requirements/install installs exactly the
# locks (every version pinned, every hash checked, wheels only, --no-deps) and ends with
# `pip check`, so a lock that misses a dependency fails this build, naming it, instead of a pod.
# First the build tools (the pinned pip and the build backend, requirements/build.lock) into a
# venv of their own, which builds the project's wheel without build isolation; then the runtime
# lock and that wheel into the venv the image ships, which has no pip of its own.
RUN python -m venv /opt/build \
    && requirements/install /opt/build/bin/python requirements/build.lock \
    && /opt/build/bin/pip wheel --quiet --no-deps --no-build-isolation --wheel-dir /wheels . \
    && python -m venv --without-pip /opt/pallas \
    && PIP=/opt/build/bin/pip requirements/install /opt/pallas/bin/python requirements/runtime.lock \
        -- /wheels/pallas-*.whl \
    && /opt/pallas/bin/pallas --version

# --- runtime: the venv alone, on the same slim base, as a non-root user --------------------------
FROM ${BASE_IMAGE}
ARG BASE_IMAGE

LABEL org.opencontainers.image.title="pallas" \
      org.opencontainers.image.description="Kubernetes-native platform that runs LLM agents as MCP servers: operator, agent runtime, registry" \
      org.opencontainers.image.version="0.1.0" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.base.name="${BASE_IMAGE}"

# HOME: the numeric user has no passwd entry; /tmp is the one place a pod may make writable.
# fastmcp must not phone home for update checks or print its banner in a pod's log.
ENV PATH="/opt/pallas/bin:${PATH}" \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp \
    FASTMCP_CHECK_FOR_UPDATES=off \
    FASTMCP_SHOW_SERVER_BANNER=false

COPY --from=builder /opt/pallas /opt/pallas

# 65532: the conventional "nonroot" id; numeric, so runAsNonRoot can verify it.
USER 65532:65532
WORKDIR /tmp
# Agents serve on 8000 and the registry on 8080 by default.
EXPOSE 8000 8080

ENTRYPOINT ["pallas"]
CMD ["--help"]
