"""Traces from every source read right or refused clearly: the data iterator's Python reads (and no other
`next()`), ROCm copies, TPU planes, traces without step markers, damaged files."""

from __future__ import annotations

import os
import shutil

import pytest

from keras_gpu.cli.main import main
from keras_gpu.meters import gpu_lines, python_input, xspace
from keras_gpu.meters import step_time as steptime
from keras_gpu.output.step_time_text import input_stage_markdown, read_input_stage_markdown
from tests._xspace import US
from tests._xspace import space as _space

FIXTURE = os.path.join(os.path.dirname(__file__), "data", "gpu_multi_worker.xplane.pb")

# Python frames as JAX's Python tracer names them (from a JAX fit with Keras 3.15).
STEP = "$trainer.py:256 iterator_step"
NEXT = python_input.PYTHON_NEXT
ADAPTER = "$data_adapter_utils.py:246 get_jax_iterator"


def _marked(python, steps=2, step_us=100, extra=None):
    """A host plane whose `python` line holds `python` and `steps` step markers of `step_us` each."""
    marks = [(steptime.STEP_MARKER, i * step_us, (i + 1) * step_us, steptime.step_marker(i)[1]) for i in range(steps)]
    return _space({"/host:CPU": {"python": marks + python, **(extra or {})}})


def _pydataset_step(t0):
    """One step at `t0` us: the data iterator's next() (60 us) runs the PyDataset's __getitem__ (50 us)."""
    return [
        (STEP, t0 + 1, t0 + 90),
        (NEXT, t0 + 2, t0 + 62),
        (ADAPTER, t0 + 3, t0 + 61),
        ("$py_dataset_adapter.py:257 _finite_generator", t0 + 4, t0 + 60),
        ("$data.py:10 __getitem__", t0 + 5, t0 + 55),
        ("$time sleep", t0 + 6, t0 + 54),
        ("$py_dataset_adapter.py:225 _standardize_batch", t0 + 55, t0 + 59),
    ]


# --------------------------------------------------------------------------- input is the data iterator's only


def test_only_the_data_iterators_next_is_input():
    python = _pydataset_step(0) + _pydataset_step(100)
    # A next() in contextlib's __exit__ (stopping jax.profiler.trace) and one in JAX's argument binding.
    python += [
        ("$contextlib.py:141 __exit__", 92, 99),
        (NEXT, 93, 98),
        ("$inspect.py:3076 _bind", 190, 199),
        (NEXT, 191, 192),
    ]
    st = steptime.analyze(_marked(python))
    assert (st.steps, st.step_sec) == (2, pytest.approx(100e-6))
    assert st.input_sec == pytest.approx(60e-6)  # 2..62 and 102..162; the other next() calls are not input
    assert st.input_stage == steptime.InputStage("PyDataset __getitem__", "data.py:10 __getitem__", pytest.approx(50e-6))
    (hint,) = steptime.verdict(st)
    assert hint.startswith(
        "input-bound: 60% of each step waits for input; the slowest stage is PyDataset __getitem__ "
        "(data.py:10 __getitem__, 0.05 ms per batch): it runs on the training thread"
    )
    assert "set `workers` above 1" in hint and "generator" not in hint and "tf.data" not in hint
    # Without the data iterator's reads, the profiler's own stop is no input at all.
    alone = _marked([("$contextlib.py:141 __exit__", 10, 190), (NEXT, 11, 189)], steps=2)
    st = steptime.analyze(alone)
    assert (st.input_sec, st.input_stage) == (0.0, None)
    assert [h for h in steptime.verdict(st) if not h.startswith("host-bound")] == []


