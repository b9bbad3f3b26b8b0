# envbuilder shared stack image (rendered by envbuilder 0.1.0): the base image, Python, uv, an empty venv
# and torch's stack (nvidia-cublas 13.1.0.3, nvidia-cuda-cupti 13.0.85, nvidia-cuda-nvrtc 13.0.88, nvidia-cuda-runtime 13.0.96, nvidia-cudnn-cu13 9.19.0.56, nvidia-cudnn-frontend 1.23.0, nvidia-cufft 12.0.0.61, nvidia-cufile 1.15.1.6, nvidia-curand 10.4.0.35, nvidia-cusolver 12.0.4.66, nvidia-cusparse 12.6.3.3, nvidia-cusparselt-cu13 0.8.0, nvidia-ml-py 13.595.45, nvidia-nccl-cu13 2.28.9, nvidia-nvjitlink 13.0.88, nvidia-nvshmem-cu13 3.4.5, nvidia-nvtx 13.0.85, torch 2.11.0, triton 3.6.0).
# Every cell whose base, Python and stack pins are these builds FROM envbuilder/stack-py3.11:adc3e4deed52.
# Rebuild by hand from this folder:  docker build --network host -t envbuilder/stack-py3.11:adc3e4deed52 .
FROM envbuilder-test/debian12-python:1
ENV DEBIAN_FRONTEND=noninteractive UV_LINK_MODE=copy UV_PYTHON_DOWNLOADS=never PYTHONDONTWRITEBYTECODE=1
COPY uv /usr/local/bin/uv

# the host's CA bundle (SSL_CERT_FILE), for indexes behind a TLS-intercepting proxy
COPY ca-certificates.crt /opt/envbuilder/ca-certificates.crt
ENV SSL_CERT_FILE=/opt/envbuilder/ca-certificates.crt

RUN command -v python3.11 >/dev/null 2>&1 \
 || (apt-get update && apt-get install -y --no-install-recommends python3.11 python3.11-venv ca-certificates \
     && rm -rf /var/lib/apt/lists/*)
RUN uv venv --python python3.11 /opt/venv

COPY stack.txt /opt/envbuilder/stack.txt
# torch's stack, exact pins, hash-checked, no resolver (uv's cache stays out of the layer)
RUN uv pip install --no-cache --no-deps --require-hashes --python /opt/venv/bin/python -r /opt/envbuilder/stack.txt

LABEL envbuilder.stack="b2cf8c31dec1" envbuilder.version="0.1.0"
