"""Benchmarks of keras-gpu: what its monitoring callbacks cost a training run.

Run the overhead benchmark from the repository root with

```
python -m benchmarks.overhead            # full run (about 15-20 minutes on 2 quiet cores)
python -m benchmarks.overhead --quick    # 2-4 minutes, same measurements at a smaller size
keras-gpu bench [--quick]                # the same from the command line tool
```

See :mod:`benchmarks.overhead` for what is measured and what each column
means. The one-off studies behind the docs' other figures are in
:mod:`benchmarks.studies` (`python -m benchmarks.studies.<name>`); the
helpers every script shares are :mod:`benchmarks._ab` (the interleaved A/B
runner), :mod:`benchmarks._stats` and :mod:`benchmarks._cli` (the common
options and the JSON writer). This package is not part of the installed
`keras_gpu` distribution.
"""

__all__: list[str] = []
