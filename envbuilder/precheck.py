"""precheck: decide without a GPU what the NVIDIA stack already rules out, from rules kept as data.

Each rule returns findings; the stage is the worst finding. Rules read ``envbuilder/rules/*.toml``
(CUDA toolkit -> driver, kernels -> architectures) and the runner's facts (``envbuilder doctor``).
"""

from __future__ import annotations

import tomllib
from dataclasses import asdict, dataclass
from functools import cache
from importlib import resources
from typing import Any

from packaging.version import Version

from envbuilder import lock, memory, model
from envbuilder.artifacts import HostFacts
from envbuilder.errors import InputError
from envbuilder.matrix import HOST, NONE, Cell, Matrix
from envbuilder.pipeline import RunContext
from envbuilder.results import CellResult, Reason, StageResult, Status

OVERHEAD_GIB = 1.5  # CUDA context, activations, CUDA graphs per GPU
USABLE_FRACTION = 0.90  # of each GPU's memory an engine may plan for


@dataclass(frozen=True, kw_only=True)
class Finding:
    rule: str
    status: Status
    reason: Reason
    message: str
    source: str = ""


@cache
def rules(name: str) -> dict[str, Any]:
    """A rule table from ``envbuilder/rules/<name>.toml``."""
    data: dict[str, Any] = tomllib.loads(resources.files("envbuilder").joinpath(f"rules/{name}.toml").read_text())
    return data


def _v(s: str) -> Version:
    return Version(s)


# --------------------------------------------------------------------------------------------
# Rules
# --------------------------------------------------------------------------------------------


def check_driver_mismatch(cell: Cell, facts: HostFacts) -> list[Finding]:
    module = facts.driver.kernel_module
    if cell.driver != HOST:
        if not module:
            return [Finding(rule="driver-match", status=Status.SKIP, reason=Reason.UNKNOWN_FACTS,
                            message="the runner's kernel-module version is unknown")]  # fmt: skip
        if cell.driver != module:
            return [Finding(rule="driver-match", status=Status.FAIL, reason=Reason.DRIVER_MISMATCH,
                            message=f"Driver/library version mismatch: kernel module {module}, userspace "
                                    f"{cell.driver} baked into the image; bake {module} or use driver = \"host\"",
                            source="NVIDIA: userspace libraries must equal the loaded kernel module")]  # fmt: skip
        return [Finding(rule="driver-match", status=Status.PASS, reason=Reason.OK,
                        message=f"baked userspace {cell.driver} = kernel module")]  # fmt: skip
    user = facts.driver.userspace
    if module and user and module != user:
        return [Finding(rule="driver-match", status=Status.FAIL, reason=Reason.DRIVER_MISMATCH,
                        message=f"Driver/library version mismatch on the runner: kernel module {module}, userspace "
                                f"{user} (a driver upgraded without a reboot?); reboot or reinstall one driver")]  # fmt: skip
    if not module:
        return [Finding(rule="driver-match", status=Status.SKIP, reason=Reason.UNKNOWN_FACTS,
                        message="the runner's NVIDIA driver is unknown (no kernel module found)")]  # fmt: skip
    return [Finding(rule="driver-match", status=Status.PASS, reason=Reason.OK,
                    message=f"runner kernel module {module} = userspace {user or 'unknown'}")]  # fmt: skip


def effective_driver(cell: Cell, facts: HostFacts) -> str | None:
    """The userspace driver the cell's CUDA calls into."""
    if cell.driver != HOST:
        return cell.driver
    return facts.driver.userspace or facts.driver.kernel_module


