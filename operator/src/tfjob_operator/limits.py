"""How much the operator asks of the API server at once (defaults of `tfjob-operator run`)."""

from typing import Final

#: Write requests in flight: a burst of new TFJobs queues in the operator instead of
#: opening hundreds of connections to the API server.
MAX_IN_FLIGHT: Final = 32
#: Jobs reconciled at once. More would only queue their writes (and hold their rendered
#: children in memory) behind the API server's throughput.
CONCURRENT_RECONCILES: Final = 32
