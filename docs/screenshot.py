"""Take the TensorBoard and `keras-gpu report` screenshots in `docs/` from real runs of `keras-gpu demo`.

    python docs/screenshot.py                      # runs the demos into temporary log dirs
    python docs/screenshot.py --log-dir runs/demo --cluster-log-dir runs/demo2w

It starts a real `tensorboard` server on 127.0.0.1, drives headless Chromium
(Debian: `apt-get install chromium`) over the DevTools protocol on a pipe, waits
until every chart that has data has drawn its lines, and writes:

- `tensorboard.png`: the Custom Scalars dashboard, keras-gpu's throughput charts;
- `tensorboard_time.png`: the Custom Scalars dashboard, where the time goes
  (epoch time and its parts, the step-time breakdown, per replica);
- `tensorboard_memory.png`: the Custom Scalars dashboard, the memory charts;
- `tensorboard_cluster.png`: the Custom Scalars dashboard, the cluster view of
  a two-worker run (`keras-gpu demo --workers 2`);
- `tensorboard_scalars.png`: the Time Series dashboard filtered to the
  `throughput/` and `memory/` tags;
- `tensorboard_placement.png`: the Text dashboard with the placement tables;
- `report.png`: the terminal output of `keras-gpu report` on the first run;
- `tensorboard_tab.png`: the keras-gpu tab of the first run, as TensorBoard shows it;
- `tensorboard_tab_cluster.png`: the keras-gpu tab's cluster view of the two-worker run.

Pages are drawn `_WIDTH` CSS pixels wide, about the width of a documentation
page's text, at twice the pixel density, so that a page shows them at their
own size, sharp. A chart with no data (MFU on a CPU, the NVML charts without
a GPU) is left out of the shot rather than shown empty; the pages say what is
not measured. It fails (exit 1) rather than write a screenshot of a spinner
or an empty page.
Needs only the standard library, TensorBoard and Chromium.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import html
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from typing import Any

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, _REPO)  # the repository: tools/
from tools.chromium import Browser, find_chromium

_WIDTH, _HEIGHT = 800, 1100  # CSS pixels: the viewport, and the tallest shot
_MAX_HEIGHT = _HEIGHT
_SCALE = 2  # device pixels per CSS pixel: the PNGs are 1600 pixels wide

# TensorBoard's own UI settings (its localStorage key), set once per browser
# profile before the dashboards load: the Time Series settings pane closed,
# raw values (no smoothing), the y-axis not clipped.
_TB_SETTINGS = {
    "timeSeriesSettingsPaneOpened": False,
    "scalarSmoothing": 0,
    "ignoreOutliers": False,
    "timeSeriesCardMinWidth": 380,
}

# Every element of the page, shadow roots included (the Custom Scalars and Text
# dashboards are Polymer elements).
_JS_DEEP = """
const deepAll = (root) => {
  const out = [];
  const walk = (r) => { for (const el of r.querySelectorAll('*')) { out.push(el); if (el.shadowRoot) walk(el.shadowRoot); } };
  walk(root);
  return out;
};
const drawn = (p) => (p.getAttribute('d') || '').length > 20;
// keras-gpu's layout has multi-line charts, and margin charts for the indices (drawn unsmoothed).
const CHART_CARDS = ['tf-custom-scalar-multi-line-chart-card', 'tf-custom-scalar-margin-chart-card'];
"""

_JS_TIMESERIES_READY = """
(() => {
  const expected = %(expected)d;
  const cards = [...document.querySelectorAll('card-view')];
  const inView = cards.filter((c) => { const r = c.getBoundingClientRect(); return r.height > 0 && r.top < innerHeight && r.bottom > 0; });
  const done = inView.filter((c) => [...c.querySelectorAll('.series-view svg path')].some(drawn));
  return {ready: cards.length >= expected && inView.length > 0 && done.length === inView.length,
          cards: cards.length, expected, in_view: inView.length, drawn: done.length};
})()
"""

_JS_CUSTOM_SCALARS_READY = """
(() => {
  const wanted = %(wanted)s;  // chart title -> number of series with data
  const charts = deepAll(document).filter((e) => CHART_CARDS.includes(e.tagName.toLowerCase()));
  const lines = {};
  for (const c of charts) {
    const paths = deepAll(c.shadowRoot || c).filter((e) => e.tagName.toLowerCase() === 'path' && (e.getAttribute('class') || '').includes('line'));
    lines[c.title] = paths.filter(drawn).length;
  }
  const missing = Object.entries(wanted).filter(([t, n]) => (lines[t] || 0) < n).map(([t]) => t);
  return {ready: charts.length > 0 && missing.length === 0, charts: charts.length, missing};
})()
"""

# Charts of the category with no data (MFU on a CPU, NVML without a GPU) are
# hidden, so that the shot holds only charts that show something; so is the
# dashboards' settings sidebar, so that the charts get the shot's width.
_JS_HIDE_EMPTY = """
(() => {
  const wanted = %(wanted)s;
  const shown = %(shown)s;
  const charts = deepAll(document).filter((e) => CHART_CARDS.includes(e.tagName.toLowerCase()));
  const hidden = [];
  for (const c of charts) {
    if (!(c.title in wanted)) { c.style.display = 'none'; if (shown.includes(c.title)) hidden.push(c.title); }
  }
  for (const e of deepAll(document)) { if (e.id === 'sidebar') e.style.display = 'none'; }
  return hidden;
})()
"""

_JS_OPEN_CATEGORY = """
(() => {
  const titles = %(titles)s;
  const panes = deepAll(document).filter((e) => e.tagName.toLowerCase() === 'tf-category-paginated-view');
  for (const pane of panes) {
    if (pane.category && titles.includes(pane.category.name)) { pane.opened = true; }
    else if (pane.category) { pane.opened = false; }  // keep the shot to these categories
  }
  return true;
})()
"""

_JS_CATEGORY_BOX = """
(() => {
  const title = %(title)s;
  const pane = deepAll(document).find((e) => e.tagName.toLowerCase() === 'tf-category-paginated-view' && e.category && e.category.name === title);
  if (!pane) return null;
  const r = pane.getBoundingClientRect();
  return {top: r.top + scrollY, bottom: r.bottom + scrollY};
})()
"""

_JS_TEXT_READY = """
(() => {
  const wanted = %(wanted)s;  // tags whose Markdown must be rendered and visible
  const loaders = deepAll(document).filter((e) => e.tagName.toLowerCase() === 'tf-text-loader' && e.getBoundingClientRect().height > 0);
  const rendered = loaders.filter((e) => deepAll(e.shadowRoot || e).some((x) => ['table', 'p'].includes(x.tagName.toLowerCase())));
  const shown = new Set(rendered.map((e) => e.tag));
  const missing = wanted.filter((t) => !shown.has(t));
  return {ready: missing.length === 0, visible: loaders.length, missing};
})()
"""


# ----------------------------------------------------------------- the demo

# As the pages' outputs are made (tools/docs_outputs.py): a CPU, TensorFlow's oneDNN ops off (their default on CPUs
# without AVX-512, where TensorFlow keeps no CPU allocator statistics), TensorFlow's log lines off.
_PINNED = {"CUDA_VISIBLE_DEVICES": "", "TF_ENABLE_ONEDNN_OPTS": "0", "TF_CPP_MIN_LOG_LEVEL": "2"}


def _environment(**extra: str) -> dict[str, str]:
    """The environment of every command the script starts: this repository's keras_gpu first on `PYTHONPATH`.

    The demos, `keras-gpu report` and TensorBoard (whose keras-gpu tab is the
    package's plugin) then run the code of the checkout the script is in,
    wherever it is started from and whichever keras-gpu is installed.
    """
    path = os.pathsep.join(p for p in (_REPO, os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, **_PINNED, "PYTHONPATH": path, **extra}


def _run_demo(log_dir: str, epochs: int, samples: int, spread: tuple[str, str] = ("--cpu-replicas", "2")) -> None:
    cmd = [
        sys.executable, "-m", "keras_gpu.cli", "demo", *spread, "--profile-every-s", "2",
        "--epochs", str(epochs), "--samples", str(samples), "--log-dir", log_dir,
    ]
    print(f"running: {' '.join(cmd)}", flush=True)
    proc = subprocess.run(cmd, env=_environment(), capture_output=True, text=True, timeout=900, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"keras-gpu demo failed with exit {proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")


# -------------------------------------------------------------- tensorboard


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as resp:
        return json.loads(resp.read())


@contextlib.contextmanager
def _tensorboard(log_dir: str, timeout: float) -> Iterator[str]:
    """Start `tensorboard` on 127.0.0.1, wait until it serves keras-gpu's data, stop it by its pid."""
    port = _free_port()
    cmd = [
        sys.executable, "-m", "tensorboard.main", "--logdir", log_dir, "--host", "127.0.0.1",
        "--port", str(port), "--load_fast", "false",
    ]
    base = f"http://127.0.0.1:{port}"
    with tempfile.TemporaryFile() as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=_environment())
        try:
            deadline = time.monotonic() + timeout
            while not _serves_keras_gpu_data(base):
                if proc.poll() is not None:
                    log.seek(0)
                    raise RuntimeError(f"tensorboard exited with {proc.returncode}:\n{log.read().decode()[-3000:]}")
                if time.monotonic() > deadline:
                    raise TimeoutError(f"tensorboard at {base} showed no keras-gpu data within {timeout:.0f} s")
                time.sleep(0.5)
            print(f"tensorboard serving {log_dir} at {base} (pid {proc.pid})", flush=True)
            yield base
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=10)


