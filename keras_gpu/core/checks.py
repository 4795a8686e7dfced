"""Argument checks shared by keras-gpu's public functions and callbacks.

Every check raises with one message form, naming the argument, saying what it
must be, and echoing what was received:

    `name` must <what it must be>. Received: name=<repr of the value>.

A value of the wrong type raises `TypeError` (its message also names the
type received); a value of the right type that is out of range or not
allowed raises `ValueError`. Each check returns the
value it accepted (normalised where its docstring says so).
"""

from __future__ import annotations

import dataclasses
import inspect
import math
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NoReturn

__all__ = [
    "check_bool",
    "check_choice",
    "check_index",
    "check_indices",
    "check_keywords",
    "check_log_dir",
    "check_positive",
    "check_seconds",
    "clip_repr",
    "declared_signature",
    "fail",
    "must",
]


def must(name: str, requirement: str, value: Any) -> str:
    """The one message form: "`name` must <requirement>. Received: name=<value!r>."."""
    return f"`{name}` must {requirement}. Received: {name}={value!r}."


def fail(name: str, requirement: str, value: Any, error: type[Exception] = ValueError) -> NoReturn:
    """Raise `error` with the message `must` builds; a `TypeError` also names the type received."""
    message = must(name, requirement, value)
    if error is TypeError:
        message = f"{message[:-1]} (type {type(value).__name__})."
    raise error(message)


def clip_repr(value: Any, limit: int = 200) -> str:
    """`repr(value)`, shortened in the middle when long, for the "Received:" part of a message."""
    shown = repr(value)
    return shown if len(shown) <= limit else f"{shown[: limit // 2]}...{shown[-limit // 2 :]} ({len(shown)} characters)"


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def check_bool(name: str, value: Any, *, allow_none: bool = False) -> bool | None:
    """`value` when it is True or False (or None with `allow_none`); else `TypeError`."""
    if isinstance(value, bool) or (value is None and allow_none):
        return value
    fail(name, "be True, False or None (leave as is)" if allow_none else "be True or False", value, TypeError)


def check_choice(name: str, value: Any, allowed: Sequence[str], *, allow_none: bool = False) -> str | None:
    """`value` when it is one of the strings `allowed` (or None with `allow_none`).

    Raises:
        TypeError: `value` is not a string (and not None).
        ValueError: `value` is a string not in `allowed`, or None without `allow_none`.
    """
    if value is None and allow_none:
        return None
    if isinstance(value, str) and value in allowed:
        return value
    fail(name, f"be one of {list(allowed)}", value, TypeError if value is not None and not isinstance(value, str) else ValueError)


def check_positive(
    name: str, value: Any, *, integer: bool = False, allow_none: bool = False, minimum: float = 0.0
) -> Any:
    """`value` unchanged when it is a positive, finite number (an int >= 1 with `integer`), at least `minimum`.

    Raises:
        TypeError: not a number (bools, strings and None without `allow_none`
            included), or not an int with `integer`.
        ValueError: a number out of range (zero, negative, infinite, NaN or
            below `minimum`).
    """
    if value is None and allow_none:
        return None
    what = "a positive integer" if integer else "a positive, finite number"
    if minimum > 0 and not integer:
        what += f" of at least {minimum:g}"
    requirement = f"be {what}{' or None' if allow_none else ''}"
    if not (_is_int(value) if integer else _is_number(value)):
        fail(name, requirement, value, TypeError)
    if integer:
        ok = value >= max(minimum, 1)
    else:
        try:
            ok = minimum <= float(value) < math.inf and value > 0
        except OverflowError:  # an int beyond the float range
            ok = False
    if not ok:
        fail(name, requirement, value)
    return value


def check_seconds(name: str, value: Any, *, allow_none: bool = False) -> float | None:
    """`value` as a float when it is a positive, finite number of seconds (or None with `allow_none`).

    Raises:
        TypeError: not a number (bools, strings and None without `allow_none` included).
        ValueError: a number that is not positive and finite.
    """
    if value is None and allow_none:
        return None
    requirement = f"be a positive, finite number of seconds{' or None' if allow_none else ''}"
    if not _is_number(value):
        fail(name, requirement, value, TypeError)
    try:
        ok = 0 < float(value) < math.inf
    except OverflowError:
        ok = False
    if not ok:
        fail(name, requirement, value)
    return float(value)


