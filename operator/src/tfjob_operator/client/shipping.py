"""A Python function, as a module the trainer image can import: `TFJobClient.train`'s cargo.

A function defined in a notebook or a script exists in the client's process only; what
reaches the pods is source text (in a ConfigMap), which `tfjob-train --entrypoint
/opt/tfjob-function/tfjob_function.py:<name>` imports (function_job.py). So the module
is rebuilt from what the function uses:

- its own source, and that of the functions and classes it calls that were defined in the
  same place (the notebook's `__main__`, or the script's module), recursively;
- an `import` line for each module it names (`tf`, `np`), and a `from ... import` line for
  each function or class it names that lives in an importable module (not `__main__`);
- an assignment for each constant it reads (numbers, strings, booleans, None, and tuples,
  lists, sets and dicts of them), as `repr` writes it back.

What cannot be rebuilt is refused before anything is created, naming it: a lambda or a
function nested in another (its closure holds objects of the client's process), a global
that is some other object (a DataFrame, an open file, a model), a function whose source
cannot be read (typed at a bare interpreter prompt). Pass such data as arguments of the
job (`train(..., args=[...])`) or load it in the function.
"""

from __future__ import annotations

import builtins
import dis
import inspect
import textwrap
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Final

#: The module name the shipped source is imported as in the pods.
MODULE: Final = "tfjob_function"
#: The constants' types that `repr` writes back as the same value.
_CONSTANTS: Final = (int, float, complex, str, bytes, bool, type(None))


class UnshippableError(ValueError):
    """What of a function cannot travel to the pods, and why."""


@dataclass(frozen=True)
class Shipped:
    """The module's source, and the function to call in it."""

    source: str
    function: str


@dataclass
class _Module:
    """The module being rebuilt: imports, constants and definitions, each once, in the
    order they are first needed (a definition after those it uses)."""

    home: str
    imports: dict[str, str] = field(default_factory=dict)
    constants: dict[str, str] = field(default_factory=dict)
    definitions: dict[str, str] = field(default_factory=dict)
    visiting: set[str] = field(default_factory=set)

    def text(self) -> str:
        # Annotations stay text: the names they use need not be shipped.
        parts = [
            f'"""Shipped by tfjob-operator\'s TFJobClient.train from {self.home}."""',
            "from __future__ import annotations",
            *sorted(set(self.imports.values())),
            *(f"{name} = {value}" for name, value in self.constants.items()),
            *self.definitions.values(),
        ]
        return "\n\n".join(part for part in parts if part) + "\n"


def ship(function: Callable[..., Any]) -> Shipped:
    """The module that defines `function` in the pods; UnshippableError says what cannot."""
    if not isinstance(function, types.FunctionType):
        raise UnshippableError(
            f"{function!r} is not a Python function: train() ships a function defined "
            "with def, at the top level of a notebook cell or a module"
        )
    _check_top_level(function)
    module = _Module(function.__module__)
    _define(module, function.__name__, function)
    return Shipped(module.text(), function.__name__)


def _check_top_level(function: types.FunctionType) -> None:
    if function.__name__ == "<lambda>":
        raise UnshippableError(
            f"cannot ship a lambda ({_where(function)}): define the function with def at "
            "the top level of a notebook cell or a module"
        )
    if "<locals>" in function.__qualname__ or function.__closure__:
        captured = ", ".join(function.__code__.co_freevars) or "its enclosing scope"
        raise UnshippableError(
            f"cannot ship {function.__qualname__} ({_where(function)}): it is defined inside "
            f"another function and closes over {captured}, objects of this Python process. "
            "Define it at the top level, and pass what it needs as arguments of the job"
        )


def _where(function: types.FunctionType) -> str:
    code = function.__code__
    return f"{code.co_filename}, line {code.co_firstlineno}"