def _serves_keras_gpu_data(base: str) -> bool:
    """Whether the server already lists keras-gpu's throughput scalars and placement texts."""
    try:
        scalars = _get_json(f"{base}/data/plugin/scalars/tags")
        texts = _get_json(f"{base}/data/plugin/text/tags")
    except (urllib.error.URLError, ConnectionError, OSError, ValueError):
        return False
    scalar_tags = {t for run in scalars.values() for t in run}
    text_tags = {t for tags in texts.values() for t in tags}
    return any(t.startswith("throughput/") for t in scalar_tags) and any(t.startswith("placement/") for t in text_tags)


# ------------------------------------------------------------------ browser


def _browser(chromium: str, profile: str) -> Browser:
    """Chromium at the shots' size, with the helpers the page scripts use."""
    return Browser(chromium, profile, width=_WIDTH, height=_HEIGHT, scale=_SCALE, prelude=_JS_DEEP)


# -------------------------------------------------------------- the shots


def _scalar_tags(base: str) -> set[str]:
    return {t for run in _get_json(f"{base}/data/plugin/scalars/tags").values() for t in run}


def _shoot_custom_scalars(browser: Browser, base: str, out: str, timeout: float, word: str = "throughput") -> None:
    """The categories whose title holds `word` (the cluster's two: its index charts, then the others), from the top."""
    layout = _get_json(f"{base}/data/plugin/custom_scalars/layout")
    tags = _scalar_tags(base)
    categories = [c for c in layout["category"] if word in c["title"]]
    wanted = {}
    for chart in (chart for category in categories for chart in category["chart"]):
        if "multiline" in chart:
            patterns = chart["multiline"]["tag"]
        else:  # a margin chart names each series' tag
            patterns = ["^" + re.escape(series["value"]) + "$" for series in chart["margin"]["series"]]
        n = sum(1 for t in tags if any(re.search(p, t) for p in patterns))
        if n:
            wanted[chart["title"]] = n
    if not wanted:
        raise RuntimeError(f"no {word} chart of the layout matches a logged tag: {sorted(tags)}")
    browser.open(f"{base}/?forceSVG=true#custom_scalars&_smoothingWeight=0", timeout)
    # Later categories start collapsed: open these, close the others.
    browser.evaluate(_JS_OPEN_CATEGORY % {"titles": json.dumps([c["title"] for c in categories])})
    browser.wait_until(_JS_CUSTOM_SCALARS_READY % {"wanted": json.dumps(wanted)}, timeout, "Custom Scalars")
    titles = [chart["title"] for category in categories for chart in category["chart"]]
    hidden = browser.evaluate(_JS_HIDE_EMPTY % {"wanted": json.dumps(wanted), "shown": json.dumps(titles)})
    if hidden:
        print(f"left out of {os.path.basename(out)}, no data: {', '.join(hidden)}", flush=True)
    time.sleep(1.0)  # the layout settles without the hidden charts
    boxes = [browser.evaluate(_JS_CATEGORY_BOX % {"title": json.dumps(c["title"])}) for c in categories]
    boxes = [b for b in boxes if b]
    clip = None
    if boxes:
        top = max(0, int(min(b["top"] for b in boxes)) - 8)
        bottom = int(max(b["bottom"] for b in boxes)) + 16
        clip = {"x": 0, "y": top, "width": _WIDTH, "height": min(_MAX_HEIGHT, bottom - top)}
    browser.screenshot(out, clip)


