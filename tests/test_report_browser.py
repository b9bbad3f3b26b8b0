"""The HTML report opened in a real browser (Debian's headless chromium): a replayed SGLang run (the H200 OOM
recording, replayed as a process and watched by the real smoke stage) next to the committed H200 run with random
weights, rendered by `envbuilder report --all`, loads without console errors, does not overflow 1280 px with every
cell opened, and renders to a PNG. Skipped, with the reason, where chromium is not installed."""

from __future__ import annotations

import json
import re
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from envbuilder import matrix, report, watch
from envbuilder.pipeline import RunContext, Workspace, run_pipeline
from envbuilder.report import upgrade
from envbuilder.results import CellResult, Reason, ResultStore, StageResult, Status
from envbuilder.smoke import SmokeStage
from tests.conftest import ROOT, envbuilder, write

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (Debian: apt-get install chromium)")
REPLAY = ROOT / "tests/replay_sglang.py"
OOM_LOG = ROOT / "tests/fixtures/sglang-runs/0.5.11-h200/oom.log"
H200_RANDOM = ROOT / "reports/h200-sglang-0.5.11/random"
RANDOM_CELL = "sglang-0.5.11_cu13.0_drv-host_ubuntu24.04_py3.12"

# Written into a copy of the page only: opens every cell, then measures the widest element.
SELF_CHECK = """<script>
document.querySelectorAll('details').forEach(d => d.open = true);
const wide = [...document.querySelectorAll('body *')].filter(e => e.getBoundingClientRect().right > innerWidth + 0.5)
  .map(e => e.tagName.toLowerCase() + '.' + e.className.baseVal + e.className).slice(0, 8);
const out = document.createElement('pre'); out.id = 'selfcheck';
out.textContent = JSON.stringify({scroll: document.documentElement.scrollWidth, inner: innerWidth, wide: wide,
  open: document.querySelectorAll('details[open]').length});
document.body.appendChild(out);
</script>"""


def chromium(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    assert CHROMIUM is not None
    profile = tmp_path / f"profile-{len(list(tmp_path.glob('profile-*')))}"
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
           "--disable-component-update", "--disable-sync", "--no-first-run", "--hide-scrollbars", "--disable-dev-shm-usage",
           f"--user-data-dir={profile}", "--enable-logging=stderr", "--v=0", *args]  # fmt: skip
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)


def console_messages(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if ":CONSOLE" in line]


def _workdir(tmp_path: Path) -> Path:
    """A workdir with a replayed OOM start-up (run here, now) and the committed H200 random-weights run."""
    wd = tmp_path / "wd"
    text = f"""
[matrix]
sglang = ["0.5.11"]
cuda = ["12.8"]
os = ["ubuntu24.04"]
python = ["3.12"]
[model]
path = "/models/smollm2"
tp = 1
[server]
engine = "sglang"
command = ["{sys.executable}", "{REPLAY}", "--port", "{{port}}", "--compress", "100", "--log", "{OOM_LOG}", "--exit", "-9"]
startup_timeout_s = 60
"""
    m = matrix.load(write(tmp_path / "matrix.toml", text))
    (r,) = run_pipeline(RunContext(matrix=m, workspace=Workspace(wd)), m.cells(), [SmokeStage()])
    assert r.verdict is Status.FAIL and r.stage("smoke").reason.value == "oom"  # type: ignore[union-attr]
    store = ResultStore(wd / "results")
    rnd = ResultStore(H200_RANDOM / "results").load(RANDOM_CELL)
    assert rnd is not None
    store.save(rnd)
    (wd / "logs" / RANDOM_CELL).mkdir(parents=True)
    shutil.copy(H200_RANDOM / "logs" / RANDOM_CELL / "server.log", wd / "logs" / RANDOM_CELL / "server.log")
    return wd


