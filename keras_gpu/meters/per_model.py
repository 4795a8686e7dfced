"""Values counted once per model (and key), and why a count failed: weakly keyed, safe across threads."""

from __future__ import annotations

import threading
import weakref
from typing import Any

__all__ = ["PerModel"]

_MISSING = object()


class PerModel:
    """A cache of values per model and key, and the last failure reason per model.

    Models are weakly referenced (a model that cannot be is simply not
    cached), so the cache never keeps a model alive.

    Examples:
        >>> class Model:
        ...     pass
        >>> notes, model = PerModel(), Model()
        >>> notes.put(model, "shape", 12.0)
        >>> notes.get(model, "shape", None), notes.get(model, "other", None)
        (12.0, None)
        >>> notes.failure(model)
        'the count was not attempted'
        >>> notes.fail(model, "no matmul")
        >>> notes.failure(model)
        'no matmul'
    """

    def __init__(self) -> None:
        self._values: weakref.WeakKeyDictionary[Any, dict[Any, Any]] = weakref.WeakKeyDictionary()
        self._failures: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()

    def get(self, model: Any, key: Any, default: Any = _MISSING) -> Any:
        """The value cached for `model` and `key`; `default` where there is none (`KeyError` without one)."""
        with self._lock:
            value = self._values.get(model, {}).get(key, _MISSING)
        if value is _MISSING:
            if default is _MISSING:
                raise KeyError(key)
            return default
        return value

    def put(self, model: Any, key: Any, value: Any) -> None:
        """Cache `value` for `model` and `key` (nothing where `model` cannot be weakly referenced)."""
        with self._lock:
            try:
                self._values.setdefault(model, {})[key] = value
            except TypeError:  # not weak-referenceable: just don't cache
                pass

    def fail(self, model: Any, reason: str) -> None:
        """Remember why counting `model` failed."""
        with self._lock:
            try:
                self._failures[model] = reason
            except TypeError:  # not weak-referenceable
                pass

    def failure(self, model: Any) -> str:
        """Why the last count of `model` failed, in a few words."""
        with self._lock:
            return self._failures.get(model, "the count was not attempted")