def _shoot_timeseries(browser: Browser, base: str, out: str, timeout: float) -> None:
    pattern = r"^(throughput|memory)/"
    expected = sum(1 for t in _scalar_tags(base) if re.search(pattern, t))
    query = urllib.parse.urlencode({"forceSVG": "true", "smoothing": "0", "tagFilter": pattern})
    browser.open(f"{base}/?{query}#timeseries", timeout)
    browser.wait_until(_JS_TIMESERIES_READY % {"expected": expected}, timeout, "Time Series")
    browser.screenshot(out, {"x": 0, "y": 0, "width": _WIDTH, "height": _MAX_HEIGHT})


def _shoot_text(browser: Browser, base: str, out: str, timeout: float) -> None:
    texts = _get_json(f"{base}/data/plugin/text/tags")
    shown = ("placement/cpu_fallbacks", "placement/ops_per_device", "placement/strategy")
    present = sorted({t for tags in texts.values() for t in tags if t in shown})
    if not present:
        raise RuntimeError(f"the run has none of the placement texts {shown}: {texts}")
    tag_filter = "placement/(" + "|".join(t.split("/", 1)[1] for t in present) + ")$"
    browser.open(f"{base}/#text&tagFilter={urllib.parse.quote(tag_filter)}", timeout)
    browser.wait_until(_JS_TEXT_READY % {"wanted": json.dumps(present)}, timeout, "Text")
    # Only the pane of the filtered tags, not the full "placement" pane below it.
    box = browser.evaluate(_JS_CATEGORY_BOX % {"title": json.dumps(tag_filter)})
    clip = {"x": 0, "y": 0, "width": _WIDTH, "height": min(_MAX_HEIGHT, int(box["bottom"]) + 16)} if box else None
    browser.screenshot(out, clip)