def test_report_page_in_chromium(tmp_path: Path) -> None:
    wd = _workdir(tmp_path)
    out = envbuilder("--workdir", str(wd), "--matrix", str(tmp_path / "none.toml"), "report", "--all")
    assert out.code == 1, out.err
    page = wd / "reports/envbuilder.html"
    html = page.read_text()
    assert "<script" not in html and html.count("<details") == 2 and html.count('class="timeline"') == 2

    # 1. it loads without console messages (the detector itself is checked on a page that logs one)
    shot = tmp_path / "page.png"
    loaded = chromium(tmp_path, "--window-size=1280,2000", f"--screenshot={shot}", page.as_uri())
    assert loaded.returncode == 0, loaded.stderr[-2000:]
    assert console_messages(loaded.stderr) == []
    noisy = write(tmp_path / "noisy.html", "<!doctype html><p>x</p><script>console.error('broken page')</script>")
    assert any("broken page" in m for m in console_messages(chromium(tmp_path, "--dump-dom", noisy.as_uri()).stderr))

    # 2. the PNG: 1280 px wide, not blank
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    assert (width, height) == (1280, 2000) and len(data) > 20_000

    # 3. no horizontal overflow at 1280 px, every cell opened (a copy of the page with the self-check)
    checked = page.with_name("selfcheck.html")  # same folder: the relative log links stay valid
    checked.write_text(html.replace("</body>", SELF_CHECK + "</body>"))
    dom = chromium(tmp_path, "--window-size=1280,900", "--dump-dom", checked.as_uri())
    m = re.search(r'<pre id="selfcheck">(.*?)</pre>', dom.stdout)
    assert m is not None, dom.stderr[-2000:]
    facts = json.loads(m.group(1).replace("&quot;", '"'))
    assert facts["inner"] == 1280 and facts["open"] == 2
    assert facts["scroll"] <= 1280 and facts["wide"] == [], facts
    # a wide matrix (3 × 16 squares, long reasons, stacked cells) and the real watch run's upgrade views still fit
    many = [CellResult(id=f"sglang-{s}_cu{c}_drv-{d}_py{py}", axes={"sglang": s, "cuda": c, "driver": d, "python": py},
                       stages=(StageResult(name="smoke", status=Status.FAIL, reason=Reason.GRAPH_CAPTURE_FAILED,
                                           message="x" * 300),))
            for s in ("0.5.9", "0.5.10", "0.5.11") for c in ("12.6", "12.8", "12.9", "13.0")
            for d in ("host", "580.126.09", "590.48.01", "595.01.02") for py in ("3.11", "3.12")]  # fmt: skip
    big = page.with_name("big.html")
    real_watch = watch.UpgradeSummary.from_json(json.loads((ROOT / "reports/watch-0.5.11/summary.json").read_text()))
    ups = upgrade.from_summary(real_watch, wd)  # with its long reasons, fixes and package lists
    big.write_text(report.to_html(many, open_all=True, upgrades=ups).replace("</body>", SELF_CHECK + "</body>"))
    m3 = re.search(r'<pre id="selfcheck">(.*?)</pre>', chromium(tmp_path, "--window-size=1280,900", "--dump-dom", big.as_uri()).stdout)
    assert m3 is not None
    big_facts = json.loads(m3.group(1).replace("&quot;", '"'))
    assert big_facts["scroll"] <= 1280 and big_facts["wide"] == [], big_facts
    # the check catches overflow: an unbreakable 3000-px element
    wide = page.with_name("wide.html")
    wide.write_text(html.replace("</main>", '<div style="width:3000px">x</div></main>').replace("</body>", SELF_CHECK + "</body>"))
    m2 = re.search(r'<pre id="selfcheck">(.*?)</pre>', chromium(tmp_path, "--window-size=1280,900", "--dump-dom", wide.as_uri()).stdout)
    assert m2 is not None and json.loads(m2.group(1).replace("&quot;", '"'))["scroll"] > 1280
