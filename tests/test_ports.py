"""ports: a server port whose derived ports (per SGLang release) are valid and free."""

from __future__ import annotations

import random
import socket

from envbuilder import ports


def test_grpc_offset_per_release() -> None:
    assert ports.offsets("sglang", "0.5.11", []) == (10000,)
    assert ports.offsets("sglang", "0.5.10", []) == ()
    assert 233 in ports.offsets("sglang", "0.5.11", ["--enable-dp-attention"])
    assert ports.offsets("llama-cpp", "0.3.36", []) == ()


def test_picked_port_leaves_derived_ports_valid_and_free() -> None:
    rng = random.Random(7)
    for _ in range(50):
        p = ports.pick("127.0.0.1", (10000,), rng=rng)
        assert 1 <= p + 10000 <= 65535
    with socket.socket() as taken:  # a port whose derived port is taken is not picked
        taken.bind(("127.0.0.1", 0))
        busy = taken.getsockname()[1]
        taken.listen()
        if busy - 10000 >= ports.LOW:
            picks = {ports.pick("127.0.0.1", (10000,), rng=random.Random(i)) for i in range(30)}
            assert busy - 10000 not in picks and busy not in picks


def test_env_failures_are_recognised() -> None:
    assert ports.is_env_failure("ValueError: SGLANG_GRPC_PORT (68941) must be between 1 and 65535")
    assert ports.is_env_failure("OSError: [Errno 98] Address already in use")
    assert not ports.is_env_failure("ValueError: not compatible with radix cache")