_JS_TAB_READY = """
(() => {
  const frame = deepAll(document).find((e) => e.tagName === 'IFRAME' && e.src.includes('name=keras_gpu'));
  const doc = frame ? frame.contentDocument : document;
  const state = doc && doc.body && doc.body.dataset.state;
  return {ready: state === 'drawn' && doc.querySelectorAll('svg.chart').length > 0, state};
})()
"""

_JS_TAB_PART_BOX = """
(() => {
  const part = document.querySelector('section.part[data-part=%(part)s]');
  if (!part) return null;
  const r = part.getBoundingClientRect();
  return {top: r.top + scrollY, bottom: r.bottom + scrollY};
})()
"""


def _tab_listed(base: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not (_get_json(f"{base}/data/plugins_listing").get("keras_gpu") or {}).get("enabled"):
        if time.monotonic() > deadline:
            raise TimeoutError(f"tensorboard at {base} did not list the keras-gpu tab as active within {timeout:.0f} s")
        time.sleep(0.5)


def _shoot_tab(browser: Browser, base: str, out: str, timeout: float) -> None:
    """The keras-gpu tab in TensorBoard's page: its header, the tab bar, and the tab's first sections."""
    _tab_listed(base, timeout)
    browser.open(f"{base}/#keras_gpu", timeout)
    browser.wait_until(_JS_TAB_READY, timeout, "the keras-gpu tab")
    browser.screenshot(out, {"x": 0, "y": 0, "width": _WIDTH, "height": _MAX_HEIGHT})


def _shoot_tab_part(browser: Browser, base: str, out: str, timeout: float, part: str) -> None:
    """One section of the keras-gpu tab (`part`: its `data-part`), from the tab's own page."""
    _tab_listed(base, timeout)
    browser.open(f"{base}/data/plugin_entry.html?name=keras_gpu", timeout)
    browser.wait_until(_JS_TAB_READY, timeout, "the keras-gpu tab")
    box = browser.evaluate(_JS_TAB_PART_BOX % {"part": part})
    if not box:
        raise RuntimeError(f"the keras-gpu tab has no {part} section")
    top = max(0, int(box["top"]) - 8)
    browser.screenshot(out, {"x": 0, "y": top, "width": _WIDTH, "height": min(_MAX_HEIGHT, int(box["bottom"]) + 8 - top)})


_REPORT_PAGE = """<!doctype html><meta charset="utf-8"><style>
body {{ margin: 0; background: #1e1e1e; }}
pre {{ margin: 0; padding: 12px 14px; color: #e6e6e6; font: 12.5px/1.35 "DejaVu Sans Mono", monospace; }}
.cmd {{ color: #8ec07c; }}
</style><pre><span class="cmd">$ keras-gpu report {name}</span>
{text}</pre>"""


def _shoot_report(browser: Browser, log_dir: str, out: str, timeout: float) -> None:
    """`keras-gpu report LOG_DIR` as a terminal shows it: its real output, drawn in a monospace page."""
    env = _environment(COLUMNS="110")
    # Run beside the log dir, so that the command and the report name it as a user would see it.
    parent, name = os.path.split(os.path.abspath(log_dir))
    proc = subprocess.run(
        [sys.executable, "-m", "keras_gpu.cli", "report", name], env=env, capture_output=True, text=True,
        timeout=timeout, check=False, cwd=parent,
    )
    if proc.returncode != 0 or "Throughput" not in proc.stdout:
        raise RuntimeError(f"keras-gpu report failed with exit {proc.returncode}:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    page = _REPORT_PAGE.format(name=html.escape(name), text=html.escape(proc.stdout.rstrip()))
    with tempfile.NamedTemporaryFile("w", suffix=".html", delete=False, encoding="utf-8") as f:
        f.write(page)
    try:
        browser.call("Page.navigate", {"url": f"file://{f.name}"}, session=True)
        browser.wait_until("({ready: document.readyState === 'complete' && !!document.querySelector('pre')})", timeout, "report")
        size = browser.evaluate("({w: document.querySelector('pre').scrollWidth, h: document.body.scrollHeight})")
        width = max(_WIDTH, int(size["w"]))
        browser.screenshot(out, {"x": 0, "y": 0, "width": width, "height": min(_MAX_HEIGHT, int(size["h"]))})
    finally:
        os.unlink(f.name)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--log-dir", help="an existing keras-gpu log dir (default: run the demo into a temporary one)")
    parser.add_argument(
        "--cluster-log-dir", help="an existing multi-worker log dir (default: run `keras-gpu demo --workers 2`)"
    )
    parser.add_argument("--out-dir", default=os.path.dirname(os.path.abspath(__file__)), help="where the PNGs go (default: docs/)")
    parser.add_argument("--chromium", help="the Chromium executable (default: chromium on PATH)")
    parser.add_argument("--epochs", type=int, default=5, help="demo epochs (default: 5)")
    parser.add_argument("--samples", type=int, default=16384, help="demo samples per epoch (default: 16384)")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for each page (default: 120)")
    parser.add_argument("--only", nargs="+", metavar="PNG", help="take only these shots (e.g. tensorboard_tab.png)")
    args = parser.parse_args(argv)
    if args.epochs < 1 or args.samples < 1:
        parser.error(f"--epochs and --samples must be >= 1. Received: --epochs {args.epochs} --samples {args.samples}")
    if args.log_dir is not None and not os.path.isdir(args.log_dir):
        parser.error(f"--log-dir must be an existing directory. Received: --log-dir {args.log_dir}")
    if args.cluster_log_dir is not None and not os.path.isdir(args.cluster_log_dir):
        parser.error(
            f"--cluster-log-dir must be an existing directory. Received: --cluster-log-dir {args.cluster_log_dir}"
        )
    names = ("tensorboard.png", "tensorboard_time.png", "tensorboard_memory.png", "tensorboard_scalars.png",
             "tensorboard_placement.png", "report.png", "tensorboard_tab.png", "tensorboard_cluster.png",
             "tensorboard_tab_cluster.png")
    unknown = sorted(set(args.only or ()) - set(names))
    if unknown:
        parser.error(f"--only takes the shots' names ({', '.join(names)}). Received: {' '.join(unknown)}")
    wanted = set(args.only or names)
    chromium = find_chromium(args.chromium)
    os.makedirs(args.out_dir, exist_ok=True)

    with tempfile.TemporaryDirectory(prefix="keras-gpu-screenshot-") as tmp:
        log_dir = args.log_dir or os.path.join(tmp, "demo")
        cluster_log_dir = args.cluster_log_dir or os.path.join(tmp, "cluster")
        if args.log_dir is None:
            _run_demo(log_dir, args.epochs, args.samples)
        if args.cluster_log_dir is None:
            _run_demo(cluster_log_dir, args.epochs, args.samples, ("--workers", "2"))
        out = functools.partial(os.path.join, args.out_dir)
        with _tensorboard(log_dir, args.timeout) as base:
            profile = os.path.join(tmp, "chromium-profile")
            browser = _browser(chromium, profile)
            try:
                # TensorBoard's own settings live in its origin's localStorage.
                browser.open(f"{base}/?forceSVG=true#timeseries", args.timeout)
                browser.evaluate(f"localStorage.setItem('_tb_global_settings', {json.dumps(json.dumps(_TB_SETTINGS))})")
                browser.evaluate("localStorage.setItem('_ignoreYOutliers', 'false')")  # the Polymer dashboards' own key
                if "tensorboard.png" in wanted:
                    _shoot_custom_scalars(browser, base, out("tensorboard.png"), args.timeout)
                if "tensorboard_time.png" in wanted:
                    _shoot_custom_scalars(browser, base, out("tensorboard_time.png"), args.timeout, "time goes")
                if "tensorboard_memory.png" in wanted:
                    _shoot_custom_scalars(browser, base, out("tensorboard_memory.png"), args.timeout, "memory")
                if "tensorboard_scalars.png" in wanted:
                    _shoot_timeseries(browser, base, out("tensorboard_scalars.png"), args.timeout)
                if "tensorboard_placement.png" in wanted:
                    _shoot_text(browser, base, out("tensorboard_placement.png"), args.timeout)
                if "report.png" in wanted:
                    _shoot_report(browser, log_dir, out("report.png"), args.timeout)
                if "tensorboard_tab.png" in wanted:
                    _shoot_tab(browser, base, out("tensorboard_tab.png"), args.timeout)
            finally:
                browser.close()
        with _tensorboard(cluster_log_dir, args.timeout) as base:
            browser = _browser(chromium, os.path.join(tmp, "chromium-profile-2"))
            try:
                browser.open(f"{base}/?forceSVG=true#timeseries", args.timeout)
                browser.evaluate(f"localStorage.setItem('_tb_global_settings', {json.dumps(json.dumps(_TB_SETTINGS))})")
                browser.evaluate("localStorage.setItem('_ignoreYOutliers', 'false')")
                if "tensorboard_cluster.png" in wanted:
                    _shoot_custom_scalars(browser, base, out("tensorboard_cluster.png"), args.timeout, "cluster")
                if "tensorboard_tab_cluster.png" in wanted:
                    _shoot_tab_part(browser, base, out("tensorboard_tab_cluster.png"), args.timeout, "cluster")
            finally:
                browser.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
