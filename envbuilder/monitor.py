"""The launch monitor: knows within a second when a server is ready or why it died.

Event-driven: the runner's reader threads put every log line and the process exit on a queue; the
monitor waits on that queue (never sleeps for seconds), matches milestones and failure patterns as
lines arrive, and decides:

* ready — the engine's ready line (or HTTP readiness) **and** a real generation answered;
* failed — the process exited, or a fatal line appeared: classified from the log as ``oom``,
  ``graph-capture-failed``, ``import-error``, ``bad-flag``, ``bad-config`` or ``crash``;
* ``stall`` — no new log line for the phase's limit (phases that may print nothing, like CUDA-graph
  capture, get four times as long); ``startup-timeout`` — the overall limit.
"""

from __future__ import annotations

import datetime
import queue
import re
import signal
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from envbuilder.engines import EngineSpec, milestone_name
from envbuilder.redact import redact
from envbuilder.results import Reason, Status

_TS = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)(?:\s+[^\]]*)?\]")
_RANK = re.compile(r"^\[[^\]]*\b(TP|DP|PP|EP)(\d+)\]")


@dataclass(frozen=True, kw_only=True)
class LogLine:
    text: str
    t: float  # monotonic receive time


@dataclass(frozen=True, kw_only=True)
class Exited:
    code: int
    t: float


Event = LogLine | Exited


@dataclass(frozen=True, kw_only=True)
class MilestoneHit:
    name: str
    t: float  # receive time, seconds after launch
    log_time: str | None  # the engine's own timestamp, when the line has one
    values: dict[str, str] = field(default_factory=dict)
    rank: str | None = None


@dataclass(frozen=True, kw_only=True)
class LaunchOutcome:
    """How a start ended; JSON-serialisable through :meth:`to_json`."""

    status: Status
    reason: Reason
    message: str
    ready_s: float | None = None
    exit_code: int | None = None
    phases: dict[str, float] = field(default_factory=dict)
    milestones: tuple[MilestoneHit, ...] = ()
    reaction_s: float | None = None  # from the deciding event to the decision
    failed_rank: str | None = None

    @property
    def kv_tokens(self) -> int | None:
        """KV-cache tokens the engine allocated (``#tokens:``), else its ``max_total_num_tokens``."""
        for name, keys in (("kv_cache", ("tokens",)), ("max_tokens", ("tokens", "max_total_num_tokens"))):
            for h in self.milestones:
                if h.name == name and (v := next((h.values[k] for k in keys if k in h.values), None)):
                    try:
                        return int(v)
                    except ValueError:
                        continue
        return None

    @property
    def ready(self) -> bool:
        return self.status is Status.PASS

    def to_json(self) -> dict[str, Any]:
        return {
            "status": self.status.value, "reason": self.reason.value, "message": self.message,
            "ready_s": None if self.ready_s is None else round(self.ready_s, 3), "exit_code": self.exit_code,
            "phases": {k: round(v, 3) for k, v in self.phases.items()},
            "milestones": [{"name": m.name, "t": round(m.t, 3), "log_time": m.log_time, **m.values}
                           for m in self.milestones],
            "reaction_s": None if self.reaction_s is None else round(self.reaction_s, 4),
            "failed_rank": self.failed_rank, "kv_tokens": self.kv_tokens,
        }  # fmt: skip


# --------------------------------------------------------------------------------------------
# Classification (pure: used live and by the replay tests)
# --------------------------------------------------------------------------------------------


def signal_name(code: int) -> str:
    try:
        return f"{signal.Signals(-code).name} ({code})"
    except ValueError:
        return str(code)


def last_traceback(lines: Sequence[str]) -> tuple[list[str], str | None]:
    """The last Python traceback in the log: (its lines, its final ``Error: message`` line)."""
    start = None
    for i, ln in enumerate(lines):
        if "Traceback (most recent call last):" in ln:
            start = i
    if start is None:
        return [], None
    block = list(lines[start:])
    final = None
    for ln in block[1:]:
        s = ln.strip()
        if (re.match(r"^[A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt|Warning)\b.*", s) or re.match(
            r"^[A-Za-z_][\w.]*: ", s
        )) and not s.startswith("File "):
            final = s
            break
    return block, final