def check_cuda_driver(cell: Cell, facts: HostFacts, cuda: str | None = None) -> list[Finding]:
    cuda = cuda or cell.cuda
    if cuda == NONE:
        return []
    table = rules("cuda_driver")
    driver = effective_driver(cell, facts)
    if driver is None:
        return [Finding(rule="cuda-driver", status=Status.SKIP, reason=Reason.UNKNOWN_FACTS,
                        message=f"driver unknown: cannot check CUDA {cuda}")]  # fmt: skip
    major = int(cuda.split(".")[0])
    floor = next((r["driver"] for r in table["minor_compat"] if r["cuda_major"] == major), None)
    rows = [r for r in table["toolkit"] if r["cuda"] == cuda]
    own = min((r["driver"] for r in rows), key=_v, default=None)
    src = table["source"]
    if floor is not None and _v(driver) < _v(floor):
        return [Finding(rule="cuda-driver", status=Status.FAIL, reason=Reason.DRIVER_TOO_OLD,
                        message=f"CUDA {cuda} needs driver >= {floor} (CUDA {major}.x minor-version compatibility); "
                                f"the driver is {driver}", source=src)]  # fmt: skip
    if own is None:
        return [Finding(rule="cuda-driver", status=Status.PASS, reason=Reason.OK,
                        message=f"CUDA {cuda} is not in the rule table; driver {driver} is above the "
                                f"{major}.x floor {floor}; add a row to rules/cuda_driver.toml", source=src)]  # fmt: skip
    if _v(driver) < _v(own):
        return [Finding(rule="cuda-driver", status=Status.PASS, reason=Reason.OK,
                        message=f"warning: driver {driver} is below CUDA {cuda}'s own driver {own}: it runs through "
                                f"minor-version compatibility (limited feature set, no PTX JIT of newer code)",
                        source=src)]  # fmt: skip
    return [Finding(rule="cuda-driver", status=Status.PASS, reason=Reason.OK,
                    message=f"driver {driver} >= {own} (CUDA {cuda})", source=src)]  # fmt: skip


BACKEND_FLAGS = ("--attention-backend", "--prefill-attention-backend", "--decode-attention-backend")


def default_backend(cc: str, *, mla: bool = False, spec_topk: int | None = None) -> str:
    """The attention backend SGLang picks on compute capability ``cc`` when none is given
    (srt/server_args.py ``_get_default_attn_backend``; rules/arch.toml ``[default_backend]``)."""
    d = rules("arch")["default_backend"]
    major = cc.split(".")[0]
    topk_ok = spec_topk is None or spec_topk == 1
    if major == "9" and topk_ok:
        return str(d["hopper"])
    if major == "10":
        return str(d["mla_blackwell"] if mla else d["blackwell"])
    return str(d["mla_other"] if mla else d["other"])


def attention_backends(m: Matrix, cc: str, version: str | None, hybrid: bool) -> tuple[set[str], str]:
    """(backends the launch uses on ``cc``, a sentence saying which and why)."""
    from envbuilder import launchargs

    argv = [*(m.server.command or ()), *m.server.args]
    parsed = launchargs.parse(argv, launchargs.options_for(version))
    given = {parsed.get(f) for f in BACKEND_FLAGS if parsed.get(f)}
    linear = parsed.get("--linear-attn-backend") or str(rules("arch")["default_backend"]["linear"])
    tail = f"; {linear} for the linear-attention layers" if hybrid else ""
    if given:
        return {str(g) for g in given}, f"attention backend {', '.join(sorted(str(g) for g in given))} (given){tail}"
    topk = parsed.get("--speculative-eagle-topk")
    backend = default_backend(cc, spec_topk=int(topk) if topk and topk.isdigit() else None)
    return {backend}, (f"no attention backend given: SGLang {version or ''} picks {backend} on sm {cc} "
                       f"(server_args._get_default_attn_backend){tail}").replace("SGLang  ", "SGLang ")


def _applies(k: dict[str, Any], lock_versions: dict[str, str], cuda: str, machine: str) -> bool:
    from packaging.specifiers import SpecifierSet

    if k.get("arch") and k["arch"] != machine:
        return False
    if k.get("cuda_major") is not None and (cuda == NONE or int(cuda.split(".")[0]) != int(k["cuda_major"])):
        return False
    present = [p for p in k["packages"] if p in lock_versions]
    if lock_versions and not present and not k.get("always"):
        return False
    spec = str(k.get("versions") or "")
    if spec and present:
        return any(SpecifierSet(spec, prereleases=True).contains(lock_versions[p], prereleases=True) for p in present)
    return not spec or not lock_versions


