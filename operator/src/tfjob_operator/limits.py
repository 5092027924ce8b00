"""Defaults of `tfjob-operator run`: how much it asks of the API server at once, and how
long it waits."""

from typing import Final

#: Write requests in flight: a burst of new TFJobs queues in the operator instead of
#: opening hundreds of connections to the API server.
MAX_IN_FLIGHT: Final = 32
#: Jobs reconciled at once. More would only queue their writes (and hold their rendered
#: children in memory) behind the API server's throughput.
CONCURRENT_RECONCILES: Final = 32

#: Leader election (leader.py): client-go's defaults.
LEASE_DURATION_SECONDS: Final = 15.0
RENEW_DEADLINE_SECONDS: Final = 10.0
RETRY_PERIOD_SECONDS: Final = 2.0
LEASE_NAME: Final = "tfjob-operator"

#: How long the API server may refuse a job's pod or service as invalid before the job
#: fails (refusals.py): time to fix the TFJob's spec, not enough to hide the failure.
INVALID_POD_GRACE_SECONDS: Final = 30.0
