"""Python half of the local runtime host: runs inside Pyodide, never on CPython.

host.mjs writes this file into Pyodide's site-packages as `_edge_local_host` and calls it to
unpack the Worker's code and the SDK, import the Worker's main module, describe its entrypoint
classes, and forward each call from a JavaScript wrapper class to the Python instance with the
conversions workerd applies to Python Workers:

- `fetch` (and `test`): arguments through `python_from_rpc` (a JS Request becomes a
  `workers.Request`), called "relaxed" (extra arguments dropped), result through
  `python_to_rpc` (a `workers.Response` becomes its `.js_object`);
- `alarm`, `connect` and the WebSocket handlers: raw JS arguments, relaxed, result as is;
- every other public method (RPC): arguments through `python_from_rpc`, called as is, result
  through `python_to_rpc`.
"""

from __future__ import annotations

import importlib
import inspect
import json
import os
import random
import sys
import sysconfig
import zipfile
from types import FunctionType
from typing import Any

from pyodide.code import relaxed_call

APP_DIR = "/session/metadata"


def install(app_zip: str, sdk_zip: str) -> None:
    """Unpacks the SDK into site-packages and the Worker's code into APP_DIR (first on sys.path)."""
    with zipfile.ZipFile(sdk_zip) as archive:
        archive.extractall(sysconfig.get_path("purelib"))
    with zipfile.ZipFile(app_zip) as archive:
        archive.extractall(APP_DIR)
    sys.path.insert(0, APP_DIR)
    os.chdir(APP_DIR)
    importlib.invalidate_caches()


def _public_methods(cls: type) -> list[str]:
    """Public plain functions of `cls` and its bases, as workerd exports them for RPC."""
    names = []
    for name in dir(cls):
        if name.startswith("_"):
            continue
        for base in cls.__mro__:
            if name in base.__dict__:
                if isinstance(base.__dict__[name], FunctionType):
                    names.append(name)
                break
    return sorted(names)


_main: Any = None
_from_rpc: Any = None
_to_rpc: Any = None


def load_main(module_name: str, durable_object_names: list[str]) -> str:
    """Imports the main module; returns JSON {class name: [public method names]}."""
    global _main, _from_rpc, _to_rpc  # noqa: PLW0603 - one main module per isolate
    # The SDK is importable only once install() has unpacked it.
    from workers import (  # noqa: PLC0415
        DurableObject,
        WorkerEntrypoint,
        python_from_rpc,
        python_to_rpc,
    )

    _from_rpc, _to_rpc = python_from_rpc, python_to_rpc
    _main = importlib.import_module(module_name)
    classes: dict[str, list[str]] = {}
    expected = [("Default", WorkerEntrypoint)]
    expected += [(name, DurableObject) for name in durable_object_names]
    for name, base in expected:
        cls = getattr(_main, name, None)
        if not (inspect.isclass(cls) and issubclass(cls, base)):
            raise TypeError(
                f"{module_name}.py must define or import class {name}({base.__name__}) "
                f"for the local runtime to export it"
            )
        classes[name] = _public_methods(cls)
    return json.dumps(classes)


def entrypoint_class(name: str) -> type:
    """A class of the loaded main module, for the JavaScript wrapper to instantiate."""
    return getattr(_main, name)  # type: ignore[no-any-return]


def reseed() -> None:
    """Reseeds `random` from real entropy; the boot ran with a deterministic stub."""
    random.seed()


async def invoke(instance: Any, name: str, relaxed: bool, convert: bool, *args: Any) -> Any:
    """Calls `instance.<name>(*args)` with workerd's conversions (see the module docstring)."""
    method = getattr(instance, name)
    if convert:
        args = tuple(_from_rpc(arg) for arg in args)
    result = relaxed_call(method, *args) if relaxed else method(*args)
    if inspect.isawaitable(result):
        result = await result
    return _to_rpc(result) if convert else result