def check_arch(cell: Cell, m: Matrix, facts: HostFacts, lock_versions: dict[str, str],
               cuda: str | None = None) -> list[Finding]:  # fmt: skip
    ccs = sorted({g.compute_capability for g in facts.gpus if g.compute_capability})
    if not ccs or cell.cuda == NONE:
        return [] if cell.cuda == NONE else [Finding(rule="arch", status=Status.SKIP, reason=Reason.UNKNOWN_FACTS,
                                                     message="GPU compute capability unknown")]  # fmt: skip
    doc = facts.document
    os_doc = doc.get("os")
    os_machine = os_doc.get("machine", "") if isinstance(os_doc, dict) else ""
    machine = "aarch64" if "aarch64" in str(doc.get("machine") or os_machine) else "x86_64"
    version = cell.requirements().get("sglang")
    hybrid = _hybrid(m)
    out: list[Finding] = []
    for cc in ccs:
        backends, why = attention_backends(m, cc, version, hybrid) if _sglang(m) else (set(), "")
        if why:
            out.append(Finding(rule="arch", status=Status.PASS, reason=Reason.OK, message=f"note: {why}",
                               source=str(rules("arch")["default_backend"]["source"])))  # fmt: skip
        for k in rules("arch")["kernel"]:
            if not _applies(k, lock_versions, cuda or cell.cuda, machine):
                continue
            if cc in k["compute_capabilities"]:
                continue
            used = k.get("always", False) or k.get("backend") in backends
            ver = next((f" {lock_versions[p]}" for p in k["packages"] if p in lock_versions), "")
            msg = f"{k['name']}{ver} has no kernels for compute capability {cc}"
            if used:
                out.append(Finding(rule="arch", status=Status.FAIL, reason=Reason.ARCH_UNSUPPORTED,
                                   message=msg + " and this cell uses it", source=k["source"]))  # fmt: skip
            else:
                out.append(Finding(rule="arch", status=Status.PASS, reason=Reason.OK,
                                   message=f"note: {msg}; not used here ({k['fallback']})", source=k["source"]))  # fmt: skip
    return out


def _hybrid(m: Matrix) -> bool:
    try:
        cfg_path = model.find_config(m.model, m.path.parent, where=str(m.path))
    except InputError:  # a bad [model].config is the vram rule's to report
        return False
    if cfg_path is None:
        return False
    return model.full_attention_layers(model.read_config(cfg_path))[1] > 0


def check_glibc(cell: Cell, lk: lock.Lock | None) -> list[Finding]:
    if lk is None:
        return []
    need = lk.manylinux_floor()
    have = tuple(int(x) for x in cell.glibc.split("."))
    if need and need > have:
        worst = [w.filename for p in lk.packages.values() for w in p.wheels if lock.wheel_glibc(w.filename) == need]
        return [Finding(rule="glibc", status=Status.FAIL, reason=Reason.NO_WHEEL_FOR_PLATFORM,
                        message=f"{worst[0] if worst else 'a wheel'} needs glibc {need[0]}.{need[1]}; "
                                f"{cell.os} has {cell.glibc}")]  # fmt: skip
    return []


def launch_flags(m: Matrix) -> list[str]:
    """The flags a cell's SGLang launch will carry (custom command, or the adapter's --tp/--context-length) + args."""
    if m.server.command is not None:
        return [*m.server.command, *m.server.args]
    adapter = ["--tp", str(m.model.tp)] if m.model.tp > 1 else []
    if m.model.context_length:
        adapter += ["--context-length", str(m.model.context_length)]
    return [*adapter, *m.server.args]


