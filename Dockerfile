# syntax=docker/dockerfile:1
# migfit: the webhook and the scheduler extender (`migfit webhook`, `migfit extender`).
#   docker build -t registry.example.com/migfit:0.1.0 .   (your registry: README, "Install")
# Stage 1 builds wheels for migfit and every dependency; stage 2 installs them with no
# compiler, no build backend and no pip left behind, and runs as the non-root user 65532
# that deploy/ expects (runAsNonRoot, readOnlyRootFilesystem).
ARG PYTHON_IMAGE=python:3.11-slim

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
# Only what the wheel needs (.dockerignore lists it); the bundled example cluster is package
# data (migfit/data/example-cluster.yaml, a copy of examples/cluster.yaml).
COPY . .
RUN pip wheel --wheel-dir /wheels .

FROM ${PYTHON_IMAGE} AS runtime
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
# Install from the build stage's wheels only (no index), byte-compiled at install time so the
# read-only root filesystem never needs a write; then drop the installers themselves.
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    pip install --no-index --find-links=/wheels migfit \
 && pip uninstall --yes pip setuptools wheel \
 && groupadd --gid 65532 migfit \
 && useradd --uid 65532 --gid 65532 --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin migfit
USER 65532:65532
WORKDIR /tmp
EXPOSE 8443
ENTRYPOINT ["migfit"]
CMD ["--help"]