def test_a_profilers_stop_in_an_unmarked_trace_is_not_input():
    # A JAX micro-benchmark trace: no step markers, two jitted calls, then jax.profiler.trace stopping (6.3 s).
    # JAX writes each call of a jitted function as two nested events: each call is one execution.
    python = [
        ("PjitFunction(step)", 0, 100),
        ("PjitFunction(step)", 0, 99),
        ("PjitFunction(step)", 200, 300),
        ("PjitFunction(step)", 201, 300),
        ("$contextlib.py:141 __exit__", 300, 6_300_000),
        (NEXT, 301, 6_299_999),
        ("$profiler.py:130 trace", 302, 6_299_990),
    ]
    st = steptime.analyze(_space({"/host:CPU": {"python": python, "tf_XLAPjRtCpuClient/1": [("fusion", 10, 90)]}}))
    assert (st.input_sec, st.input_stage) == (0.0, None)
    assert st.step_source == "step function" and st.steps == 2 and st.step_sec == pytest.approx(150e-6)
    assert not any(h.startswith("input-bound") for h in steptime.verdict(st))


@pytest.mark.parametrize(
    ("frames", "stage", "advice", "absent"),
    [
        # A generator (defined in code run by `python -c`): the adapter calls it; Keras' conversion is not it.
        (
            [("$<string>:3 batches", 5, 55), ("$data_adapter_utils.py:250 convert_to_jax_compatible", 55, 60)],
            ("generator", "<string>:3 batches", 50e-6),
            "the generator runs on the training thread",
            "tf.data",
        ),
        # A PyDataset with workers: the training thread waits in the queue.
        (
            [("$py_dataset_adapter.py:271 _finite_enqueuer_generator", 4, 60), ("$py_dataset_adapter.py:642 get", 5, 58),
             ("$queue.py:154 get", 6, 57)],
            ("PyDataset workers", "PyDataset workers", 60e-6),
            "waits for the PyDataset's workers: raise its `workers`",
            "generator",
        ),
        # In-memory arrays: Keras slices them.
        ([("$array_data_adapter.py:250 slice_and_convert", 4, 60)], ("array slicing", "array slicing", 60e-6), "convert them", "workers"),
        # A torch DataLoader on JAX.
        ([("$torch_data_loader_adapter.py:40 get_jax_iterator", 4, 60)], ("DataLoader", "DataLoader", 60e-6), "num_workers", "PyDataset"),
    ],
)
def test_each_python_source_is_named_with_advice_that_fits_it(frames, stage, advice, absent):
    python = []
    for t0 in (0, 100):
        python += [(STEP, t0 + 1, t0 + 90), (NEXT, t0 + 2, t0 + 62), (ADAPTER, t0 + 3, t0 + 61)]
        python += [(name, t0 + a, t0 + b) for name, a, b in frames]
    st = steptime.analyze(_marked(python))
    assert st.input_stage == steptime.InputStage(stage[0], stage[1], pytest.approx(stage[2]))
    (hint,) = steptime.verdict(st)
    assert advice in hint and absent not in hint.split(": ", 1)[1].split("): ", 1)[1], hint


def test_tensorflow_generator_stage_advice_names_both_python_sources():
    space = _space(
        {
            "/host:CPU": {
                "python": [("multi_step_on_iterator", 0, 100)],
                "tf_data_iterator_get_next/1": [
                    ("IteratorGetNextOp::DoCompute", 0, 90),
                    ("Iterator::Root", 0, 90),
                    ("Iterator::Root::FlatMap", 1, 89),
                    ("Iterator::Root::FlatMap[0]::Generator", 2, 88),
                ],
            }
        }
    )
    st = steptime.analyze(space, steps=1, wall_sec=100e-6)
    assert st.input_stage.name == "Generator"
    (hint,) = steptime.verdict(st)
    assert "a PyDataset or a generator" in hint and "from_generator" in hint and "tf.data ops" in hint