def _define(module: _Module, name: str, value: types.FunctionType | type) -> None:
    """Adds `value`'s source, after what it uses."""
    if name in module.definitions or name in module.visiting:
        return
    module.visiting.add(name)
    try:
        source = textwrap.dedent(inspect.getsource(value))
    except (OSError, TypeError):
        raise UnshippableError(
            f"cannot ship {name}: its source cannot be read (defined at an interactive "
            "prompt?). Define it in a notebook cell, a script or a module"
        ) from None
    for used, found in _globals_used(value):
        _add_global(module, name, used, found)
    module.definitions[name] = source.rstrip()


def _globals_used(value: types.FunctionType | type) -> Iterator[tuple[str, Any]]:
    """The module-level names `value` reads, with what they are bound to now."""
    namespace: dict[str, Any]
    if isinstance(value, types.FunctionType):
        namespace = value.__globals__
        codes = [value.__code__]
        for default in (value.__defaults__ or ()) + tuple((value.__kwdefaults__ or {}).values()):
            if not isinstance(default, _CONSTANTS):
                raise UnshippableError(
                    f"cannot ship {value.__qualname__}: a default argument is {default!r}, an "
                    "object of this Python process"
                )
    else:
        namespace = vars(inspect.getmodule(value) or builtins)
        codes = [
            member.__code__
            for member in vars(value).values()
            if isinstance(member, types.FunctionType)
        ]
        for base in value.__bases__:
            if base.__module__ != "builtins":
                yield base.__name__, base
    seen: set[str] = set()
    for code in _all_codes(codes):
        for instruction in dis.get_instructions(code):
            if instruction.opname in ("LOAD_GLOBAL", "LOAD_NAME") and isinstance(
                instruction.argval, str
            ):
                used = instruction.argval
                if used in seen or used not in namespace:
                    continue
                seen.add(used)
                yield used, namespace[used]


def _all_codes(codes: list[types.CodeType]) -> Iterator[types.CodeType]:
    """The code objects and those nested in them (comprehensions, inner functions)."""
    for code in codes:
        yield code
        nested = [c for c in code.co_consts if isinstance(c, types.CodeType)]
        yield from _all_codes(nested)


def _add_global(module: _Module, user: str, name: str, value: Any) -> None:
    if isinstance(value, types.ModuleType):
        imported = value.__name__
        line = f"import {imported}" if imported == name else f"import {imported} as {name}"
        if "." in imported and imported.rsplit(".", 1)[1] == name:
            line = f"from {imported.rsplit('.', 1)[0]} import {name}"
        module.imports[name] = line
        return
    if isinstance(value, (types.FunctionType, type)):
        home = getattr(value, "__module__", None) or ""
        if home == module.home or home == "__main__":
            if isinstance(value, types.FunctionType):
                _check_top_level(value)
            _define(module, name, value)
            return
        if home == "builtins":
            return
        original = getattr(value, "__name__", name)
        alias = "" if original == name else f" as {name}"
        module.imports[name] = f"from {home} import {original}{alias}"
        return
    if isinstance(value, types.BuiltinFunctionType):
        home = getattr(value, "__module__", None)
        if home and home != "builtins":
            module.imports[name] = f"from {home} import {value.__name__}"
        return
    if _is_constant(value):
        module.constants[name] = repr(value)
        return
    raise UnshippableError(
        f"cannot ship {user}: it reads the global {name}, a {type(value).__name__} of this "
        "Python process, which only numbers, strings and collections of them can be rebuilt "
        "from. Load it in the function, or pass it as an argument of the job"
    )


def _is_constant(value: Any, depth: int = 0) -> bool:
    """Whether `repr(value)` evaluates back to an equal value."""
    if depth > 8:
        return False
    if isinstance(value, _CONSTANTS):
        return True
    if isinstance(value, (tuple, list, set, frozenset)):
        return all(_is_constant(item, depth + 1) for item in value)
    if isinstance(value, dict):
        return all(
            _is_constant(k, depth + 1) and _is_constant(v, depth + 1) for k, v in value.items()
        )
    return False
