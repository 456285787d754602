# The companion in a container, for any machine with Docker or Podman (an Apple Silicon
# Mac included: torch and triton publish Linux aarch64 wheels). Its default command is
# ./check_outputs.sh: on the CPU through the Triton interpreter, or on the GPU with
#   docker run --rm --gpus all chapter17        (needs the NVIDIA Container Toolkit)
#
# Build:  docker build -t chapter17 .     Run:  docker run --rm chapter17
# BASE is any image with python3 (3.10 or newer, with venv), bash, diff and sed; a machine
# that reaches no container registry can pass a locally built one (--build-arg BASE=...).
# REQUIREMENTS is the reader's requirements.txt (torch, triton, numpy); to run the tests in
# the image, pass --build-arg REQUIREMENTS=requirements-dev.txt (tools/container_check.sh --tests).
ARG BASE=python:3.12-slim
FROM ${BASE}
ARG REQUIREMENTS=requirements.txt

WORKDIR /chapter17
# Dependencies first, so that a change to the scripts reuses this layer (several GB: PyPI's
# Linux torch wheel is a CUDA build, and that is what lets --gpus all work; README.md gives
# the measured sizes).
COPY requirements.txt requirements-dev.txt ./
RUN python3 -m venv /opt/venv \
    && PIP_CERT=/etc/ssl/certs/ca-certificates.crt /opt/venv/bin/pip install --no-cache-dir -r "${REQUIREMENTS}"
ENV PATH=/opt/venv/bin:$PATH \
    PYTHON=/opt/venv/bin/python
COPY . .
CMD ["./check_outputs.sh"]
