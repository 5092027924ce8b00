"""ParameterServerStrategy ps and worker tasks: serve until SIGTERM.

Their servers never finish on their own, even after the coordinator is done: the job
is complete when the chief is, and the operator deletes the rest. `server.join()`
blocks inside TensorFlow, where Python signal handlers never run, so the main thread
waits in `signal.pause()` instead and SIGTERM ends the process at once (exit 143).
"""

from __future__ import annotations

import signal
from typing import Any, NoReturn

from tfjob_trainer.termination import exit_on_sigterm
from tfjob_trainer.tf_runtime import start_server


def serve_forever(resolver: Any) -> NoReturn:
    exit_on_sigterm()
    server = start_server(resolver)
    print(
        f"[{resolver.task_type} {resolver.task_id}] serving at {server.target}; runs until SIGTERM",
        flush=True,
    )
    while True:
        signal.pause()
