"""Smoke tests of the user's path: every example, the cluster job files and `keras-gpu demo`.

Each runnable example runs once, at a tiny size, in its own process (a
module-scoped fixture shared by the assertions on it); the test then checks
its exit status, its output, and that it wrote TensorBoard event files with
keras-gpu's tags. The SLURM and TFJob files cannot run here: they are checked
for syntax and for the fields their schedulers need, and the environment each
scheduler would give a worker is fed to `resolve_cluster` / `plan_strategy`
to check that `make_strategy()` would build the intended multi-worker job.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from keras_gpu.output.reader import find_runs, read_scalars
from tests._util import REPO, subprocess_env

EXAMPLES = REPO / "examples"
SBATCH = EXAMPLES / "slurm.sbatch"
TFJOB = EXAMPLES / "tfjob.yaml"
RUN_TIMEOUT = 240

pytestmark = pytest.mark.timeout(600)


# ------------------------------------------------------------------- helpers


def _run(cmd: list[str], cwd: Path, timeout: float = RUN_TIMEOUT) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=cwd, env=subprocess_env(), capture_output=True, text=True, timeout=timeout, check=False)


def _explain(proc: subprocess.CompletedProcess) -> str:
    return f"exit {proc.returncode}\n--- stdout ---\n{proc.stdout[-4000:]}\n--- stderr ---\n{proc.stderr[-6000:]}"


def _tags_by_run(log_dir: Path) -> dict[str, set[str]]:
    """Scalar tags of every run directory under `log_dir` (relative run path -> tags)."""
    return {run: set(read_scalars(str(log_dir / run))) for run in find_runs(str(log_dir))}


def _assert_keras_gpu_scalars(tags: set[str], where: str) -> None:
    for tag in ("throughput/samples_per_sec", "throughput/steps_per_sec"):
        assert tag in tags, f"{where}: {tag} missing; scalar tags: {sorted(tags)}"
    assert any(re.fullmatch(r"memory/allocator/[^/]+/peak_bytes", t) for t in tags), f"{where}: {sorted(tags)}"
    assert "memory/host/rss_bytes" in tags, f"{where}: {sorted(tags)}"


def _replica_tags(tags: set[str]) -> set[str]:
    """The per-replica step-time series: one per replica, measured on that replica."""
    return {t for t in tags if re.fullmatch(r"step_time/replica_[^/]+/compute_sec", t)}


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    # Examples run from a scratch directory so that relative default paths
    # (runs/...) never land in the repository.
    return tmp_path_factory.mktemp("examples")


# -------------------------------------------------------- add_callbacks.py


@pytest.fixture(scope="module")
def add_callbacks_run(work):
    log_dir = work / "add_callbacks"
    proc = _run(
        [sys.executable, str(EXAMPLES / "add_callbacks.py"), "--log-dir", str(log_dir), "--epochs", "2", "--samples", "256"],
        cwd=work,
    )
    return proc, log_dir


@pytest.mark.slow
def test_add_callbacks_example_trains_and_logs(add_callbacks_run):
    proc, log_dir = add_callbacks_run
    assert proc.returncode == 0, _explain(proc)
    assert re.search(r"^final loss \d+\.\d{4}$", proc.stdout, re.MULTILINE), proc.stdout
    runs = _tags_by_run(log_dir)
    assert "train" in runs, f"no event files in {log_dir}/train: {runs}"
    _assert_keras_gpu_scalars(runs["train"], "add_callbacks")
    # Two epochs of 256 samples (10% held out for validation) in batches of 64:
    # the throughput series covers both epochs.
    steps = [s for s, _ in read_scalars(str(log_dir / "train"))["throughput/samples_per_sec"]]
    assert steps == sorted(steps) and steps[-1] >= 4, steps


# ------------------------------------------- log_to_csv.py, resume_after_failure.py


@pytest.mark.slow
def test_log_to_csv_example_records_the_measured_numbers(work):
    csv_path = work / "log_to_csv.csv"
    proc = _run(
        [sys.executable, str(EXAMPLES / "log_to_csv.py"), "--csv", str(csv_path), "--log-dir", str(work / "log_to_csv")],
        cwd=work,
    )
    assert proc.returncode == 0, _explain(proc)
    header = csv_path.read_text().splitlines()[0].split(",")
    for column in ("throughput/samples_per_sec", "throughput/steady_samples_per_sec", "memory/host/peak_rss_bytes"):
        assert column in header, header
    # No guess where nothing was measured: no MFU on a CPU.
    assert "throughput/mfu" not in header, header
    rate = re.search(r"^throughput/samples_per_sec +(\S+)$", proc.stdout, re.MULTILINE)
    assert rate is not None and float(rate.group(1)) > 0, proc.stdout


@pytest.mark.slow
def test_resume_example_continues_from_the_backup(work):
    proc = _run(
        [sys.executable, str(EXAMPLES / "resume_after_failure.py"), "--backup-dir", str(work / "backup")], cwd=work
    )
    assert proc.returncode == 0, _explain(proc)
    lines = [line for line in proc.stdout.splitlines() if line.startswith(("finished", "first run"))]
    assert lines == [
        "finished epoch 1",
        "finished epoch 2",
        "first run stopped: simulated failure in epoch 3",
        "finished epoch 3",
        "finished epoch 4",
    ], proc.stdout


# ---------------------------------------------------------- mirrored_fit.py


@pytest.fixture(scope="module")
def mirrored_run(work):
    log_dir = work / "mirrored"
    proc = _run(
        [
            # Two epochs: the second gets the step-time trace that measures each replica.
            sys.executable, str(EXAMPLES / "mirrored_fit.py"), "--cpu-replicas", "2", "--epochs", "2",
            "--samples", "256", "--log-dir", str(log_dir),
        ],
        cwd=work,
    )
    return proc, log_dir


@pytest.mark.slow
def test_mirrored_example_trains_on_two_replicas(mirrored_run):
    proc, log_dir = mirrored_run
    assert proc.returncode == 0, _explain(proc)
    assert re.search(r"^2 replicas, global batch 64, loss \d", proc.stdout, re.MULTILINE), proc.stdout
    runs = _tags_by_run(log_dir)
    assert "train" in runs, runs
    _assert_keras_gpu_scalars(runs["train"], "mirrored_fit")
    assert len(_replica_tags(runs["train"])) == 2, sorted(runs["train"])


# ------------------------------------------------------- multiworker_fit.py


@pytest.fixture(scope="module")
def multiworker_help() -> str:
    """`--help` of the multi-worker example: argparse runs before TensorFlow is imported, so this is cheap."""
    proc = _run([sys.executable, str(EXAMPLES / "multiworker_fit.py"), "--help"], cwd=REPO, timeout=60)
    assert proc.returncode == 0, _explain(proc)
    return proc.stdout


def test_multiworker_example_is_trained_by_the_launch_tests(multiworker_help):
    # The two-worker training run of this example lives in tests/test_cli_launch.py
    # (identical loss history and weights on both workers); here only check that
    # it is still wired up there, and that the script's interface is what the
    # launch, SLURM and TFJob files use.
    launch_tests = (REPO / "tests" / "test_cli_launch.py").read_text()
    assert 'REPO / "examples" / "multiworker_fit.py"' in launch_tests
    assert re.search(r"_launch\([^)]*\bEXAMPLE\b", launch_tests), "no launch test runs the example"
    for flag in ("--out", "--epochs", "--batch-size", "--samples"):
        assert flag in multiworker_help, flag


def _assert_flags_exist(args: list[str], help_text: str, where: str) -> None:
    flags = [a.split("=", 1)[0] for a in args if a.startswith("--")]
    assert flags, f"{where}: no arguments passed to the example: {args}"
    unknown = [f for f in flags if not re.search(rf"(?<![\w-]){re.escape(f)}(?![\w-])", help_text)]
    assert not unknown, f"{where} passes options the example does not have: {unknown}"


# ------------------------------------------------------------ slurm.sbatch


def _sbatch_directives(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        m = re.match(r"^#SBATCH\s+--([\w-]+)(?:[= ](\S+))?", line)
        if m:
            out[m.group(1)] = m.group(2) or ""
    return out


def _srun_line(text: str) -> list[str]:
    text = text.replace("\\\n", " ")  # a command continued over lines is one command
    lines = [ln for ln in text.splitlines() if re.match(r"^\s*srun\s", ln)]
    assert len(lines) == 1, f"expected one srun line, found {lines}"
    return shlex.split(lines[0])


def test_sbatch_script_parses_and_asks_for_nodes_tasks_and_gpus():
    text = SBATCH.read_text()
    proc = subprocess.run(["bash", "-n", str(SBATCH)], capture_output=True, text=True, timeout=30, check=False)
    assert proc.returncode == 0, proc.stderr
    assert text.startswith("#!/bin/bash\n")
    directives = _sbatch_directives(text)
    for key in ("nodes", "ntasks-per-node", "gpus-per-node", "time", "job-name"):
        assert key in directives, f"#SBATCH --{key} missing: {directives}"
    for key in ("nodes", "ntasks-per-node", "gpus-per-node"):
        assert directives[key].isdigit() and int(directives[key]) >= 1, (key, directives[key])
    # sbatch stops reading directives at the first command.
    lines = text.splitlines()
    last_directive = max(i for i, ln in enumerate(lines) if ln.startswith("#SBATCH"))
    first_command = min(i for i, ln in enumerate(lines) if ln.strip() and not ln.lstrip().startswith("#"))
    assert last_directive < first_command, "an #SBATCH line comes after a command and would be ignored"
    assert "set -euo pipefail" in text


def test_sbatch_srun_line_runs_an_existing_example_with_its_options(multiworker_help):
    argv = _srun_line(SBATCH.read_text())
    python_at = next(i for i, a in enumerate(argv) if a in ("python", "python3"))
    script = argv[python_at + 1]
    assert (REPO / script).is_file(), f"srun runs {script}, which does not exist"
    assert script == "examples/multiworker_fit.py"
    _assert_flags_exist(argv[python_at + 2 :], multiworker_help, "slurm.sbatch")
    assert "--kill-on-bad-exit=1" in argv[:python_at]


def _slurm_env(nodes: int, tasks_per_node: int, gpus_per_node: int, procid: int) -> dict[str, str]:
    """The step variables `srun` gives task `procid` of a job on nodes gpu[01-NN]."""
    nodelist = f"gpu[01-{nodes:02d}]" if nodes > 1 else "gpu01"
    return {
        "SLURM_JOB_ID": "4242",
        "SLURM_PROCID": str(procid),
        "SLURM_STEP_NUM_TASKS": str(nodes * tasks_per_node),
        "SLURM_STEP_NODELIST": nodelist,
        "SLURM_STEP_TASKS_PER_NODE": f"{tasks_per_node}(x{nodes})" if nodes > 1 else str(tasks_per_node),
        "SLURM_NODEID": str(procid // tasks_per_node),
        "CUDA_VISIBLE_DEVICES": ",".join(str(g) for g in range(gpus_per_node)),
    }


def test_sbatch_job_resolves_to_one_worker_per_task():
    from keras_gpu.core.cluster import resolve_cluster
    from keras_gpu.setup.strategy import LocalDevices, plan_strategy

    d = _sbatch_directives(SBATCH.read_text())
    nodes, per_node, gpus = int(d["nodes"]), int(d["ntasks-per-node"]), int(d["gpus-per-node"])
    expected = tuple(f"gpu{n + 1:02d}:{8888 + slot}" for n in range(nodes) for slot in range(per_node))
    for procid in range(nodes * per_node):
        env = _slurm_env(nodes, per_node, gpus, procid)
        info = resolve_cluster(environ=env)
        assert info.source == "slurm"
        assert info.cluster == {"worker": expected}
        assert (info.task_type, info.task_index, info.worker_index) == ("worker", procid, procid)
        assert info.is_chief == (procid == 0)
        plan = plan_strategy(environ=env, local_devices=LocalDevices(gpus=("/device:GPU:0",)))
        assert plan.kind == "multiworker", plan.describe()
        assert plan.cluster.num_workers == nodes * per_node


# --------------------------------------------------------------- tfjob.yaml


@pytest.fixture(scope="module")
def tfjob() -> dict:
    yaml = pytest.importorskip("yaml", reason="PyYAML is in the [test] extra")
    docs = list(yaml.safe_load_all(TFJOB.read_text()))
    assert len(docs) == 1, f"expected one manifest, found {len(docs)}"
    return docs[0]


def _worker_container(tfjob: dict) -> dict:
    pod = tfjob["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]
    (container,) = [c for c in pod["containers"] if c["name"] == "tensorflow"]
    return container


def test_tfjob_has_the_fields_the_training_operator_needs(tfjob):
    assert tfjob["apiVersion"] == "kubeflow.org/v1"
    assert tfjob["kind"] == "TFJob"
    assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", tfjob["metadata"]["name"]), tfjob["metadata"]["name"]
    specs = tfjob["spec"]["tfReplicaSpecs"]
    assert set(specs) <= {"Chief", "Worker", "PS", "Evaluator", "Master"}, set(specs)
    worker = specs["Worker"]
    assert isinstance(worker["replicas"], int) and worker["replicas"] >= 2
    assert worker["restartPolicy"] in ("Always", "OnFailure", "Never", "ExitCode")
    container = _worker_container(tfjob)
    assert container["image"] and ":" in container["image"], "pin the image with a tag"
    # A Kubernetes quantity: 1 or "1"; GPUs cannot be fractional.
    gpus = container["resources"]["limits"]["nvidia.com/gpu"]
    assert re.fullmatch(r"[1-9]\d*", str(gpus)), f"nvidia.com/gpu must be a whole number >= 1, got {gpus!r}"
    # The operator builds TF_CONFIG from the port named tfjob-port (default 2222).
    ports = {p.get("name"): p["containerPort"] for p in container.get("ports", [])}
    assert ports.get("tfjob-port") == 2222, ports
    # Every mounted volume is declared in the pod.
    pod = specs["Worker"]["template"]["spec"]
    declared = {v["name"] for v in pod.get("volumes", [])}
    assert {m["name"] for m in container.get("volumeMounts", [])} <= declared


def test_tfjob_command_runs_an_existing_example_with_its_options(tfjob, multiworker_help):
    container = _worker_container(tfjob)
    argv = [*container.get("command", []), *container.get("args", [])]
    assert all(isinstance(a, str) for a in argv), f"YAML turned an argument into a non-string: {argv}"
    assert argv[0] in ("python", "python3"), argv
    script = argv[1]
    if not os.path.isabs(script):
        script_in_repo = REPO / script
        assert container.get("workingDir"), "a relative script path needs workingDir"
    else:
        script_in_repo = REPO / os.path.relpath(script, container.get("workingDir", "/"))
    assert script_in_repo.is_file(), f"the container runs {script}, which is not an example of this repository"
    _assert_flags_exist(argv[2:], multiworker_help, "tfjob.yaml")
    out = argv[argv.index("--out") + 1]
    mounts = [m["mountPath"] for m in container.get("volumeMounts", [])]
    assert any(out == m or out.startswith(m.rstrip("/") + "/") for m in mounts), (
        f"--out {out} is not on a mounted volume {mounts}: results would vanish with the pod"
    )


def test_tfjob_tf_config_resolves_to_its_workers(tfjob):
    from keras_gpu.core.cluster import resolve_cluster
    from keras_gpu.setup.strategy import LocalDevices, plan_strategy

    name = tfjob["metadata"]["name"]
    n = tfjob["spec"]["tfReplicaSpecs"]["Worker"]["replicas"]
    addresses = [f"{name}-worker-{i}.default.svc:2222" for i in range(n)]
    for i in range(n):
        # What the training operator puts in each worker pod's environment.
        tf_config = {"cluster": {"worker": addresses}, "task": {"type": "worker", "index": i}, "environment": "cloud"}
        env = {"TF_CONFIG": json.dumps(tf_config)}
        info = resolve_cluster(environ=env)
        assert info.source == "tf_config"
        assert info.cluster == {"worker": tuple(addresses)}
        assert info.worker_index == i and info.is_chief == (i == 0)
        plan = plan_strategy(environ=env, local_devices=LocalDevices(gpus=("/device:GPU:0",)))
        assert plan.kind == "multiworker" and plan.cluster.num_workers == n


# ---------------------------------------------------------- examples index


def test_examples_readme_lists_every_example():
    index = (EXAMPLES / "README.md").read_text()
    files = sorted(p.name for p in EXAMPLES.iterdir() if p.is_file() and p.name != "README.md")
    assert len(files) >= 5, files
    missing = [f for f in files if f"]({f})" not in index]
    assert not missing, f"examples/README.md does not link {missing}"


# ------------------------------------------------------------ keras-gpu demo


def _demo(work: Path, name: str, *args: str, epochs: int = 1) -> tuple[subprocess.CompletedProcess, Path]:
    log_dir = work / name
    script = Path(sys.executable).parent / "keras-gpu"
    cmd = [str(script)] if script.exists() else [sys.executable, "-m", "keras_gpu.cli"]
    proc = _run([*cmd, "demo", "--epochs", str(epochs), "--samples", "256", "--log-dir", str(log_dir), *args], cwd=work)
    return proc, log_dir


@pytest.fixture(scope="module")
def demo_run(work):
    return _demo(work, "demo")


@pytest.fixture(scope="module")
def demo_replicas_run(work):
    # Two epochs: the second gets the step-time trace that measures each replica.
    return _demo(work, "demo_replicas", "--cpu-replicas", "2", epochs=2)


@pytest.fixture(scope="module")
def demo_workers_run(work):
    return _demo(work, "demo_workers", "--workers", "2")


def _assert_demo_output(proc: subprocess.CompletedProcess, log_dir: Path) -> None:
    assert proc.returncode == 0, _explain(proc)
    out = proc.stdout
    assert re.search(rf"^\s+tensorboard --logdir {re.escape(shlex.quote(str(log_dir)))}$", out, re.MULTILINE), out
    # The report tables (the same as `keras-gpu report`) come before the command.
    assert "Throughput" in out and "Peak memory" in out, out
    assert out.index("Throughput") < out.index("tensorboard --logdir")


@pytest.mark.slow
def test_demo_trains_logs_and_prints_the_next_steps(demo_run):
    proc, log_dir = demo_run
    _assert_demo_output(proc, log_dir)
    assert "(1 replica(s))" in proc.stdout
    runs = _tags_by_run(log_dir)
    assert list(runs) == ["train"], runs
    _assert_keras_gpu_scalars(runs["train"], "demo")


@pytest.mark.slow
def test_demo_with_two_cpu_replicas(demo_replicas_run):
    proc, log_dir = demo_replicas_run
    _assert_demo_output(proc, log_dir)
    assert "MirroredStrategy (2 replica(s))" in proc.stdout, proc.stdout
    tags = _tags_by_run(log_dir)["train"]
    _assert_keras_gpu_scalars(tags, "demo --cpu-replicas 2")
    assert len(_replica_tags(tags)) == 2, sorted(tags)


@pytest.mark.slow
def test_demo_with_two_workers_through_launch(demo_workers_run):
    proc, log_dir = demo_workers_run
    _assert_demo_output(proc, log_dir)
    assert re.search(r"^Launching 2 workers: .* launch -n 2 ", proc.stdout, re.MULTILINE), proc.stdout
    for rank in (0, 1):
        assert re.search(rf"^\[worker {rank}\] Training a small CNN .* \(2 replica\(s\)\)", proc.stdout, re.MULTILINE), (
            proc.stdout
        )
    runs = _tags_by_run(log_dir)
    # The chief writes to train/, worker 1 to worker_1/train/.
    assert {"train", os.path.join("worker_1", "train")} <= set(runs), runs
    for run in ("train", os.path.join("worker_1", "train")):
        _assert_keras_gpu_scalars(runs[run], f"demo --workers 2, {run}")
    # The summary after the launch covers both workers.
    assert "worker 1" in proc.stdout, proc.stdout


# ------------------------------------------------------- docs screenshots

DOCS = REPO / "docs"
SCREENSHOTS = (
    "tensorboard.png", "tensorboard_time.png", "tensorboard_memory.png", "tensorboard_cluster.png",
    "tensorboard_scalars.png", "tensorboard_placement.png", "report.png", "tensorboard_tab.png",
    "tensorboard_tab_cluster.png",
)


@pytest.mark.parametrize("name", SCREENSHOTS)
def test_docs_screenshots_are_small_pngs(name):
    data = (DOCS / name).read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{name} is not a PNG"
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    # 800 CSS pixels (a page's width) at twice the density; the report is as wide as its widest table.
    assert (width == 1600 if name != "report.png" else 1600 <= width <= 2400), (name, width)
    assert 400 <= height <= 2200, (name, height)
    assert len(data) < 500 * 1024, f"{name} is {len(data) // 1024} KiB; keep screenshots under 500 KiB"


def test_screenshot_script_rejects_a_missing_log_dir(tmp_path):
    script = DOCS / "screenshot.py"
    missing = tmp_path / "no-such-run"
    proc = subprocess.run(
        [sys.executable, str(script), "--log-dir", str(missing), "--out-dir", str(tmp_path)],
        env=subprocess_env(), capture_output=True, text=True, timeout=60, check=False,
    )
    assert proc.returncode == 2, _explain(proc)
    assert f"--log-dir must be an existing directory. Received: --log-dir {missing}" in proc.stderr
    assert not list(tmp_path.glob("*.png"))


def test_screenshot_script_rejects_an_unknown_shot(tmp_path):
    proc = subprocess.run(
        [sys.executable, str(DOCS / "screenshot.py"), "--only", "nope.png", "--out-dir", str(tmp_path)],
        env=subprocess_env(), capture_output=True, text=True, timeout=60, check=False,
    )
    assert proc.returncode == 2, _explain(proc)
    assert "--only takes the shots' names (" in proc.stderr and "Received: nope.png" in proc.stderr


def test_screenshot_script_runs_this_checkout_in_every_command_it_starts(monkeypatch, tmp_path):
    # The demos, `keras-gpu report` and TensorBoard's keras-gpu tab must be this repository's code, whichever
    # keras-gpu is installed and wherever the script is started from.
    spec = importlib.util.spec_from_file_location("docs_screenshot", DOCS / "screenshot.py")
    screenshot = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(screenshot)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    env = screenshot._environment(COLUMNS="110")
    assert env["PYTHONPATH"].split(os.pathsep) == [str(REPO), str(tmp_path)]
    assert env["COLUMNS"] == "110" and env["CUDA_VISIBLE_DEVICES"] == ""
