# vllm-sentinel: slim, non-root image.
#   docker build -t vllm-sentinel .
#   docker run -p 8080:8080 -e SENTINEL_API__TOKEN=... vllm-sentinel
# The Fluentd forward port listens on the container's loopback only (unreachable from
# outside) unless you open it, which needs a shared key (the service refuses to start
# otherwise):
#   docker run -p 8080:8080 -p 24224:24224 -e SENTINEL_API__TOKEN=... \
#     -e SENTINEL_SOURCES__FORWARD__HOST=0.0.0.0 -e SENTINEL_SOURCES__FORWARD__SHARED_KEY=... \
#     vllm-sentinel
# Configuration: SENTINEL_* environment variables (nested with "__", see
# deploy/sentinel.example.yaml) and/or a YAML file mounted at /etc/vllm-sentinel/sentinel.yaml
# and passed as `--config /etc/vllm-sentinel/sentinel.yaml` (the container's args).

# Stage 1: the wheel. The build context is an allow-list (.dockerignore): pyproject.toml,
# setup.py, README, service/, rules/, models/, deploy/constraints.txt. The wheel ships rules/ and models/ as the data
# packages vllm_sentinel_data.rules / .models (found with importlib.resources at run time).
# The base image is pinned to an exact release (the interpreter the tests run on); pin its
# digest too where you build (`docker buildx imagetools inspect python:3.11.7-slim-bookworm`
# prints it: FROM python:3.11.7-slim-bookworm@sha256:<digest>).
FROM python:3.11.7-slim-bookworm AS wheel
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
COPY . /src
RUN pip wheel --no-deps -w /dist /src

# Stage 2: the image, the wheel installed into site-packages (no source tree, no scikit-learn:
# training is the [train] extra), its dependencies at the exact versions of
# deploy/constraints.txt (the ones the tests ran against).
FROM python:3.11.7-slim-bookworm

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

COPY --from=wheel /dist /tmp/dist
COPY deploy/constraints.txt /tmp/constraints.txt
RUN pip install -c /tmp/constraints.txt /tmp/dist/vllm_sentinel-*.whl \
 && rm -rf /tmp/dist /tmp/constraints.txt \
 && groupadd --system --gid 10001 sentinel \
 && useradd --system --uid 10001 --gid 10001 --home-dir /var/lib/vllm-sentinel \
            --shell /usr/sbin/nologin sentinel \
 && mkdir -p /var/lib/vllm-sentinel /etc/vllm-sentinel \
 && chown 10001:10001 /var/lib/vllm-sentinel

# Inside a container the API must bind beyond loopback; it then refuses to start without
# SENTINEL_API__TOKEN (or SENTINEL_ALLOW_UNAUTHENTICATED=1). The forward port is not opened
# here: setting its host in the environment would also re-enable it where a config file
# turns it off (sources.forward: null, as in deploy/kubernetes/overlays/replicated). SQLite is the
# single-replica default; several replicas need SENTINEL_STORE__URL=postgresql://...
# The compiled rule database is cached on the volume too (the root filesystem may be
# read-only; without a writable cache it is rebuilt at each start, ~1 s).
ENV SENTINEL_API__HOST=0.0.0.0 \
    SENTINEL_API__PORT=8080 \
    SENTINEL_STORE__URL=sqlite:////var/lib/vllm-sentinel/sentinel.db \
    SENTINEL_CACHE_DIR=/var/lib/vllm-sentinel/cache

USER 10001:10001
WORKDIR /var/lib/vllm-sentinel
VOLUME ["/var/lib/vllm-sentinel"]
# 24224 (forward) answers only once opened with a shared key, see the top of this file
EXPOSE 8080 24224

# No curl in slim images: probe /healthz with the interpreter we already have.
HEALTHCHECK --interval=30s --timeout=5s --start-period=60s --retries=3 \
  CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/healthz' % os.environ.get('SENTINEL_API__PORT', '8080'), timeout=4)"]

ENTRYPOINT ["vllm-sentinel", "serve"]
