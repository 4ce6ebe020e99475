# The grader image: CPU-only PyTorch + the `grader` package, run by `grader grade --backend docker`
# (grader/backends/docker.py) or by hand: `docker run --rm -v "$PWD:/submission:ro" grader:local grade /submission`.
#
# Written for both the legacy builder and BuildKit (no RUN --mount), because Debian's docker.io has no buildx.
# scripts/build-image.sh picks the build arguments; a plain `docker build -t grader:local .` uses the defaults.
#
# Build arguments:
#   BASE_IMAGE       any Debian-like image with python3 (>= 3.10) and the venv module
#   TORCH_INDEX_URL  where torch comes from (PyTorch's CPU index, so no CUDA wheels)
#   TORCH_SPEC       the torch requirement
#   TORCH_WHEEL_DIR  optional: a wheel directory inside build/docker/ of the context; when set, torch is taken
#                    from it (--find-links) and its dependencies from the default index, never from TORCH_INDEX_URL
#   CA_BUNDLE        optional: a CA bundle inside build/docker/ of the context, trusted by pip during the build
#                    only (for TLS-intercepting proxies); it stays in the build stage, never in the final image
ARG BASE_IMAGE=python:3.11-slim

# The torch venv: the only stage that sees the staged wheels and CA bundle, and the big layer every later
# build reuses.
FROM ${BASE_IMAGE} AS torch
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
ARG TORCH_SPEC=torch==2.13.0
ARG TORCH_WHEEL_DIR=
ARG CA_BUNDLE=
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 PIP_DEFAULT_TIMEOUT=120
# build/docker/ holds what scripts/build-image.sh stages (wheels, CA bundle); it may be absent. The empty,
# never-changing grader/py.typed is listed only so the legacy builder accepts a wildcard that matches nothing.
COPY grader/py.typed build/docke[r] /opt/build-extra/
# numpy is there only because torch warns "Failed to initialize NumPy" on every import without it.
# pip-env.sh carries the CA settings to every pip step of this stage and the next.
RUN set -eu; \
    : > /opt/build-extra/pip-env.sh; \
    if [ -n "$CA_BUNDLE" ]; then \
        ca="/opt/build-extra/${CA_BUNDLE#build/docker/}"; \
        [ -f "$ca" ] || { echo "CA_BUNDLE=$CA_BUNDLE: not found; it must lie inside build/docker/" >&2; exit 1; }; \
        echo "export PIP_CERT=$ca REQUESTS_CA_BUNDLE=$ca SSL_CERT_FILE=$ca" > /opt/build-extra/pip-env.sh; \
    fi; \
    . /opt/build-extra/pip-env.sh; \
    python3 -m venv /opt/grader-venv; \
    if [ -n "$TORCH_WHEEL_DIR" ]; then \
        wheels="/opt/build-extra/${TORCH_WHEEL_DIR#build/docker/}"; \
        ls "$wheels"/torch-*.whl >/dev/null || { echo "TORCH_WHEEL_DIR=$TORCH_WHEEL_DIR: no torch wheel (it must lie inside build/docker/)" >&2; exit 1; }; \
        /opt/grader-venv/bin/pip install --find-links "$wheels" "$TORCH_SPEC" numpy; \
    else \
        /opt/grader-venv/bin/pip install --index-url "$TORCH_INDEX_URL" "$TORCH_SPEC" numpy; \
    fi; \
    /opt/grader-venv/bin/python -c "import torch; assert not torch.cuda.is_available(); print('torch', torch.__version__)"
# The grader and its other dependencies go to an overlay (same layout as the venv) rather than into the venv,
# so that the final image copies the torch venv from a cached layer and only the small overlay changes.
FROM torch AS grader
COPY pyproject.toml README.m[d] /opt/src/
COPY grader /opt/src/grader
# The rubrics live beside the package; pyproject.toml ships them inside it as grader.rubrics.
COPY rubrics /opt/src/rubrics
RUN . /opt/build-extra/pip-env.sh && /opt/grader-venv/bin/pip install --prefix /opt/overlay /opt/src

FROM ${BASE_IMAGE}
# libseccomp2: the ranks' seccomp filter (pyseccomp binds it).  No git: submitted repositories are read as data
# (dulwich).  A fixed uid for a plain `docker run`; the ranks of a grading get numeric uids of their own.
RUN set -eu; \
    apt-get update; \
    apt-get install -y --no-install-recommends libseccomp2; \
    rm -rf /var/lib/apt/lists/*; \
    groupadd --gid 10001 grader && useradd --uid 10001 --gid 10001 --no-create-home --home-dir /work --shell /usr/sbin/nologin grader
COPY --from=torch /opt/grader-venv /opt/grader-venv
COPY --from=grader /opt/overlay/ /opt/grader-venv/
ENV PATH=/opt/grader-venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    GLOO_SOCKET_IFNAME=lo
RUN grader --version && python -c "import torch, grader.pipeline, pyseccomp; pyseccomp.SyscallFilter(pyseccomp.ALLOW)"
WORKDIR /work
USER grader
ENTRYPOINT ["grader"]
CMD ["--help"]
