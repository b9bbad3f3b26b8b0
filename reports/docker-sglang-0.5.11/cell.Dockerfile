# envbuilder cell sglang-0.5.11_cu13.0_drv-host_debian12_py3.11 (rendered by envbuilder 0.1.0).
# Rebuild by hand from this folder:  docker build --network host -t envbuilder/sglang-0.5.11_cu13.0_drv-host_debian12_py3.11:0a46a0136d60 .
#
# Layers, most shared first: the stack image (envbuilder/stack-py3.11:adc3e4deed52: base image, Python, uv, a venv and torch's
# stack, shared by every cell with the same pins); the NVIDIA userspace driver (when baked); the other heavy
# wheels, one layer each; the kernel packages (they move with the engine); the cell's lock last.
FROM envbuilder/stack-py3.11:adc3e4deed52


# heavy wheel pyarrow: a layer of its own (name order), reused by cells whose layers so far are the same
RUN printf '%s\n' 'pyarrow==24.0.0 --hash=sha256:14e31a3c9e35f1ab6356c6378f6f72830e6d2d5f1791df3774a7b097d18a6a1e --hash=sha256:85fe721a14dd823aca09127acbb06c3ca723efbd436c004f16bca601b04dcc83' > /tmp/req.txt && uv pip install --no-cache --no-deps --require-hashes --python /opt/venv/bin/python -r /tmp/req.txt && rm /tmp/req.txt

# heavy wheel scipy: a layer of its own (name order), reused by cells whose layers so far are the same
RUN printf '%s\n' 'scipy==1.17.1 --hash=sha256:43af8d1f3bea642559019edfe64e9b11192a8978efbd1539d7bc2aaa23d92de4 --hash=sha256:95d8e012d8cb8816c226aef832200b1d45109ed4464303e997c5b13122b297c0' > /tmp/req.txt && uv pip install --no-cache --no-deps --require-hashes --python /opt/venv/bin/python -r /tmp/req.txt && rm /tmp/req.txt


COPY kernels.txt /opt/envbuilder/kernels.txt
# the kernel packages (flash-attn-4 4.0.0b12, flashinfer-cubin 0.6.8.post1, flashinfer-python 0.6.8.post1, nvidia-cutlass-dsl 4.4.2, nvidia-cutlass-dsl-libs-base 4.4.2, sglang-kernel 0.4.2, xgrammar 0.1.32)
RUN uv pip install --no-cache --no-deps --require-hashes --python /opt/venv/bin/python -r /opt/envbuilder/kernels.txt

COPY pylock.toml /opt/envbuilder/pylock.toml
# hash-checked install of exactly the lock, no resolver at build time
RUN uv pip sync --no-cache --python /opt/venv/bin/python /opt/envbuilder/pylock.toml
ENV PATH=/opt/venv/bin:$PATH VIRTUAL_ENV=/opt/venv
LABEL envbuilder.cell="sglang-0.5.11_cu13.0_drv-host_debian12_py3.11" envbuilder.lock-sha256="d81e87f80616bd7ab48eb6a0ab1a39f7c38a1ae4785513c263a8a124c48c9f75" envbuilder.version="0.1.0"
