"""Loading the user's training function named by --entrypoint: `module:function`, from
the module path, or `/path/to/file.py:function`, a file imported under its own name from
its directory, which goes first on the module path so that what lies beside it (the
packages TFJobClient.train installs there) imports too."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from tfjob_trainer.errors import ConfigError

EntryFunction = Callable[[Any], Mapping[str, Any] | None]


def load_entrypoint(spec: str) -> EntryFunction:
    """Import `module:function`; a missing module or function is a ConfigError.

    Errors raised while the module itself executes are the user's code failing and
    propagate unchanged (exit 1, with the traceback).
    """
    module_name, _, function_name = spec.rpartition(":")
    if module_name.endswith(".py"):
        path = Path(module_name)
        if not path.is_file():
            raise ConfigError(f"--entrypoint {spec}: no file {path}")
        sys.path.insert(0, str(path.parent))
        module_name = path.stem
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        missing = error.name or ""
        if module_name == missing or module_name.startswith(missing + "."):
            raise ConfigError(
                f"--entrypoint {spec}: no module named {missing!r} (check PYTHONPATH)"
            ) from None
        raise
    function = getattr(module, function_name, None)
    if not callable(function):
        raise ConfigError(f"--entrypoint {spec}: {module_name} has no function {function_name!r}")
    return function  # type: ignore[no-any-return]
