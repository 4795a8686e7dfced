"""The keyword arguments of `make_strategy` and `plan_strategy`: declared once, checked where they enter.

`StrategyOptions` holds what the strategy is to be (its kind, devices,
all-reduce, collectives and timeouts) and, as a
`keras_gpu.core.cluster.ClusterOptions`, where its cluster comes from. The
public functions keep their keyword arguments; each builds one
`StrategyOptions` from them with `StrategyOptions.from_keywords`, which
checks every value once, and passes the object on.

The public functions' signatures come from these declarations too
(`strategy_signature`): `make_strategy`, its JAX twin and
`plan_strategy` take `kind` and `**options`, and show the declared keywords,
with their defaults and types, to `help()`, `inspect.signature` and IDEs
that read `__signature__`.
"""

from __future__ import annotations

import inspect
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import MISSING, dataclass, field, fields
from typing import Any

from keras_gpu.core.checks import check_choice, check_keywords
from keras_gpu.core.cluster import SOURCES, ClusterOptions

__all__ = [
    "COMMUNICATIONS",
    "CROSS_DEVICE_OPS",
    "DEFAULT_STARTUP_TIMEOUT",
    "KINDS",
    "LOCAL_KINDS",
    "StrategyOptions",
    "keyword_arguments",
    "strategy_signature",
]

KINDS = ("auto", "default", "one_device", "mirrored", "multiworker")
"""Accepted values of `kind`."""

CROSS_DEVICE_OPS = ("auto", "nccl", "hierarchical_copy", "reduce_to_one_device")
"""Accepted values of `cross_device_ops` (the gradient all-reduce of a mirrored strategy)."""

COMMUNICATIONS = ("auto", "ring", "nccl")
"""Accepted values of `communication` (the collective implementation of a multi-worker strategy)."""

DEFAULT_STARTUP_TIMEOUT = 600.0
"""Seconds a multi-worker strategy waits for every task of its cluster when `startup_timeout` is `None`."""

_MAX_TIMEOUT = 7 * 24 * 3600.0  # one week; larger values overflow TensorFlow's millisecond deadlines
_DEVICE = re.compile(r"^(?:/job:localhost)?(?:/replica:0)?(?:/task:0)?(?:/?device:|/)?(CPU|GPU):(\d+)$", re.IGNORECASE)

LOCAL_KINDS = ("default", "one_device", "mirrored")
"""The kinds that train this process alone, on its own devices."""


@dataclass(frozen=True)
class StrategyOptions:
    """The options of `keras_gpu.make_strategy` and `keras_gpu.plan_strategy`, each value checked once.

    Building one checks every value and how they combine, so that the code
    that plans and builds the strategy works on checked values only. See
    `keras_gpu.plan_strategy` for what each option means.

    Attributes:
        kind: One of `KINDS`.
        devices: The device names as given (echoed by error messages), or `None`.
        cross_device_ops: One of `CROSS_DEVICE_OPS`.
        communication: One of `COMMUNICATIONS`.
        collective_timeout: Seconds (as a float), or `None`.
        startup_timeout: Seconds (as a float), or `None` for the default.
        where: Where the cluster comes from.
        wanted: `devices` normalised to `/device:TYPE:N`, or `None`.

    Raises:
        ValueError: A value is out of range, or values contradict each other.
        TypeError: A value has the wrong type.
    """

    kind: str = "auto"
    devices: Sequence[str] | None = None
    cross_device_ops: str = "auto"
    communication: str = "auto"
    collective_timeout: float | None = None
    startup_timeout: float | None = None
    where: ClusterOptions = field(default_factory=ClusterOptions)
    wanted: tuple[str, ...] | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        check_choice("kind", self.kind, KINDS)
        check_choice("cross_device_ops", self.cross_device_ops, CROSS_DEVICE_OPS)
        check_choice("communication", self.communication, COMMUNICATIONS)
        object.__setattr__(self, "collective_timeout", _check_timeout("collective_timeout", self.collective_timeout))
        object.__setattr__(self, "startup_timeout", _check_timeout("startup_timeout", self.startup_timeout))
        object.__setattr__(self, "wanted", _normalize_devices(self.devices))
        self._check_combinations()

    @classmethod
    def keywords(cls, *, internal: bool = False) -> dict[str, inspect.Parameter]:
        """The keyword arguments, in declaration order: this class's fields, then `ClusterOptions`'.

        `ClusterOptions.source` is named `cluster_source`. `internal` adds
        the fields only `plan_strategy` takes (`slurm_assign_gpus`, `environ`).
        """
        own = [f for f in fields(cls) if f.init and f.name != "where"]
        where = [f for f in fields(ClusterOptions) if internal or f.name not in _INTERNAL]
        out = {}
        for f in [*own, *where]:
            name = "cluster_source" if f.name == "source" else f.name
            default = f.default if f.default is not MISSING else f.default_factory()  # type: ignore[misc]
            kind = inspect.Parameter.POSITIONAL_OR_KEYWORD if name == "kind" else inspect.Parameter.KEYWORD_ONLY
            out[name] = inspect.Parameter(name, kind, default=default, annotation=f.type)
        return out

    @classmethod
    def from_keywords(cls, keywords: Mapping[str, Any]) -> StrategyOptions:
        """The options from the keyword arguments of `make_strategy` or `plan_strategy`.

        Args:
            keywords: This class's fields (but `where` and `wanted`) and
                `ClusterOptions`' fields, whose `source` is named
                `cluster_source` here.
        """
        own = {f.name for f in fields(cls) if f.init and f.name != "where"}
        cluster = {("source" if k == "cluster_source" else k): v for k, v in keywords.items() if k not in own}
        check_choice("cluster_source", cluster.get("source", "auto"), SOURCES)
        return cls(**{k: v for k, v in keywords.items() if k in own}, where=ClusterOptions(**cluster))

    def _check_combinations(self) -> None:
        kind, wanted, cross_device_ops = self.kind, self.wanted, self.cross_device_ops
        communication, collective_timeout, startup_timeout = self.communication, self.collective_timeout, self.startup_timeout
        cluster_source, cluster, task_index = self.where.source, self.where.cluster, self.where.task_index
        if wanted is not None and kind == "default":
            raise ValueError(f"`devices` does not apply to kind='default'. Received: devices={list(wanted)!r}")
        if wanted is not None and kind == "one_device" and len(wanted) != 1:
            raise ValueError(
                "kind='one_device' needs exactly one device; use kind='mirrored' for several. "
                f"Received: devices={list(wanted)!r}"
            )
        if kind in ("default", "one_device") and cross_device_ops != "auto":
            raise ValueError(
                f"`cross_device_ops` applies to kind='mirrored' only. Received: kind={kind!r}, "
                f"cross_device_ops={cross_device_ops!r}"
            )
        if kind in LOCAL_KINDS:
            if communication != "auto" or collective_timeout is not None or startup_timeout is not None:
                raise ValueError(
                    "`communication`, `collective_timeout` and `startup_timeout` apply to kind='multiworker' (or 'auto') "
                    f"only. Received: kind={kind!r}, communication={communication!r}, "
                    f"collective_timeout={collective_timeout!r}, startup_timeout={startup_timeout!r}"
                )
            if cluster_source != "auto" or cluster is not None or task_index is not None:
                raise ValueError(
                    "`cluster_source`, `cluster` and `task_index` apply to kind='multiworker' (or 'auto') only. "
                    f"Received: kind={kind!r}, cluster_source={cluster_source!r}, cluster={cluster!r}, "
                    f"task_index={task_index!r}"
                )


