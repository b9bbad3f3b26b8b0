"""The smoke checks, run against one started server: golden prompts, degeneracy, speculative decoding
(acceptance and losslessness), speed, long context. Each check is its own stage entry (``smoke.golden``,
``smoke.spec``, …) with a reason slug and its numbers; ``smoke`` is the worst of them.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, Protocol

import requests

from envbuilder import engines
from envbuilder.checks import degeneracy, engine_facts, golden
from envbuilder.client import EngineClient
from envbuilder.monitor import LaunchOutcome
from envbuilder.pipeline import RunContext
from envbuilder.results import Reason, StageResult, Status


class Server(Protocol):
    """A started server as the checks see it (the smoke stage starts it)."""

    @property
    def outcome(self) -> LaunchOutcome: ...

    @property
    def client(self) -> EngineClient: ...

    @property
    def argv(self) -> list[str]: ...


# Starts the cell's server once more without speculation (the reference of ``smoke.spec``); the smoke stage owns it
# and calls it only after the first server has stopped (two servers never hold the GPUs at once).
StartReference = Callable[[], AbstractContextManager[Server]]

# flags that turn speculative decoding on, per engine; the losslessness reference launches without them
SPEC_FLAGS = {e.name: e.spec_flags for e in engines.ENGINES.values()}


_PRIORITY = [Reason.DEGENERATE, Reason.SPEC_LOSSY, Reason.GOLDEN_MISMATCH, Reason.LONG_CONTEXT_MISS,
             Reason.SPEC_LOW_ACCEPTANCE, Reason.PERF_REGRESSION]  # fmt: skip


@dataclass
class Collected:
    """Texts generated during the run; the degeneracy check judges all of them."""

    texts: list[dict[str, Any]] = field(default_factory=list)

    def add(self, source: str, text: str, finish_reason: str | None = None) -> None:
        self.texts.append({"id": source, "text": text, "finish_reason": finish_reason})


def _result(name: str, status: Status, reason: Reason, message: str, **numbers: Any) -> StageResult:
    return StageResult(name=f"smoke.{name}", status=status, reason=reason, message=message, details=numbers)


def check_golden(ctx: RunContext, client: EngineClient, col: Collected) -> StageResult:
    ps = golden.load_prompt_set(ctx.matrix.smoke.golden, ctx.matrix.path.parent)
    t = time.monotonic()
    answers = golden.ask_all(client, ps, seed=ctx.matrix.smoke.seed, engine=engines.engine(ctx.matrix.server.engine))
    rows: list[dict[str, Any]] = []
    for a in answers:
        text = a.completion.text if a.completion else None
        if a.completion:
            col.add(f"golden:{a.prompt.id}", a.completion.text, a.completion.finish_reason)
        rows.append({"id": a.prompt.id, "prompt": a.prompt.prompt, "expect": a.prompt.expect, "got": text,
                     "misses": list(a.misses), "error": a.error,
                     "seconds": round(a.completion.seconds, 3) if a.completion else None})  # fmt: skip
    bad = [r for r in rows if r["misses"] or r["error"]]
    nums = {"prompt_set": ps.source, "prompts": rows, "passed": len(rows) - len(bad), "total": len(rows),
            "seconds": round(time.monotonic() - t, 3)}  # fmt: skip
    if bad:
        b = bad[0]
        why = b["error"] or "; ".join(str(x) for x in b["misses"])
        return _result("golden", Status.FAIL, Reason.GOLDEN_MISMATCH,
                       f"{len(bad)}/{len(rows)} golden prompts missed; first: {b['id']!r} {why}; got {b['got']!r}",
                       **nums)  # fmt: skip
    return _result("golden", Status.PASS, Reason.OK, f"{len(rows)}/{len(rows)} golden prompts answered", **nums)


def check_degeneracy(ctx: RunContext, client: EngineClient, col: Collected) -> StageResult:
    if not col.texts:  # selected alone: generate from the golden prompts
        ps = golden.load_prompt_set(ctx.matrix.smoke.golden, ctx.matrix.path.parent)
        for a in golden.ask_all(client, ps, seed=ctx.matrix.smoke.seed, engine=engines.engine(ctx.matrix.server.engine)):
            if a.completion:
                col.add(f"golden:{a.prompt.id}", a.completion.text, a.completion.finish_reason)
    verdicts: list[dict[str, Any]] = []
    for item in col.texts:
        v = degeneracy.detect(item["text"], finish_reason=item["finish_reason"])
        # findings: character spans into the text (kept up to 2000 characters) for the report to highlight
        findings = [{"signal": f.signal, "start": f.start, "end": f.end, "detail": f.detail, "strong": f.strong}
                    for f in v.findings]  # fmt: skip
        verdicts.append({"id": item["id"], "verdict": v.label, "signals": list(v.signals), "numbers": v.numbers,
                         "findings": findings, "turned_at": v.turned_at, "text": item["text"][:2000]})  # fmt: skip
    bad = [v for v in verdicts if v["verdict"] == "degenerate"]
    nums = {"texts": verdicts, "degenerate": len(bad), "total": len(verdicts)}
    if not verdicts:
        return _result("degeneracy", Status.ERROR, Reason.INTERNAL_ERROR, "no text was generated to judge", **nums)
    if bad:
        b = bad[0]
        signals = ", ".join(str(x) for x in b["signals"])
        return _result("degeneracy", Status.FAIL, Reason.DEGENERATE,
                       f"{len(bad)}/{len(verdicts)} outputs degenerate ({signals}); "
                       f"first: {b['id']} {str(b['text'])[:80]!r}", **nums)  # fmt: skip
    return _result("degeneracy", Status.PASS, Reason.OK, f"{len(verdicts)} outputs, none degenerate", **nums)


def spec_prompts(ctx: RunContext) -> list[golden.Prompt]:
    ps = golden.load_prompt_set(ctx.matrix.smoke.golden, ctx.matrix.path.parent)
    return list(ps.prompts)


def greedy_outputs(client: EngineClient, prompts: list[golden.Prompt], n_tokens: int, seed: int) -> dict[str, str]:
    out = {}
    for p in prompts:
        c = client.chat(p.messages(), max_tokens=max(n_tokens, p.max_tokens), seed=seed)
        out[p.id] = c.text
    return out


def first_tokens(text: str, n: int) -> list[str]:
    """The first ``n`` whitespace-delimited tokens (engine-independent: compares text, not token ids)."""
    return text.split()[:n]


@dataclass(frozen=True, kw_only=True)
class PendingSpec:
    """The speculative half of ``smoke.spec``, measured on the first server; :func:`finish_spec` judges it
    against the reference launch, started after that server has stopped."""

    algorithm: str
    prompts: tuple[golden.Prompt, ...]
    with_spec: dict[str, str]
    accept: float | None
    per_request: float | None


def measure_spec(ctx: RunContext, client: EngineClient, col: Collected, algorithm: str) -> PendingSpec:
    """Greedy outputs and the acceptance length with speculation on (the server running now)."""
    m = ctx.matrix
    info = engine_facts.server_info(client)
    mets = engine_facts.metrics(client)
    prompts = spec_prompts(ctx)
    n = m.smoke.spec_match_tokens
    with_spec = greedy_outputs(client, prompts, n, m.smoke.seed)
    for pid, text in with_spec.items():
        col.add(f"spec:{pid}", text)
    info = engine_facts.server_info(client) or info
    accept = engine_facts.spec_accept_length(info, engine_facts.metrics(client) or mets)
    per_request = None
    if engines.engine(m.server.engine).per_request_accept_length:
        try:
            meta = client.generate(prompts[0].prompt, max_new_tokens=32).get("meta_info", {})
            per_request = meta.get("spec_accept_length")
        except requests.RequestException:
            per_request = None
    return PendingSpec(algorithm=algorithm, prompts=tuple(prompts), with_spec=with_spec, accept=accept,
                       per_request=per_request)  # fmt: skip


def finish_spec(ctx: RunContext, pending: PendingSpec, start_reference: StartReference) -> StageResult:
    """The reference launch (the final argv without exactly its speculative flags), then the verdict."""
    m = ctx.matrix
    n = m.smoke.spec_match_tokens
    accept, with_spec = pending.accept, pending.with_spec
    with start_reference() as ref:
        if not ref.outcome.ready:
            return _result("spec", Status.ERROR, ref.outcome.reason,
                           f"the no-speculation reference did not start: {ref.outcome.message}",
                           acceptance_length=accept, algorithm=pending.algorithm)  # fmt: skip
        reference = greedy_outputs(ref.client, list(pending.prompts), n, m.smoke.seed)
        reference_argv = list(ref.argv)
    same = [pid for pid in with_spec if first_tokens(with_spec[pid], n) == first_tokens(reference[pid], n)]
    identical = len(same) / len(with_spec) if with_spec else 0.0
    diverging = next((pid for pid in with_spec if pid not in same), None)
    nums: dict[str, Any] = {"algorithm": pending.algorithm, "acceptance_length": accept,
                            "per_request_accept_length": pending.per_request,
                            "identical_fraction": round(identical, 3), "compared_tokens": n,
                            "prompts": len(with_spec), "floor": m.smoke.min_spec_accept_length,
                            "reference_command": reference_argv}  # fmt: skip
    if diverging:
        nums["first_diverging"] = {"id": diverging, "with_spec": with_spec[diverging][:300],
                                   "without_spec": reference[diverging][:300]}  # fmt: skip
    if identical < m.smoke.spec_min_identical:
        return _result("spec", Status.FAIL, Reason.SPEC_LOSSY,
                       f"only {identical:.0%} of greedy outputs match without speculation (first {n} tokens; "
                       f"need {m.smoke.spec_min_identical:.0%}); first diverging: {diverging!r}", **nums)  # fmt: skip
    if accept is None:
        return _result("spec", Status.PASS, Reason.OK,
                       f"lossless on {identical:.0%} of prompts; the engine reports no acceptance length", **nums)  # fmt: skip
    if accept < m.smoke.min_spec_accept_length:
        return _result("spec", Status.FAIL, Reason.SPEC_LOW_ACCEPTANCE,
                       f"{pending.algorithm}: acceptance length {accept:.2f} < floor {m.smoke.min_spec_accept_length}",
                       **nums)  # fmt: skip
    return _result("spec", Status.PASS, Reason.OK,
                   f"{pending.algorithm}: acceptance length {accept:.2f}; {identical:.0%} of greedy outputs identical "
                   f"without speculation", **nums)  # fmt: skip


def check_speed(ctx: RunContext, client: EngineClient, col: Collected) -> StageResult:
    m = ctx.matrix
    msg = [{"role": "user", "content": "Write a short story about a lighthouse keeper."}]
    single = client.chat_stream(msg, max_tokens=m.smoke.speed_max_tokens, seed=m.smoke.seed)
    col.add("speed:single", single.text, "length" if (single.completion_tokens or 0) >= m.smoke.speed_max_tokens else None)
    toks = single.completion_tokens or 0
    decode_s = single.seconds - (single.ttft_s or 0.0)
    decode_tps = (toks - 1) / decode_s if toks > 1 and decode_s > 0 else None
    sweep = {}
    for c in m.smoke.concurrency:
        t = time.monotonic()
        with ThreadPoolExecutor(max_workers=c) as pool:
            outs = list(pool.map(lambda _i: client.chat(msg, max_tokens=m.smoke.speed_max_tokens // 2,
                                                        seed=m.smoke.seed), range(c)))  # fmt: skip
        wall = time.monotonic() - t
        n = sum(o.completion_tokens or 0 for o in outs)
        sweep[str(c)] = {"requests": c, "tokens": n, "seconds": round(wall, 3), "tokens_per_s": round(n / wall, 2)}
    nums: dict[str, Any] = {"decode_tokens_per_s": None if decode_tps is None else round(decode_tps, 2),
                            "ttft_s": None if single.ttft_s is None else round(single.ttft_s, 4),
                            "tokens": toks, "concurrency": sweep}  # fmt: skip
    baseline = ctx.options.baseline_speed
    if baseline and decode_tps:
        nums["baseline_decode_tokens_per_s"] = baseline
        floor = float(baseline) * (1 - m.smoke.perf_tolerance)
        if decode_tps < floor:
            return _result("speed", Status.FAIL, Reason.PERF_REGRESSION,
                           f"decode {decode_tps:.1f} tok/s < {floor:.1f} (pinned {baseline:.1f} - "
                           f"{m.smoke.perf_tolerance:.0%})", **nums)  # fmt: skip
    tps = "?" if decode_tps is None else f"{decode_tps:.1f}"
    ttft = "?" if single.ttft_s is None else f"{single.ttft_s * 1000:.0f} ms"
    return _result("speed", Status.PASS, Reason.OK, f"decode {tps} tok/s, TTFT {ttft}", **nums)


FILLER = ("The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again. ")


def haystack(n_tokens: int, depth: float, needle: str) -> str:
    """A RULER-style haystack of about ``n_tokens`` tokens (~4 characters each) with the needle at ``depth``."""
    chars = n_tokens * 4
    body = (FILLER * (chars // len(FILLER) + 1))[:chars]
    cut = int(len(body) * depth)
    cut = body.rfind(". ", 0, cut) + 2 if ". " in body[:cut] else 0
    return body[:cut] + needle + " " + body[cut:]


def check_long_context(ctx: RunContext, client: EngineClient, col: Collected, server_lines: list[str]) -> StageResult:
    m = ctx.matrix
    limit = m.model.context_length
    lengths = [n for n in m.smoke.long_context if n + 512 <= limit]
    skipped = [n for n in m.smoke.long_context if n + 512 > limit]
    if not lengths:
        return _result("long-context", Status.SKIP, Reason.NOT_APPLICABLE,
                       f"no configured length fits the context length {limit}")  # fmt: skip
    rng = random.Random(m.smoke.seed)
    rows = []
    for n in lengths:
        for depth in (0.1, 0.5, 0.9):
            digits = m.smoke.needle_digits
            number = str(rng.randint(10 ** (digits - 1), 10**digits - 1))
            needle = f"The special magic number is {number}."
            prompt = (haystack(n, depth, needle) + "\n\nWhat is the special magic number mentioned in the text "
                      "above? Answer with the number only.")  # fmt: skip
            try:
                c = client.chat([{"role": "user", "content": prompt}], max_tokens=24, seed=m.smoke.seed)
                got, ok = c.text, number in c.text
                col.add(f"long-context:{n}@{depth}", c.text, c.finish_reason)
            except requests.RequestException as e:
                got, ok = f"error: {e}", False
            rows.append({"tokens": n, "depth": depth, "expected": number, "got": got[:120], "found": ok})
    usage = engine_facts.token_usage_from_log(server_lines)
    mets = engine_facts.metrics(client)
    nums: dict[str, Any] = {"probes": rows, "lengths": lengths, "skipped_lengths": skipped,
                            "kv_token_usage_log": usage, "kv_token_usage_metric": mets.get("sglang:token_usage"),
                            "found": sum(r["found"] for r in rows), "total": len(rows)}  # fmt: skip
    misses = [r for r in rows if not r["found"]]
    if misses:
        r0 = misses[0]
        return _result("long-context", Status.FAIL, Reason.LONG_CONTEXT_MISS,
                       f"{len(misses)}/{len(rows)} needles missed; first at {r0['tokens']} tokens, depth {r0['depth']}: "
                       f"expected {r0['expected']}, got {r0['got']!r}", **nums)  # fmt: skip
    return _result("long-context", Status.PASS, Reason.OK,
                   f"{len(rows)}/{len(rows)} needles found up to {max(lengths)} tokens"
                   + (f"; peak KV usage {usage:.0%}" if usage is not None else ""), **nums)  # fmt: skip


@dataclass
class CheckRun:
    """The checks' results so far, and the speculative check's second half when speculation is on."""

    results: list[StageResult]
    pending_spec: PendingSpec | None = None
    spec_position: int = 0


def run_checks(ctx: RunContext, client: EngineClient, checks: tuple[str, ...], server_lines: list[str] | None = None,
               *, speculative: str | None = None) -> CheckRun:  # fmt: skip
    """Run the selected checks in order (degeneracy last: it judges every text the others produced).

    ``speculative``: the algorithm the launched argv turns on (None: ``smoke.spec`` is not applicable). Its
    reference launch is left to :func:`finish_spec`, after this server has stopped.
    """
    col = Collected()
    run = CheckRun(results=[])
    order = [c for c in ("golden", "spec", "speed", "long-context", "degeneracy") if c in checks]
    for name in order:
        t = time.monotonic()
        try:
            if name == "golden":
                r = check_golden(ctx, client, col)
            elif name == "spec":
                if speculative is None:
                    r = _result("spec", Status.SKIP, Reason.NOT_APPLICABLE,
                                "speculative decoding is not on in this cell's launch")  # fmt: skip
                else:
                    run.pending_spec = measure_spec(ctx, client, col, speculative)
                    run.spec_position = len(run.results)
                    continue
            elif name == "speed":
                r = check_speed(ctx, client, col)
            elif name == "long-context":
                r = check_long_context(ctx, client, col, server_lines or [])
            else:
                r = check_degeneracy(ctx, client, col)
        except requests.RequestException as e:
            r = _result(name, Status.FAIL, Reason.CRASH, f"the server stopped answering: {type(e).__name__}: {e}")
        run.results.append(StageResult(name=r.name, status=r.status, reason=r.reason, message=r.message,
                                       duration_s=time.monotonic() - t, details=r.details))  # fmt: skip
    return run


def summarise(results: list[StageResult], details: dict[str, Any]) -> StageResult:
    """``smoke``: the worst check names the stage (degenerate text explains missed goldens)."""
    worst = max(results, key=lambda s: (s.status.rank, -_PRIORITY.index(s.reason) if s.reason in _PRIORITY else -99))
    launch = details.get("launch", {})
    summary = "; ".join(f"{r.name.split('.', 1)[1]}: {r.message}" for r in results)
    status = worst.status if worst.status is not Status.SKIP or all(r.status is Status.SKIP for r in results) else Status.PASS
    msg = worst.message if status in (Status.FAIL, Status.ERROR) else f"ready in {launch.get('ready_s')} s; {summary}"
    return StageResult(name="smoke", status=status, reason=worst.reason if status is not Status.PASS else Reason.OK,
                       message=msg, details=details, checks=tuple(results))  # fmt: skip


__all__ = ["SPEC_FLAGS", "CheckRun", "PendingSpec", "engines", "finish_spec", "run_checks", "summarise"]
