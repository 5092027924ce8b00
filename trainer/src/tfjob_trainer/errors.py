"""Exceptions that the command line maps to exit codes, and TensorFlow errors on one line."""

import re

_FUNCTION_NODE = re.compile(r"\{\{function_node [^}]*\}\}\s*")


class ConfigError(Exception):
    """Invalid TF_CONFIG, flags or environment: exit 2 with a one-line message."""


class RetryableError(Exception):
    """The run stopped for a reason a restart can fix: exit 42."""


class Preempted(RetryableError):
    """SIGTERM arrived during training and a checkpoint was written, in `epoch` (1-based)
    at the optimizer's `step`."""

    def __init__(self, message: str, *, epoch: int, step: int) -> None:
        super().__init__(message)
        self.epoch = epoch
        self.step = step


class EvaluatorTimeout(RetryableError):
    """The evaluator saw no new checkpoint for longer than its timeout."""


def one_line(error: BaseException, limit: int = 300) -> str:
    """The telling line of TensorFlow's multi-line error text.

    Graph execution errors start with a header and the Python stack where the failed
    op was defined; the cause is the first unindented line after those, or the first
    of several "root errors", which TensorFlow indents as "(0) ...". Eager op errors
    prefix it with "{{function_node ...}}", which is dropped.
    """
    text = _FUNCTION_NODE.sub("", getattr(error, "message", None) or str(error))
    noise = ("Graph execution error", "Detected at node", "[[")
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith(noise) or "root error(s) found" in stripped:
            continue
        if not line[0].isspace() or stripped.startswith("(0)"):
            return stripped if len(stripped) <= limit else stripped[: limit - 3] + "..."
    return " ".join(text.split())[:limit]
