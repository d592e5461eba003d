# syntax=docker/dockerfile:1
# Slim, non-root image of the A2A agent server. Only the runtime lock is installed (no test or
# lint tools), hash-checked, with uvicorn's uvloop event loop.
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
WORKDIR /src
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
COPY requirements-runtime.lock pyproject.toml README.md ./
RUN python -m venv /opt/venv \
 && /opt/venv/bin/pip install --require-hashes -r requirements-runtime.lock
COPY app ./app
COPY agent ./agent
COPY stores ./stores
RUN /opt/venv/bin/pip install --no-deps .

FROM ${PYTHON_IMAGE}
RUN useradd --create-home --uid 10001 agent
COPY --from=build /opt/venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    LITELLM_LOCAL_MODEL_COST_MAP=True \
    A2A_HOST=0.0.0.0 \
    A2A_PORT=8000
# Bound to every interface, the server refuses to start without authentication: run it with
# A2A_API_KEYS (or A2A_JWT_JWKS_URL + A2A_JWT_ISSUER + A2A_JWT_AUDIENCE), or A2A_AUTH=none.
USER 10001
# 50051: gRPC, served only when A2A_GRPC_PORT=50051 is set (the conventional port; any may be).
EXPOSE 8000 50051
HEALTHCHECK --interval=10s --timeout=3s CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/healthz' % os.environ['A2A_PORT'])"]
ENTRYPOINT ["a2a-server"]
