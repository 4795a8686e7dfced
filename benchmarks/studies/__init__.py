"""The studies behind the figures the docs give: each measures one claim once, apart from the overhead benchmark.

Run each from the repository root as `python -m benchmarks.studies.<name>`
(`--help` lists its options):

- `ride_cost`: what the cluster view adds inside each multi-worker step (an interleaved A/B);
- `sample_count_cost`: what counting samples costs where the input has no static batch size (an A/B);
- `step_time_cost`: what the sampled step-time breakdown costs a run of several minutes (one long run, no A/B);
- `straggler_rule`: how often balanced multi-worker jobs would be called straggling;
- `straggler_scale`: the straggler rule's false alarms and detections on simulated fits of 2 to 4,096 workers;
- `straggler_jobs`: real jobs with one slowed worker, on TensorFlow or JAX, at the sizes the machine holds;
- `profiler_crash_rate`: how often TensorFlow's profiler kills a multi-worker process at a trace stop;
- `fit_return`: how long `fit` takes to return while a large trace is still to be parsed;
- `cluster_scale`: what a one-hour job of many workers leaves in `log_dir`, and TensorBoard's time to serve it;
- `scale_time`: the wall time of a whole `keras-gpu scale` study.

The harness they share (the A/B runner :mod:`benchmarks._ab`, the statistics
:mod:`benchmarks._stats`, the command line :mod:`benchmarks._cli`) stays in
:mod:`benchmarks`.
"""

__all__: list[str] = []