def classify(lines: Sequence[str], exit_code: int | None, spec: EngineSpec) -> tuple[Reason, str, str | None]:
    """(reason, one-sentence message, failing rank) for a start that did not become ready."""
    text = "\n".join(lines)
    tb, final = last_traceback(lines)
    tb_text = "\n".join(tb)
    rank = None
    for ln in lines:
        if (any(f.pattern.search(ln) for f in spec.failures) or "Traceback" in ln) and (m := _RANK.search(ln)):
            rank = f"{m.group(1)}{m.group(2)}"
            break
    how = "" if exit_code is None else (
        f"; exited with {exit_code}" if exit_code >= 0 else f"; killed by {signal_name(exit_code)}")
    for f in spec.failures:
        if f.reason in ("oom", "graph-capture-failed") and f.pattern.search(text):
            hit = next((ln.strip() for ln in reversed(lines) if f.pattern.search(ln)), "")
            line = final if final and f.pattern.search(final) else hit
            return Reason(f.reason), _clip(_strip_ts(line)) + how, rank
    if exit_code == 2 and re.search(r"error: (unrecognized arguments|argument |ambiguous option|the following arguments)",
                                    text):  # fmt: skip
        err = next(ln for ln in reversed(lines) if "error: " in ln)
        return Reason.BAD_FLAG, _clip(err.strip()), rank
    if tb and final:
        if "_get_module_details" in tb_text or final.startswith(("ModuleNotFoundError", "ImportError")):
            return Reason.IMPORT_ERROR, _clip(final) + how, rank
        if re.search(r"server_args\.py\", line \d+, in (__post_init__|check_server_args|_handle)", tb_text):
            return Reason.BAD_CONFIG, _clip(final) + how, rank
        return Reason.CRASH, _clip(final) + how, rank
    fatal = next((ln for ln in lines if any(f.fatal and f.pattern.search(ln) for f in spec.failures)), None)
    if fatal:
        return Reason.CRASH, _clip(_strip_ts(fatal)) + how, rank
    tail = next((ln.strip() for ln in reversed(lines) if ln.strip()), "no output")
    if exit_code is not None and exit_code < 0:
        return Reason.CRASH, f"killed by {signal_name(exit_code)}; last line: {_clip(tail)}", rank
    return Reason.CRASH, f"exited with {exit_code}; last line: {_clip(tail)}", rank


def _strip_ts(line: str) -> str:
    return _TS.sub("", line).strip()


def _clip(s: str, n: int = 300) -> str:
    return s if len(s) <= n else s[: n - 1] + "…"