def test_data_reads_follow_the_callers_frame():
    events = [
        xspace.TraceEvent("python", name, a * US, b * US)
        for name, a, b in (
            ("$trainer.py:1088 __next__", 0, 10),
            (NEXT, 1, 9),
            ("$epoch_iterator.py:105 _enumerate_iterator", 2, 8),
            ("$user.py:5 loop", 20, 40),
            (NEXT, 21, 39),
        )
    ]
    (read,) = python_input.data_reads(events)
    assert read == python_input.PythonRead((1 * US, 9 * US), None, None, 0)


# --------------------------------------------------------------------------- ROCm copies, TPU planes


def test_rocm_copies_are_transfers_not_compute():
    space = _space(
        {
            "/host:CPU": {"python": [("PjitFunction(step)", 0, 100)]},
            "/device:GPU:0": {
                "Stream #3(MemcpyOther)": [("CopyDeviceToDevice", 10, 20), ("CopyHostToDevice", 30, 35)],
                "Stream #4(MemcpyOther)": [("CopyDeviceToHost", 40, 44)],
            },
        }
    )
    st = steptime.analyze(space)
    (gpu,) = st.devices
    assert (gpu.name, gpu.compute_sec) == ("GPU:0", 0.0)
    # ROCm's CopyDeviceToDevice does not say which devices: a copy, not a collective.
    assert gpu.communication_sec == 0.0 and gpu.transfer_sec == pytest.approx(19e-6)
    assert st.compute_sec == 0.0 and st.communication_sec == 0.0 and st.transfer_sec == pytest.approx(19e-6)
    assert [gpu_lines.event_kind(n).part for n in ("CopyHostToDevice", "CopyDeviceToHost", "CopyDeviceToDevice")] == [
        "transfer", "transfer", "transfer"
    ]


def _tpu_space(with_host=True):
    """Two TPU cores; each `XLA Ops` line holds fusions, an all-reduce and an async copy; views around them."""
    planes = {}
    for core, shift in ((0, 0), (1, 5)):
        planes[f"/device:TPU:{core}"] = {
            "XLA Modules": [("jit_f(123)", 0 + shift, 100 + shift)],
            "XLA Ops": [
                ("broadcast_add_fusion.2", 0 + shift, 40 + shift),
                ("all-reduce.1", 40 + shift, 50 + shift),
                ("copy-start.3", 50 + shift, 52 + shift),
                ("fusion", 52 + shift, 90 + shift),
                ("copy-done.3", 90 + shift, 95 + shift),
            ],
            "Async XLA Ops": [("copy-start.3", 50 + shift, 95 + shift)],
            "XLA TraceMe": [("ThreadpoolListener::Region", 0 + shift, 100 + shift)],
        }
    if with_host:
        planes["/host:CPU"] = {"python": [("$builtins next", 0, 3)]}  # no data iterator: no input
    return _space(planes)


def test_tpu_planes_read_as_device_compute(tmp_path, capsys):
    st = steptime.analyze(_tpu_space())
    assert st.source == "tpu" and st.step_source == "trace" and st.steps == 1
    assert st.step_sec == pytest.approx(100e-6)  # from TPU:0's first op (0) to TPU:1's last (100)
    devices = {d.name: d for d in st.devices}
    assert sorted(devices) == ["TPU:0", "TPU:1"]
    for d in devices.values():  # 40 + 38 us of fusions, 10 of all-reduce, 7 of copies: the views add nothing
        assert (d.compute_sec, d.communication_sec, d.transfer_sec) == (
            pytest.approx(78e-6), pytest.approx(10e-6), pytest.approx(7e-6))
    assert st.input_sec == 0.0
    assert any(n.startswith("no step markers: the window is the whole trace") for n in st.notes)
    # A trace of the TPU planes only reads the same.
    bare = steptime.analyze(_tpu_space(with_host=False))
    assert bare.devices == st.devices
    # keras-gpu trace prints each core.
    path = tmp_path / "tpu.xplane.pb"
    path.write_bytes(_tpu_space().SerializeToString())
    assert main(["trace", str(path)]) == 0
    out = capsys.readouterr().out
    assert "TPU:0    compute 0.078 ms, communication 0.010 ms, transfer 0.007 ms; replica 0" in out
    assert "TPU:1    compute 0.078 ms" in out and "note: no step markers" in out


