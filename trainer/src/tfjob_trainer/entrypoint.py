"""Loading the user's training function named by --entrypoint module:function."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

from tfjob_trainer.errors import ConfigError

EntryFunction = Callable[[Any], Mapping[str, Any] | None]


def load_entrypoint(spec: str) -> EntryFunction:
    """Import `module:function`; a missing module or function is a ConfigError.

    Errors raised while the module itself executes are the user's code failing and
    propagate unchanged (exit 1, with the traceback).
    """
    module_name, _, function_name = spec.partition(":")
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
