"""Process exit codes of `tfjob-train`: the operator decides restarts from them.

- 0: success: training (or evaluation) finished and printed its results line.
- 1: an error in the training code (a bug, bad data, a failed assertion). Permanent.
- 2: invalid configuration: bad TF_CONFIG, flags or environment; one line on stderr,
  no traceback. Permanent.
- 42: retryable. Preempted (SIGTERM during training, after writing a checkpoint); a
  lost peer (the MWMS collective aborted, UnavailableError, DeadlineExceeded from the
  collective timeout); a lost ps seen by the PSS coordinator; an evaluator that saw
  no new checkpoint for longer than its timeout.
- 143: stopped by SIGTERM (128 + 15): a ParameterServerStrategy ps or worker server, or
  any task before its training started (init.py).

Why 42: TensorFlow's own preemption handling exits 42 outside Google Cloud, so a job
that mixes our trainer with user code calling `PreemptionCheckpointHandler` speaks one
language. The operator treats 42 and every code >= 128 (killed by a signal) as
retryable and 1-127 other than 42 as permanent.

Under MultiWorkerMirroredStrategy a retryable exit of one replica means the whole
group must be restarted together: a lone restarted worker cannot rejoin a collective
group (see trainer/README.md).
"""

from typing import Final

SUCCESS: Final = 0
TRAINING_ERROR: Final = 1
INVALID_CONFIGURATION: Final = 2
RETRYABLE: Final = 42
TERMINATED_BY_SIGTERM: Final = 128 + 15
