"""The keras-gpu tab: a TensorBoard plugin, installed with the package, that draws a run's report.

TensorBoard finds it through the `tensorboard_plugins` entry point
(`keras_gpu = keras_gpu.tensorboard.plugin:KerasGpuPlugin`). It is active
wherever TensorBoard's `--logdir` holds a keras-gpu log directory
(`keras_gpu.tensorboard.log_dirs.find_log_dirs`), needs TensorBoard alone
(no TensorFlow), and serves its own frontend: a plain ES module and a
stylesheet from `static/`, no build step, nothing fetched from a network.

Routes, under `/data/plugin/keras_gpu/`:

* `index.js`, `style.css`: the frontend;
* `log_dirs`: `{"log_dirs": [{"name", "version"}], "why_none"}`: the
  keras-gpu log directories, relative to `--logdir` (`"."`: itself), each
  with a digest that changes when one of its files does;
* `report?log_dir=NAME`: what `keras-gpu report --json` prints for it;
* `view?log_dir=NAME`: the charts' series and the sentences saying what is
  missing (`keras_gpu.tensorboard.tab_data.Tab`).

Both data routes come from one read of the log directory, kept until a
file in it changes (`keras_gpu.tensorboard.tab_data.TabCache`).
"""

from __future__ import annotations

import json
import os
from typing import Any

from tensorboard.backend import http_util
from tensorboard.plugins import base_plugin
from werkzeug import wrappers

from keras_gpu.tensorboard.log_dirs import KerasGpuFiles, find_log_dirs, signature
from keras_gpu.tensorboard.tab_data import TabCache, version_of

__all__ = ["PLUGIN_NAME", "KerasGpuPlugin"]

PLUGIN_NAME = "keras_gpu"
"""The plugin's name: its routes' prefix and the `name` of `/data/plugin_entry.html`."""

_STATIC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "static")
_STATIC_TYPES = {"index.js": "text/javascript", "style.css": "text/css"}


class KerasGpuPlugin(base_plugin.TBPlugin):
    """The keras-gpu tab (see the module's text).

    Args:
        context: TensorBoard's `TBContext`; its `logdir` is where the tab
            looks for keras-gpu log directories.
    """

    plugin_name = PLUGIN_NAME

    def __init__(self, context: base_plugin.TBContext) -> None:
        self._root = context.logdir or ""
        self._files = KerasGpuFiles()
        self._tabs = TabCache()

    def get_plugin_apps(self) -> dict[str, Any]:
        """The routes (see the module's text)."""
        apps: dict[str, Any] = {f"/{name}": self._static(name) for name in _STATIC_TYPES}
        apps.update({"/log_dirs": self._serve_log_dirs, "/report": self._serve_report, "/view": self._serve_view})
        return apps

    def is_active(self) -> bool:
        """Whether `--logdir` holds a keras-gpu log directory."""
        return bool(find_log_dirs(self._root, self._files))

    def data_plugin_names(self) -> tuple[str, ...]:
        """None: the tab reads keras-gpu's own tags from the event files, not another plugin's summaries."""
        return ()

    def frontend_metadata(self) -> base_plugin.FrontendMetadata:
        """An iframed ES module, shown as the "keras-gpu" tab."""
        return base_plugin.FrontendMetadata(es_module_path="/index.js", tab_name="keras-gpu", disable_reload=False)

    # -- routes ---------------------------------------------------------------

    def _static(self, name: str) -> Any:
        @wrappers.Request.application
        def serve(request: wrappers.Request) -> wrappers.Response:
            with open(os.path.join(_STATIC, name), encoding="utf-8") as f:
                return http_util.Respond(request, f.read(), _STATIC_TYPES[name])

        return serve

    @wrappers.Request.application
    def _serve_log_dirs(self, request: wrappers.Request) -> wrappers.Response:
        names = find_log_dirs(self._root, self._files)
        entries = [{"name": n, "version": version_of(signature(self._path(n)))} for n in names]
        why = None
        if not names:
            why = (
                f"TensorBoard's --logdir ({self._root or 'none given'}) holds no keras-gpu log directory: "
                "keras-gpu reads local directories written by keras_gpu.callbacks(log_dir), keras-gpu scale or "
                "keras-gpu tune."
            )
        root = os.path.basename(os.path.normpath(self._root)) if self._root else ""
        return _json(request, {"log_dirs": entries, "root": root, "why_none": why})

    @wrappers.Request.application
    def _serve_report(self, request: wrappers.Request) -> wrappers.Response:
        return self._serve_tab(request, "report")

    @wrappers.Request.application
    def _serve_view(self, request: wrappers.Request) -> wrappers.Response:
        return self._serve_tab(request, "view")

    def _serve_tab(self, request: wrappers.Request, part: str) -> wrappers.Response:
        name = request.args.get("log_dir", "")
        if name not in find_log_dirs(self._root, self._files):
            return http_util.Respond(
                request, f"No keras-gpu log directory {name!r} under TensorBoard's --logdir.", "text/plain", code=404
            )
        try:
            tab = self._tabs.get(self._path(name))
        except FileNotFoundError as exc:  # removed since it was listed
            return http_util.Respond(request, str(exc), "text/plain", code=404)
        data = tab.report if part == "report" else {**tab.view, "version": tab.version}
        return _json(request, data)

    def _path(self, name: str) -> str:
        return self._root if name == "." else os.path.join(self._root, name)


def _json(request: wrappers.Request, data: Any) -> wrappers.Response:
    return http_util.Respond(request, json.dumps(data, allow_nan=False, sort_keys=True), "application/json")
