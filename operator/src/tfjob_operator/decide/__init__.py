"""The controller's decisions for one TFJob, as a pure function of what it observes.

`decide` takes the TFJob (spec and the status the operator persisted), the job's pods and
services from the watch cache, what each integration observed of it (integrations/), and
the time; it returns a frozen Plan (plan.py): the new status, the children to create and
delete, the events to record, each integration's writes, and when to look again. Nothing
here talks to the API, so every transition is unit-tested without a cluster.

A decision is a chain of pure steps over two frozen values: `Seen` (seen.py), what it
reads, and `Draft` (draft.py), the decision so far, which each step takes and returns
anew. flow.py orders the steps; outcomes.py holds how a job ends, restarts or waits;
children.py which children come and go; progress.py what the status says and the Plan.

Restart safety rests on three rules:
- Children have fixed names, so a second create of the same replica fails on the server.
- Each replica has a generation in the status; a restart increments it before any pod is
  deleted, and a pod labelled with an older generation is stale. A restart therefore counts
  once, however many times the operator is killed while carrying it out.
- Decisions that end the job or restart replicas are written to the status (with the
  resourceVersion they were based on) before the pods are touched.
"""

from .flow import decide, decide_name_taken
from .outcomes import name_order

__all__ = ["decide", "decide_name_taken", "name_order"]
