# GraphMend's image: the sandbox the untrusted pull-request code runs in (build FROM it and add
# your model's dependencies), and a runnable CLI:  docker run --rm -v "$PWD:/work" IMAGE graphmend check -C /work
#
# BASE is a PyTorch image: a CUDA one for GPU runners (the default), or any image with
# Python >= 3.10 and torch for offline builds. GraphMend's other dependencies come from PyPI, or,
# with PIP_ARGS="--no-index --no-build-isolation", must already be in the base image:
#   docker build --build-arg BASE=pytorch/pytorch:2.7.1-cuda12.6-cudnn9-runtime -t graphmend .
#   docker build --build-arg BASE=my-local-base:latest --build-arg PIP_ARGS="--no-index --no-build-isolation" .
ARG BASE=pytorch/pytorch:2.7.1-cuda12.6-cudnn9-runtime

# Stage 1: a wheel of GraphMend alone (no dependencies: torch is the base image's own).
FROM ${BASE} AS build
ARG PIP_ARGS=""
WORKDIR /src
COPY pyproject.toml README.md ./
COPY graphmend/ graphmend/
COPY bot/ bot/
COPY action/ action/
# SC2086: PIP_ARGS is a word list and must split.
# hadolint ignore=SC2086
RUN python -m pip wheel --no-cache-dir --no-deps --disable-pip-version-check ${PIP_ARGS} --wheel-dir /wheels .

# Stage 2: the base plus that wheel and its dependencies, run as a non-root user. No source
# tree, no build tools, no credentials: nothing here needs a secret, and none is passed in.
FROM ${BASE}
ARG PIP_ARGS=""
ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PIP_ROOT_USER_ACTION=ignore \
    MPLCONFIGDIR=/tmp/matplotlib
COPY --from=build /wheels/ /tmp/wheels/
# DL3013: the wheel is the one just built, pinned by construction; SC2086: PIP_ARGS is a word list.
# hadolint ignore=DL3013,SC2086
RUN python -m pip install --no-cache-dir --disable-pip-version-check ${PIP_ARGS} /tmp/wheels/*.whl \
 && rm -rf /tmp/wheels \
 && python -c "import graphmend, torch; print('graphmend', graphmend.__version__, 'torch', torch.__version__)" \
 && useradd --create-home --uid 10001 --user-group --shell /bin/sh graphmend
# Numeric, so the runtime (and Kubernetes' runAsNonRoot) can tell it is not root.
USER 10001:10001
WORKDIR /home/graphmend
LABEL org.opencontainers.image.title="graphmend" \
      org.opencontainers.image.description="Find and fix TorchDynamo graph breaks" \
      org.opencontainers.image.licenses="Apache-2.0"
CMD ["graphmend", "--help"]
