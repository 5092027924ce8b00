"""How much the operator asks of the API server at once (defaults of `tfjob-operator run`)."""

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