_INTERNAL = ("slurm_assign_gpus", "environ")
"""`ClusterOptions` fields that `plan_strategy` takes and `make_strategy` does not."""


def keyword_arguments(
    function: str, kind: str, options: Mapping[str, Any], *, internal: bool = False, extra: Sequence[str] = ()
) -> dict[str, Any]:
    """Every declared keyword with its value: `options` where given, else the declared default.

    Args:
        function: The public function's name, for the error message.
        kind: Its `kind` argument.
        options: Its `**options`.
        internal: Whether it takes the internal keywords (`plan_strategy`).
        extra: Its own keyword parameters, named in the error message.

    Raises:
        TypeError: `options` names a keyword that is not declared.
    """
    declared = StrategyOptions.keywords(internal=internal)
    check_keywords(function, options, list(declared), extra=extra)
    return {name: options.get(name, p.default) for name, p in declared.items()} | {"kind": kind}


def strategy_signature(
    function: Callable[..., Any], *, internal: bool = False, extra: Sequence[str] = ()
) -> inspect.Signature:
    """`function`'s signature with `**options` spelled out from the declarations (for its `__signature__`).

    Args:
        function: `make_strategy`, its JAX twin or `plan_strategy`, declared
            as `(kind="auto", *, <extra>, **options)`.
        internal: Whether it takes the internal keywords.
        extra: Keyword-only parameters of `function`'s own, kept after the
            declared ones (`plan_strategy`'s `local_devices`).
    """
    own = inspect.signature(function)
    declared = list(StrategyOptions.keywords(internal=internal).values())
    params = [*declared, *(own.parameters[name] for name in extra)]
    return own.replace(parameters=params)


def _check_timeout(name: str, value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"`{name}` must be a number of seconds or None. Received: {name}={value!r}")
    default = "for no timeout" if name == "collective_timeout" else f"for the default of {DEFAULT_STARTUP_TIMEOUT:g} s"
    try:
        seconds = float(value)
    except OverflowError:  # an int too large for a float
        seconds = math.inf
    if not math.isfinite(seconds) or seconds <= 0:
        raise ValueError(
            f"`{name}` must be a positive, finite number of seconds (or None {default}). Received: {name}={value!r}"
        )
    if seconds > _MAX_TIMEOUT:
        raise ValueError(
            f"`{name}` must be at most {_MAX_TIMEOUT:g} seconds (one week); pass None {default}. "
            f"Received: {name}={value!r}"
        )
    return seconds


def _normalize_devices(devices: Any) -> tuple[str, ...] | None:
    if devices is None:
        return None
    if isinstance(devices, (str, bytes)) or not isinstance(devices, Sequence):
        raise TypeError(f"`devices` must be a list of device names such as ['GPU:0', 'GPU:1']. Received: devices={devices!r}")
    if not devices:
        raise ValueError("`devices` must name at least one device, or be None to use them all. Received: devices=[]")
    out = []
    for device in devices:
        match = _DEVICE.match(device) if isinstance(device, str) else None
        if match is None:
            raise ValueError(
                f"`devices` entries must be local device names like 'GPU:0', '/gpu:1' or '/device:CPU:0'. "
                f"Received: {device!r} in devices={devices!r}"
            )
        out.append(f"/device:{match.group(1).upper()}:{int(match.group(2))}")
    if len(set(out)) != len(out):
        raise ValueError(f"`devices` lists a device twice. Received: devices={devices!r}")
    return tuple(out)