def phase_timings(hits: Sequence[MilestoneHit], ready_t: float | None) -> dict[str, float]:
    """Where the start-up time went: imports, weights, KV allocation, graph capture, compile, warm-up.

    Durations the engine printed (``elapsed=…``) win; otherwise the engine's own log timestamps;
    otherwise receive times.
    """
    first: dict[str, MilestoneHit] = {}
    for h in hits:
        first.setdefault(h.name, h)

    def at(name: str) -> float | None:
        h = first.get(name)
        if h is None:
            return None
        if h.log_time and t0_log is not None:
            return (_parse_ts(h.log_time) - t0_log).total_seconds()
        return h.t

    stamped = [h for h in hits if h.log_time]
    t0_log = _parse_ts(stamped[0].log_time) if stamped and stamped[0].log_time else None
    out: dict[str, float] = {}
    lw = at("load_weight_begin")
    if lw is not None:
        out["imports"] = lw
    if "load_weight_end" in first and "elapsed" in first["load_weight_end"].values:
        out["weights"] = float(first["load_weight_end"].values["elapsed"])
    elif lw is not None and (we := at("load_weight_end")) is not None:
        out["weights"] = we - lw
    we = at("load_weight_end")
    kv = at("kv_cache")
    gc = at("graph_capture_end")
    if we is not None and kv is not None and (gc is None or kv <= gc):  # 0.5.18+ sizes KV after graph capture
        out["kv_alloc"] = max(0.0, kv - we)
    for begin, end, name in (("graph_capture_begin", "graph_capture_end", "graph_capture"),
                             ("draft_graph_capture_begin", "draft_graph_capture_end", "draft_graph_capture"),
                             ("prefill_graph_capture_begin", "prefill_graph_capture_end", "prefill_graph_capture"),
                             ("draft_prefill_graph_capture_begin", "draft_prefill_graph_capture_end",
                              "draft_prefill_graph_capture"),
                             ("piecewise_begin", "piecewise_end", "piecewise_compile")):  # fmt: skip
        if end in first and "elapsed" in first[end].values:
            out[name] = float(first[end].values["elapsed"])
        elif (b := at(begin)) is not None and (e := at(end)) is not None:
            out[name] = e - b
    up = at("http_up")
    ready = at("ready")
    if up is not None and ready is not None:
        out["warmup"] = max(0.0, ready - up)
    if "first_log" in first and first["first_log"].log_time and "ready" in first and first["ready"].log_time:
        out["logged_span"] = (_parse_ts(first["ready"].log_time) - _parse_ts(first["first_log"].log_time)).total_seconds()
    if ready_t is not None:
        out["total"] = ready_t
    return out


def _parse_ts(s: str | None) -> datetime.datetime:
    return datetime.datetime.strptime(s or "", "%Y-%m-%d %H:%M:%S")


# --------------------------------------------------------------------------------------------
# The live loop
# --------------------------------------------------------------------------------------------


@dataclass(kw_only=True)
class WatchLimits:
    startup_timeout_s: float = 1800.0
    stall_timeout_s: float = 300.0
    slow_phase_factor: float = 4.0
    fatal_grace_s: float = 0.5  # after a fatal line, collect the traceback's tail this long
    ready_retry_s: float = 0.25