def check_memory(cell: Cell, m: Matrix, facts: HostFacts) -> tuple[list[Finding], memory.MemoryPlan | None]:
    """SGLang's own memory split (rules/sglang_memory.toml) for this launch on the runner's GPUs."""
    gpus = facts.gpus
    tp = m.model.tp
    if gpus and tp > len(gpus):
        return [Finding(rule="vram", status=Status.FAIL, reason=Reason.VRAM_INSUFFICIENT,
                        message=f"tp={tp} needs {tp} GPUs; the runner has {len(gpus)}")], None  # fmt: skip
    try:
        plan = memory.predict_for_cell(m, cell, facts, launch_flags(m))
    except memory.BadLaunchFlag as e:
        return [Finding(rule="flags", status=Status.FAIL, reason=Reason.BAD_FLAG, message=str(e),
                        source="sglang 0.5.11 sglang/srt/server_args.py ServerArgs.add_cli_args")], None  # fmt: skip
    if isinstance(plan, str):
        return [Finding(rule="vram", status=Status.SKIP, reason=Reason.UNKNOWN_FACTS, message=plan)], None
    src = "; ".join(plan.sources)
    need = plan.context_length
    if plan.kv_tokens < max(1, need):
        fixes = memory.fixes(plan, need)
        what = ("no KV pool is left" if plan.kv_tokens <= 0 else
                f"the KV pool ({plan.kv_tokens} tokens per rank) is shorter than the context length {need}")
        fix = ("; fix: " + " or ".join(str(f) for f in fixes)) if fixes else ""
        return [Finding(rule="vram", status=Status.FAIL, reason=Reason.VRAM_INSUFFICIENT,
                        message=f"{what}: {plan.summary()}{fix}", source=src)], plan  # fmt: skip
    return [Finding(rule="vram", status=Status.PASS, reason=Reason.OK,
                    message=f"fits: {plan.summary()}; context {need}", source=src)], plan  # fmt: skip


def check_vram(m: Matrix, facts: HostFacts, matrix_dir: Any) -> list[Finding]:
    gpus = facts.gpus
    fp = model.footprint(m.model, matrix_dir)
    if fp is None:
        return [Finding(rule="vram", status=Status.SKIP, reason=Reason.UNKNOWN_FACTS,
                        message="model size unknown: give [model] parameters or a local config.json")]  # fmt: skip
    if not gpus or not all(g.memory_mib for g in gpus):
        return [Finding(rule="vram", status=Status.SKIP, reason=Reason.UNKNOWN_FACTS,
                        message=f"GPU memory unknown (model needs {fp.weight_bytes / 1e9:.1f} GB of weights)")]  # fmt: skip
    tp = m.model.tp
    if tp > len(gpus):
        return [Finding(rule="vram", status=Status.FAIL, reason=Reason.VRAM_INSUFFICIENT,
                        message=f"tp={tp} needs {tp} GPUs; the runner has {len(gpus)}")]  # fmt: skip
    ctx_len = m.model.context_length
    kv = fp.kv_bytes_per_token * ctx_len + fp.state_bytes_per_sequence
    per_gpu_need = (fp.weight_bytes + kv) / tp + OVERHEAD_GIB * model.GIB
    smallest = min(float(g.memory_mib or 0) for g in gpus[:tp]) * 1024 * 1024
    usable = smallest * USABLE_FRACTION
    numbers = (f"weights {fp.weight_bytes / 1e9:.1f} GB + KV {kv / 1e9:.1f} GB for {ctx_len} tokens, / tp={tp} "
               f"+ {OVERHEAD_GIB} GiB overhead = {per_gpu_need / model.GIB:.1f} GiB per GPU; "
               f"{USABLE_FRACTION:.0%} of {smallest / model.GIB:.1f} GiB = {usable / model.GIB:.1f} GiB usable")  # fmt: skip
    if per_gpu_need > usable:
        return [Finding(rule="vram", status=Status.FAIL, reason=Reason.VRAM_INSUFFICIENT,
                        message=f"does not fit: {numbers}", source=fp.source)]  # fmt: skip
    return [Finding(rule="vram", status=Status.PASS, reason=Reason.OK, message=f"fits: {numbers}", source=fp.source)]


