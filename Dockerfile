# The Quanta image used by docker-compose.yml: the API+controller and the worker nodes run it.
# CPU build of torch by default. For GPU nodes build with a CUDA build of torch, e.g.
#   docker compose build --build-arg TORCH_INDEX=<the CUDA wheel index of your torch version>
FROM python:3.11-slim

ARG TORCH_SPEC=torch
ARG TORCH_INDEX=
ENV PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /srv/quanta
COPY pyproject.toml README.md ./
COPY app ./app
COPY workers ./workers
COPY examples ./examples
RUN pip install ${TORCH_INDEX:+--index-url "$TORCH_INDEX"} "$TORCH_SPEC" && pip install -e .

RUN useradd --create-home quanta && mkdir -p /checkpoints && chown quanta /checkpoints
USER quanta