def check_index(name: str, value: Any, meaning: str) -> int:
    """`value` when it is an int >= 0; `meaning` says what it indexes (e.g. "TensorFlow's index of a GPU").

    Raises:
        TypeError: not an int (bools included).
        ValueError: negative.
    """
    if not _is_int(value):
        fail(name, f"be an int, {meaning}", value, TypeError)
    if value < 0:
        fail(name, f"be >= 0, {meaning}", value)
    return value


def check_indices(name: str, value: Any, meaning: str, *, none_means: str) -> tuple[int, ...] | None:
    """`value` as a tuple when it is a sequence of distinct ints >= 0, or None.

    Args:
        name: The argument's name.
        value: What was passed.
        meaning: What the ints index, plural (e.g. "GPU indices").
        none_means: What None stands for (e.g. "every visible GPU").

    Raises:
        TypeError: not a sequence (strings included).
        ValueError: an element is not an int >= 0, or one repeats.
    """
    if value is None:
        return None
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        fail(name, f"be a sequence of {meaning} (ints), or None for {none_means}", value, TypeError)
    if any(not _is_int(i) or i < 0 for i in value):
        fail(name, f"hold non-negative ints ({meaning})", value)
    if len(set(value)) != len(value):
        fail(name, "not repeat an index", value)
    return tuple(value)


def check_log_dir(log_dir: Any) -> str:
    """`log_dir` as a string when it is a non-empty path (str or os.PathLike).

    Raises:
        TypeError: not a str or os.PathLike.
        ValueError: empty, or a PathLike that is not a text path.
    """
    if isinstance(log_dir, bool) or not isinstance(log_dir, (str, os.PathLike)):
        fail("log_dir", "be a path (str or os.PathLike)", log_dir, TypeError)
    path = os.fspath(log_dir)
    if not isinstance(path, str) or not path.strip():
        fail("log_dir", "be a non-empty path", log_dir)
    return path


def check_keywords(function: str, options: Mapping[str, Any], declared: Sequence[str], *, extra: Sequence[str] = ()) -> None:
    """Refuse a keyword in `options` that `function` does not declare, as Python would, naming those it takes.

    For a public function that takes `**options` and declares them once,
    as the fields of a dataclass (see `declared_signature`).

    Args:
        function: The function's name, for the message.
        options: Its `**options`.
        declared: The keywords it takes.
        extra: Its own keyword parameters, named in the message too.

    Raises:
        TypeError: `options` names a keyword not in `declared`.
    """
    unknown = [name for name in options if name not in declared]
    if unknown:
        raise TypeError(
            f"{function}() got an unexpected keyword argument {unknown[0]!r}. It takes "
            f"{', '.join([*declared, *extra])}. Received: {unknown[0]}={options[unknown[0]]!r}"
        )


def declared_signature(
    function: Callable[..., Any], declaration: type, *, positional: Sequence[str] = ()
) -> inspect.Signature:
    """`function`'s signature with its `**options` spelled out from the dataclass `declaration` (its `__signature__`).

    Each field `declaration` initialises becomes a parameter with the field's
    default and annotation: keyword-only, but for the names in `positional`
    (positional-or-keyword, first). `help()`, `inspect.signature` and IDEs
    that read `__signature__` then show the keywords, declared once.
    """
    params = []
    for f in dataclasses.fields(declaration):
        if not f.init:
            continue
        kind = inspect.Parameter.POSITIONAL_OR_KEYWORD if f.name in positional else inspect.Parameter.KEYWORD_ONLY
        default = f.default
        if default is dataclasses.MISSING:
            default = inspect.Parameter.empty if f.default_factory is dataclasses.MISSING else f.default_factory()
        params.append(inspect.Parameter(f.name, kind, default=default, annotation=f.type))
    params.sort(key=lambda p: p.kind)  # stable: positional ones first, each group in declaration order
    return inspect.signature(function).replace(parameters=params)
