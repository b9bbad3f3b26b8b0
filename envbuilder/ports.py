"""Ports that survive the engine: a server port whose derived ports (per engine release) are valid and free,
and the launch failures that come from envbuilder's own choice of port rather than from the cell.

SGLang 0.5.11 derives ``grpc_port = --port + 10000`` and refuses to start when that exceeds 65535
(``ValueError: SGLANG_GRPC_PORT (68941) must be between 1 and 65535``); with ``--enable-dp-attention`` it also
binds ``--port + 233 … + 238``. The offsets per release are in ``rules/sglang_memory.toml`` ``[ports]``.
"""

from __future__ import annotations

import random
import re
import socket
from collections.abc import Sequence

from envbuilder import engines, launchargs, memory

LOW, HIGH = 20000, 65535
# a failed start caused by the port envbuilder picked, not by the cell: retry on another port
ENV_FAILURE = re.compile(r"SGLANG_GRPC_PORT \(\d+\) must be between 1 and 65535|[Aa]ddress already in use|"
                         r"Port \d+ is (?:already )?in use|port \d+ is not available|EADDRINUSE|"
                         r"Can't assign requested address.*port")  # fmt: skip


def offsets(engine: str, version: str | None, args: Sequence[str]) -> tuple[int, ...]:
    """The ports ``engine`` at ``version`` derives from its ``--port`` for this launch, as offsets."""
    if not engines.engine(engine).sglang_rules:
        return ()
    table = memory.rules().get("ports", {})
    if not table:
        return ()
    row = table[launchargs.pick_release(table, version)]
    out = [int(o) for o in row.get("offsets", [])]
    if any(a.split("=", 1)[0] in ("--enable-dp-attention", "--enable-dp-attn") for a in args):
        out += [int(o) for o in row.get("dp_attention_offsets", [])]
    return tuple(out)


def bindable(host: str, port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def pick(host: str, derived: Sequence[int] = (), *, avoid: Sequence[int] = (), rng: random.Random | None = None) -> int:
    """A free port whose derived ports (``port + offset``) are all within 1..65535 and free too."""
    rng = rng or random.Random()
    top = HIGH - max(derived, default=0)
    for _ in range(200):
        port = rng.randint(LOW, top)
        if port in avoid:
            continue
        if bindable(host, port) and all(bindable(host, port + d) for d in derived):
            return port
    raise OSError(f"no free port in {LOW}..{top} with free ports at offsets {list(derived)}")


def is_env_failure(message: str) -> bool:
    """Whether a failed start was caused by the port envbuilder chose (another port would start)."""
    return bool(ENV_FAILURE.search(message))