def test_tpu_steps_lines_mark_the_steps():
    space = _space(
        {
            "/host:CPU": {},
            "/device:TPU:0": {
                "Steps": [("0", 0, 50, {"group_id": 0}), ("1", 50, 100, {"group_id": 1})],
                "XLA Ops": [("fusion", 5, 45), ("fusion", 55, 65)],
            },
        }
    )
    st = steptime.analyze(space)
    assert (st.steps, st.step_source, st.step_sec) == (2, "device markers", pytest.approx(50e-6))
    assert st.compute_sec == pytest.approx(25e-6) and st.notes == ()


# --------------------------------------------------------------------------- no step markers, damaged files


def test_a_trace_without_step_markers_says_so_and_how_the_window_was_chosen():
    unmarked = _space({"/host:CPU": {"tf_Compute/1": [("m/MatMul:MatMul", 10, 30)]}})
    st = steptime.analyze(unmarked, steps=1, wall_sec=40e-6)
    assert st.notes == ("no step markers: the window is the caller's, 1 step in 0.04 ms",)
    st = steptime.analyze(unmarked)
    assert st.notes == (
        "no step markers: the window is the whole trace, from its first timed event to the end of its last "
        "(0.02 ms), counted as 1 step",
    )
    functions = _space({"/host:CPU": {"python": [("PjitFunction(step)", 0, 10), ("PjitFunction(step)", 20, 30)]}})
    (note,) = steptime.analyze(functions).notes
    assert note.startswith("no step markers: the window runs from the first execution of the step function")
    assert "each of its 2 executions counts as a step" in note
    # A marked trace says nothing of the kind.
    assert not any("no step markers" in n for n in steptime.analyze(xspace.load(FIXTURE)).notes)


def test_a_damaged_trace_is_one_line_naming_it_and_exit_1(tmp_path, capsys):
    data = open(FIXTURE, "rb").read()
    damaged = tmp_path / "run" / "damaged.xplane.pb"
    damaged.parent.mkdir()
    damaged.write_bytes(data[:5000])  # cut inside a message
    with pytest.raises(ValueError, match=r"damaged\.xplane\.pb: it does not parse as an XSpace protobuf"):
        xspace.load(damaged)
    assert main(["trace", str(damaged)]) == 1
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1
    assert err.startswith(f"keras-gpu trace: error: cannot read {damaged}: it does not parse as an XSpace protobuf")
    assert "Traceback" not in err and "DecodeError" not in err
    # In a directory, the good trace is still read; the status is 1.
    shutil.copy(FIXTURE, tmp_path / "run" / "good.xplane.pb")
    assert main(["trace", str(tmp_path / "run"), "--json"]) == 1
    out, err = capsys.readouterr()
    assert len(out.splitlines()) == 1 and '"steps": 1' in out
    assert err.count("\n") == 1 and str(damaged) in err


def test_the_input_stage_text_reads_back_old_and_new_headers():
    st = steptime.analyze(_marked(_pydataset_step(0) + _pydataset_step(100)))
    text = input_stage_markdown(st)
    assert text.splitlines()[0].startswith("| slowest input stage | tf.data iterator or Python function |")
    assert read_input_stage_markdown(text) == steptime.InputStage(
        "PyDataset __getitem__", "data.py:10 __getitem__", pytest.approx(50e-6)
    )
    old = (
        "| slowest input stage | tf.data iterator | self time per batch (ms) | input share of the step |\n"
        "|---|---|---|---|\n| Map | Iterator::Root::Map | 0.5 | 40% |"
    )
    assert read_input_stage_markdown(old) == steptime.InputStage("Map", "Iterator::Root::Map", pytest.approx(0.5e-3))
