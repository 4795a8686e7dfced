#!/usr/bin/env bash
# Packaging check: build the wheel and the sdist, check what each contains,
# install the wheel (with the `[cpu]` extra) into a fresh virtual environment
# and run the installed `keras-gpu` from outside the repository, so that a
# missing module, package-data or entry-point mistake cannot ship; then
# install the wheel with JAX alone (no TensorFlow) and train with the callbacks.
#
#   .ci/package_check.sh            # uses `python3` to build and for the fresh venv
#   PYTHON=/path/to/python .ci/package_check.sh
#
# Exits non-zero on the first problem. Temporary files are removed on exit.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-python3}"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/keras-gpu-package-check.XXXXXX")"
trap 'rm -rf "${WORK}"' EXIT

step() { printf '\n== %s\n' "$*"; }
fail() { printf 'package_check: FAIL: %s\n' "$*" >&2; exit 1; }

export TF_CPP_MIN_LOG_LEVEL=2 PIP_DISABLE_PIP_VERSION_CHECK=1
unset TF_CONFIG PYTHONPATH
for var in $(compgen -e | grep '^SLURM_' || true); do unset "${var}"; done

# The keras-gpu tab: `tensorboard --logdir LOGS` run from an environment lists it, active, and serves the
# same report as `keras-gpu report --json`.
check_tab() {
    local venv="$1" logs="$2"
    "${venv}/bin/python" - "${logs}" <<'PY' || fail "the keras-gpu tab is not served by ${venv}'s tensorboard"
import json, os, socket, subprocess, sys, time, urllib.parse, urllib.request

logs = sys.argv[1]
with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
bin_dir = os.path.dirname(sys.executable)
tb = subprocess.Popen([os.path.join(bin_dir, "tensorboard"), "--logdir", logs, "--host", "127.0.0.1", "--port", str(port)],
                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
base = f"http://127.0.0.1:{port}/data"
get = lambda path: json.loads(urllib.request.urlopen(base + path, timeout=30).read())
try:
    deadline = time.monotonic() + 120
    while True:
        try:
            tab = get("/plugins_listing").get("keras_gpu")
            if tab is None:
                sys.exit("tensorboard lists no keras_gpu plugin: the entry point did not install")
            if tab["enabled"]:
                break
        except OSError:
            pass
        if time.monotonic() > deadline or tb.poll() is not None:
            sys.exit("tensorboard did not list the keras-gpu tab as active within 120 s")
        time.sleep(0.5)
    (entry,) = get("/plugin/keras_gpu/log_dirs")["log_dirs"]
    served = get("/plugin/keras_gpu/report?" + urllib.parse.urlencode({"log_dir": entry["name"]}))
    printed = json.loads(subprocess.run([os.path.join(bin_dir, "keras-gpu"), "report", served["log_dir"], "--json"],
                                        capture_output=True, text=True, check=True).stdout)
    if served != printed:
        sys.exit("the tab's report route differs from keras-gpu report --json")
    js = urllib.request.urlopen(base + "/plugin/keras_gpu/index.js", timeout=30).read()
    if b"export async function render()" not in js:
        sys.exit("the tab's frontend was not served")
    print(f"the keras-gpu tab: active, {len(served['runs'])} run(s), the report as keras-gpu report --json")
finally:
    tb.terminate()
    tb.wait(10)
PY
}

# ---------------------------------------------------------------- build
step "build the sdist and the wheel"
"${PYTHON}" -m venv "${WORK}/build-venv"
"${WORK}/build-venv/bin/python" -m pip install --quiet build
# The sdist is built from a copy of the tracked and unignored files, so that
# local build outputs (build/, *.egg-info) cannot leak into it.
git -C "${REPO}" rev-parse --is-inside-work-tree >/dev/null 2>&1 \
    || fail "${REPO} is not a git checkout; the check ships exactly the tracked and unignored files"
mkdir "${WORK}/src"
(cd "${REPO}" && git ls-files -z --cached --others --exclude-standard) \
    | while IFS= read -r -d '' f; do
        # A tracked file deleted in the working tree is not part of what ships.
        if [[ -e "${REPO}/${f}" ]]; then printf '%s\0' "${f}"; fi
    done \
    | (cd "${REPO}" && xargs -0 --no-run-if-empty cp --parents -t "${WORK}/src")
[[ -f "${WORK}/src/pyproject.toml" ]] || fail "could not copy the source tree from ${REPO}"
"${WORK}/build-venv/bin/python" -m build --outdir "${WORK}/dist" "${WORK}/src" >"${WORK}/build.log" 2>&1 \
    || { tail -n 40 "${WORK}/build.log" >&2; fail "python -m build failed (log above)"; }
shopt -s nullglob
wheels=("${WORK}"/dist/keras_gpu-*.whl)
sdists=("${WORK}"/dist/keras_gpu-*.tar.gz)
shopt -u nullglob
[[ ${#wheels[@]} -eq 1 ]] || fail "expected one wheel in dist/, found: $(ls "${WORK}/dist")"
[[ ${#sdists[@]} -eq 1 ]] || fail "expected one sdist in dist/, found: $(ls "${WORK}/dist")"
WHEEL="${wheels[0]}"
SDIST="${sdists[0]}"
echo "built $(basename "${WHEEL}") and $(basename "${SDIST}")"

# ---------------------------------------------------------------- contents
step "check the wheel and sdist contents"
"${WORK}/build-venv/bin/python" - "${WHEEL}" "${SDIST}" "${REPO}" <<'PY'
import pathlib, subprocess, sys, tarfile, zipfile

wheel, sdist, repo = sys.argv[1], sys.argv[2], pathlib.Path(sys.argv[3])
problems = []

# The wheel holds the package and its metadata only.
names = zipfile.ZipFile(wheel).namelist()
tops = {n.split("/", 1)[0] for n in names}
dist_info = [t for t in tops if t.endswith(".dist-info")]
if len(dist_info) != 1:
    problems.append(f"wheel: expected one .dist-info folder, found {sorted(dist_info)}")
stray = sorted(tops - {"keras_gpu", *dist_info})
if stray:
    problems.append(f"wheel: unexpected top-level entries {stray} (only keras_gpu/ may ship)")
# Every module of the package is in the wheel.
tracked = subprocess.run(
    ["git", "ls-files", "--cached", "--others", "--exclude-standard", "keras_gpu"],
    cwd=repo, capture_output=True, text=True, check=True,
).stdout.split()
missing = sorted(p for p in tracked if p.endswith(".py") and p not in names)
if missing:
    problems.append(f"wheel: package modules missing: {missing}")
if any(n.startswith(("tests/", "benchmarks/", "examples/")) for n in names):
    problems.append("wheel: contains tests/, benchmarks/ or examples/")
meta = zipfile.ZipFile(wheel).read(f"{dist_info[0]}/entry_points.txt").decode() if dist_info else ""
if "keras-gpu = keras_gpu.cli.main:main" not in meta:
    problems.append(f"wheel: console script keras-gpu missing from entry_points.txt: {meta!r}")
if "[tensorboard_plugins]" not in meta or "keras_gpu = keras_gpu.tensorboard.plugin:KerasGpuPlugin" not in meta:
    problems.append(f"wheel: the keras-gpu tab's tensorboard_plugins entry point is missing: {meta!r}")
# The tab's frontend (package data, not modules) ships in both.
static = [f"keras_gpu/tensorboard/static/{n}" for n in ("index.js", "style.css")]
problems += [f"wheel: {f} missing" for f in static if f not in names]

# The sdist holds the sources, the tests and the examples.
members = tarfile.open(sdist).getnames()
root = members[0].split("/", 1)[0]
rel = {m.split("/", 1)[1] for m in members if "/" in m}
for required in ("pyproject.toml", "README.md", "CHANGELOG.md", "LICENSE", "mkdocs.yml", "keras_gpu/__init__.py",
                 "keras_gpu/cli/main.py", *static, "tests/conftest.py", "examples/add_callbacks.py",
                 "examples/mirrored_fit.py", "examples/multiworker_fit.py",
                 "examples/slurm.sbatch", "examples/tfjob.yaml"):
    if required not in rel:
        problems.append(f"sdist: {required} missing")
if not any(r.startswith("tests/test_") for r in rel):
    problems.append("sdist: no tests/test_*.py")
if any(".egg-info/" in r and not r.startswith("keras_gpu.egg-info/") for r in rel) or any(
    "__pycache__" in r for r in rel
):
    problems.append("sdist: contains build or cache files")

if problems:
    print("\n".join(problems), file=sys.stderr)
    sys.exit(1)
print(f"wheel: {len(names)} files, top level {sorted(tops)}")
print(f"sdist: {len(rel)} files under {root}/, tests and examples included")
PY

# ---------------------------------------------------------------- install
step "install the wheel with [cpu] into a fresh virtual environment"
"${PYTHON}" -m venv "${WORK}/venv"
"${WORK}/venv/bin/python" -m pip install --quiet "${WHEEL}[cpu]" \
    || fail "pip install ${WHEEL}[cpu] failed"
"${WORK}/venv/bin/python" -m pip check || fail "pip check found broken requirements"

# ---------------------------------------------------------------- run
step "run the installed keras-gpu from outside the repository"
RUN_DIR="${WORK}/run"
mkdir "${RUN_DIR}"
cd "${RUN_DIR}"
KG="${WORK}/venv/bin/keras-gpu"
[[ -x "${KG}" ]] || fail "the wheel installed no keras-gpu console script"
where="$("${WORK}/venv/bin/python" -c 'import keras_gpu, os; print(os.path.dirname(keras_gpu.__file__))')"
[[ "${where}" == "${WORK}/venv/"* ]] || fail "keras_gpu imported from ${where}, not from the fresh environment"

"${KG}" --version
"${KG}" env >"${WORK}/env.txt" 2>&1 || { cat "${WORK}/env.txt" >&2; fail "keras-gpu env failed"; }
grep -qi "tensorflow" "${WORK}/env.txt" || { cat "${WORK}/env.txt" >&2; fail "keras-gpu env did not report TensorFlow"; }
echo "keras-gpu env: ok ($(wc -l <"${WORK}/env.txt") lines)"

"${KG}" demo --epochs 1 --samples 256 --log-dir "${WORK}/logs" >"${WORK}/demo.txt" 2>&1 \
    || { tail -n 60 "${WORK}/demo.txt" >&2; fail "keras-gpu demo failed"; }
grep -q "tensorboard --logdir" "${WORK}/demo.txt" || { cat "${WORK}/demo.txt" >&2; fail "demo did not print the tensorboard command"; }
"${WORK}/venv/bin/python" - "${WORK}/logs" 2>"${WORK}/read.err" <<'PY' || { cat "${WORK}/read.err" >&2; fail "the demo's event files are not as expected"; }
import sys
from keras_gpu.output.reader import find_runs, read_scalars
import os

log_dir = sys.argv[1]
tags = set()
for run in find_runs(log_dir):
    tags |= set(read_scalars(os.path.join(log_dir, run)))
for prefix in ("throughput/", "memory/", "placement/"):
    if not any(t.startswith(prefix) for t in tags):
        sys.exit(f"the demo wrote no {prefix}* scalars; tags: {sorted(tags)}")
print(f"demo event files: {len(tags)} scalar tags")
PY
"${KG}" report "${WORK}/logs" >"${WORK}/report.txt" 2>&1 \
    || { cat "${WORK}/report.txt" >&2; fail "keras-gpu report failed on the demo's logs"; }
grep -q "Throughput" "${WORK}/report.txt" || { cat "${WORK}/report.txt" >&2; fail "keras-gpu report printed no throughput table"; }
echo "keras-gpu report: ok"
check_tab "${WORK}/venv" "${WORK}/logs"

# ---------------------------------------------------------------- without TensorFlow
step "install the wheel with JAX only (no TensorFlow) into a fresh virtual environment and train"
"${PYTHON}" -m venv "${WORK}/venv-jax"
"${WORK}/venv-jax/bin/python" -m pip install --quiet "${WHEEL}" "jax[cpu]" \
    || fail "pip install ${WHEEL} jax[cpu] failed"
"${WORK}/venv-jax/bin/python" -m pip check || fail "pip check found broken requirements (JAX environment)"
KERAS_BACKEND=jax "${WORK}/venv-jax/bin/python" - "${WORK}/logs-jax" 2>"${WORK}/jax.err" <<'PY' \
    || { cat "${WORK}/jax.err" >&2; fail "the callbacks did not train and log on JAX without TensorFlow"; }
import importlib.util, os, sys

import keras
import numpy as np

import keras_gpu
from keras_gpu.output.reader import read_scalars

if importlib.util.find_spec("tensorflow") is not None:
    sys.exit("TensorFlow is installed in the JAX-only environment")
model = keras.Sequential([keras.Input((16,)), keras.layers.Dense(8), keras.layers.Dense(1)])
model.compile("sgd", "mse")
x, y = np.zeros((256, 16), "float32"), np.zeros((256, 1), "float32")
model.fit(x, y, batch_size=32, epochs=1, verbose=0, callbacks=keras_gpu.callbacks(sys.argv[1], every_s=0.05))
tags = set(read_scalars(os.path.join(sys.argv[1], "train")))
for tag in ("throughput/samples_per_sec", "memory/host/rss_bytes"):
    if tag not in tags:
        sys.exit(f"no {tag} on JAX; tags: {sorted(tags)}")
print(f"JAX without TensorFlow: {len(tags)} scalar tags")
PY
check_tab "${WORK}/venv-jax" "${WORK}/logs-jax"

step "package check passed"