def watch(
    events: queue.Queue[Event],
    spec: EngineSpec,
    *,
    log: IO[str] | None = None,
    echo: Callable[[str], None] | None = None,
    ready_check: Callable[[], str | None],
    http_only: bool = False,
    limits: WatchLimits | None = None,
    t_start: float | None = None,
    sink: list[str] | None = None,
) -> LaunchOutcome:
    """Consume start-up events until the server is ready or has failed; never tears down itself.

    ``ready_check`` sends a real generation and returns None on success or why it failed.
    ``http_only`` (external servers with no log) polls ``ready_check`` instead of waiting for a line.
    """
    lim = limits or WatchLimits()
    t0 = time.monotonic() if t_start is None else t_start
    lines: list[str] = [] if sink is None else sink
    hits: list[MilestoneHit] = []
    last_progress = t0
    slow = False
    ready_seen = http_only
    next_ready_try = t0
    fatal_at: float | None = None
    last_ready_error = "not tried"

    def outcome(status: Status, reason: Reason, message: str, *, exit_code: int | None = None,
                decided_from: float | None = None, rank: str | None = None) -> LaunchOutcome:  # fmt: skip
        now = time.monotonic()
        ready_s = now - t0 if status is Status.PASS else None
        if status is Status.PASS:
            hits.append(MilestoneHit(name="ready_checked", t=now - t0, log_time=None))
        return LaunchOutcome(status=status, reason=reason, message=message, ready_s=ready_s, exit_code=exit_code,
                             phases=phase_timings(hits, ready_s), milestones=tuple(hits),
                             reaction_s=None if decided_from is None else now - decided_from,
                             failed_rank=rank)  # fmt: skip

    while True:
        now = time.monotonic()
        wait = 0.05 if (ready_seen or fatal_at) else 0.2
        try:
            ev: Event | None = events.get(timeout=wait)
        except queue.Empty:
            ev = None
        now = time.monotonic()
        if isinstance(ev, LogLine):
            lines.append(ev.text)
            last_progress = ev.t
            if log is not None:
                log.write(redact(ev.text) + "\n")
                log.flush()
            if echo is not None:
                echo(ev.text)
            ts = _TS.match(ev.text)
            rank_m = _RANK.search(ev.text)
            if ts and not any(h.name == "first_log" for h in hits):  # the engine's clock starts here
                hits.append(MilestoneHit(name="first_log", t=ev.t - t0, log_time=ts.group(1)))
            for ms in spec.milestones:
                rank_name = f"{rank_m.group(1)}{rank_m.group(2)}" if rank_m else None
                if not (m := ms.search(ev.text)):
                    continue
                name = milestone_name(ms.name, ev.text)
                if any(h.name == name and h.rank == rank_name for h in hits):
                    continue  # the first occurrence per rank marks the milestone
                hits.append(MilestoneHit(name=name, t=ev.t - t0, log_time=ts.group(1) if ts else None,
                                         values={k: v for k, v in m.groupdict().items() if v is not None},
                                         rank=rank_name))  # fmt: skip
                slow = ms.slow
            if any(p.search(ev.text) for p in spec.ready):
                ready_seen = True
                hits.append(MilestoneHit(name="ready", t=ev.t - t0, log_time=ts.group(1) if ts else None))
                next_ready_try = now
            if fatal_at is None and any(f.fatal and f.pattern.search(ev.text) for f in spec.failures):
                fatal_at = ev.t
        elif isinstance(ev, Exited):
            while True:  # drain what the readers still hold
                try:
                    rest = events.get_nowait()
                except queue.Empty:
                    break
                if isinstance(rest, LogLine):
                    lines.append(rest.text)
                    if log is not None:
                        log.write(redact(rest.text) + "\n")
            reason, msg, rank = classify(lines, ev.code, spec)
            return outcome(Status.FAIL, reason, msg, exit_code=ev.code, decided_from=ev.t, rank=rank)
        if fatal_at is not None and now - fatal_at >= lim.fatal_grace_s:
            reason, msg, rank = classify(lines, None, spec)
            return outcome(Status.FAIL, reason, msg, decided_from=fatal_at, rank=rank)
        if ready_seen and now >= next_ready_try:
            err = ready_check()
            if err is None:
                decided = next((h.t + t0 for h in reversed(hits) if h.name == "ready"), now)
                return outcome(Status.PASS, Reason.OK, "ready", decided_from=decided)
            last_ready_error = err
            next_ready_try = time.monotonic() + lim.ready_retry_s
        if now - t0 > lim.startup_timeout_s:
            extra = f"; the last readiness probe said: {last_ready_error}" if ready_seen else ""
            return outcome(Status.FAIL, Reason.STARTUP_TIMEOUT,
                           f"not ready after {lim.startup_timeout_s:.0f} s{extra}")  # fmt: skip
        limit = lim.stall_timeout_s * (lim.slow_phase_factor if slow else 1.0)
        if not http_only and not ready_seen and now - last_progress > limit:
            phase = hits[-1].name if hits else "start"
            return outcome(Status.FAIL, Reason.STALL,
                           f"no log output for {now - last_progress:.0f} s after milestone '{phase}' "
                           f"(limit {limit:.0f} s)")  # fmt: skip


def replay_events(lines: Sequence[str], exit_code: int | None) -> queue.Queue[Event]:
    """A queue pre-filled from a recorded log (for offline classification)."""
    q: queue.Queue[Event] = queue.Queue()
    t = time.monotonic()
    for ln in lines:
        q.put(LogLine(text=ln, t=t))
    if exit_code is not None:
        q.put(Exited(code=exit_code, t=t))
    return q


def read_log(path: Path) -> list[str]:
    return path.read_text(errors="replace").splitlines()