def evaluate(cell: Cell, m: Matrix, facts: HostFacts, lock_path: Any = None) -> list[Finding]:
    """Every rule's findings for one cell."""
    lk = lock.read(lock_path) if lock_path is not None and lock_path.exists() else None
    versions = lk.versions() if lk else {}
    findings = check_driver_mismatch(cell, facts) if cell.cuda != NONE else []
    findings += check_cuda_driver(cell, facts, (lk.cuda() if lk else None) or cell.cuda)
    findings += check_arch(cell, m, facts, versions, (lk.cuda() if lk else None) or cell.cuda)
    findings += check_glibc(cell, lk)
    if cell.cuda != NONE:
        if _sglang(m) and model_config_known(m):
            findings += check_memory(cell, m, facts)[0]
        else:
            findings += check_vram(m, facts, m.path.parent)
    return findings


def _sglang(m: Matrix) -> bool:
    from envbuilder import engines

    return engines.engine(m.server.engine).sglang_rules


def model_config_known(m: Matrix) -> bool:
    try:
        return model.find_config(m.model, m.path.parent, where=str(m.path)) is not None
    except InputError:
        return False


class PrecheckStage:
    """``precheck``: the NVIDIA stack against the runner's facts."""

    name = "precheck"
    requires: tuple[str, ...] = ("resolve",)
    max_workers = 1

    def inputs(self, ctx: RunContext, cell: Cell, prior: CellResult) -> dict[str, Any]:
        resolved = prior.lock()
        facts = ctx.host_facts.key()
        return {"facts": facts, "lock": resolved.sha256 if resolved else None,
                "rules": [rules("cuda_driver")["version"], rules("arch")["version"], memory.rules()["version"]],
                "model": asdict(ctx.matrix.model), "args": list(ctx.matrix.server.args),
                "command": list(ctx.matrix.server.command or ())}  # fmt: skip

    def intact(self, ctx: RunContext, cell: Cell, old: StageResult) -> bool:
        return True

    def run(self, ctx: RunContext, cell: Cell, prior: CellResult) -> StageResult:
        findings = evaluate(cell, ctx.matrix, ctx.host_facts, ctx.workspace.locks(cell.id) / "pylock.toml")
        details: dict[str, Any] = {"findings": [{**asdict(f), "status": f.status.value, "reason": f.reason.value}
                                                for f in findings]}  # fmt: skip
        plan = (check_memory(cell, ctx.matrix, ctx.host_facts)[1]
                if cell.cuda != NONE and _sglang(ctx.matrix) and model_config_known(ctx.matrix)
                else None)  # fmt: skip
        if plan is not None:
            details["kv_tokens"] = plan.kv_tokens
            details["max_running_requests"] = plan.max_running_requests
            details["memory"] = plan.to_json()
        if not ctx.host_facts.known:
            return StageResult(name=self.name, status=Status.SKIP, reason=Reason.UNKNOWN_FACTS,
                               message="no runner facts: run on the GPU runner, or pass --host-facts FILE "
                                       "from `envbuilder doctor --json`", details=details)  # fmt: skip
        if not findings:
            return StageResult(name=self.name, status=Status.PASS, message="nothing to check for a CPU cell",
                               details=details)  # fmt: skip
        worst = max(findings, key=lambda f: f.status.rank)
        if worst.status is Status.PASS:
            warnings = [f.message for f in findings if f.message.startswith(("warning", "note"))]
            msg = "; ".join(warnings) if warnings else "driver, CUDA, architecture and VRAM fit"
            return StageResult(name=self.name, status=Status.PASS, message=msg, details=details)
        return StageResult(name=self.name, status=worst.status, reason=worst.reason, message=worst.message,
                           details=details)  # fmt: skip
