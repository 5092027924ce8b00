"""A Python client for TFJobs, tfjob.dev/v1 and kubeflow.org/v1 alike: create, wait with a
progress line, follow every replica's log, read the trainer's results, say why a job does
not progress, delete. It needs the standard library and PyYAML only: `pip install
tfjob-operator` gives it without the controller's dependencies. See `jobs.TFJobClient`.
"""

from ..apiserver.errors import ApiError
from .jobs import LogLine, TFJobClient, WaitTimedOut
from .views import FINISHED, Replica, TFJob

__all__ = ["FINISHED", "ApiError", "LogLine", "Replica", "TFJob", "TFJobClient", "WaitTimedOut"]
