"""The uv binary that ships with the ``uv`` package (found once: ``find_uv_bin`` is not thread-safe)."""

from __future__ import annotations

import threading
from functools import cache

_LOCK = threading.Lock()


@cache
def _find() -> str:
    from uv import find_uv_bin

    return str(find_uv_bin())


def uv_bin() -> str:
    """Path of uv. Safe to call from the resolver's worker threads."""
    with _LOCK:
        return _find()
