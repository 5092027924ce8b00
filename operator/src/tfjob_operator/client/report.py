"""Text a person reads about TFJobs: the progress line, the `get` table, `describe`.

Pure functions of the views (views.py) and of the events and log lines the client read,
so what they say is tested without a cluster. `describe` is also the diagnosis the client
gives when a job does not progress: the state and its reason, each replica's phase and why
it waits or ended (with exit codes), the last events, and the last log lines of replicas
that failed or cannot start.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, Final

from .views import Dispatch, Replica, TFJob

#: Events `describe` shows, the newest last.
EVENTS: Final = 10
#: Log lines `describe` shows of a replica that failed or cannot start.
LOG_LINES: Final = 8
#: Phases of a replica that is doing what it should.
HEALTHY: Final = frozenset({"Running", "Succeeded"})


def age(seconds: float) -> str:
    """As kubectl prints ages: 45s, 3m12s, 2h5m, 3d4h."""
    seconds = max(int(seconds), 0)
    if seconds < 60:
        return f"{seconds}s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m{seconds}s" if minutes < 10 else f"{minutes}m"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours}h{minutes}m" if minutes else f"{hours}h"
    days, hours = divmod(hours, 24)
    return f"{days}d{hours}h" if hours else f"{days}d"


def state_text(job: TFJob) -> str:
    """`Running`, or `Created (FailedCreatePod: ...)` when a reason says why not further."""
    reason, message = job.reason, job.message
    quiet = {"TFJobCreated", "TFJobRunning", "TFJobSucceeded"}
    if not reason or reason in quiet:
        return job.state
    return f"{job.state} ({reason}: {message})" if message else f"{job.state} ({reason})"


def progress_line(job: TFJob, replicas: Sequence[Replica], elapsed: float | None = None) -> str:
    """One line: the job, its state, how long it has been followed, each replica."""
    parts = ", ".join(f"{r.name} {r.summary}" for r in replicas) or "no pods yet"
    waited = f" [{age(elapsed)}]" if elapsed is not None else ""
    return f"{job.name}: {state_text(job)}{waited} | {parts}"


def table(
    jobs: Sequence[TFJob],
    now: datetime,
    *,
    namespaces: bool = False,
    dispatches: Mapping[str, Dispatch] | None = None,
) -> str:
    """`kubectl get tfjobs`' columns, with the API group, for jobs of either API; with
    the worker cluster of each job MultiKueue runs (`dispatches`, by job uid), if any."""
    header = ["NAME", "STATE", "AGE", "REASON", "API"]
    if namespaces:
        header.insert(0, "NAMESPACE")
    if dispatches:
        header.append("CLUSTER")
    rows = [header]
    for job in jobs:
        created = job.created
        row = [
            job.name,
            job.state,
            age((now - created).total_seconds()) if created else "",
            job.reason,
            job.api_version,
        ]
        if namespaces:
            row.insert(0, job.namespace)
        if dispatches:
            dispatch = dispatches.get(job.uid)
            row.append((dispatch.cluster if dispatch else None) or ("<none>" if dispatch else ""))
        rows.append(row)
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    return "\n".join(
        "   ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in rows
    )


def checkpoint_text(checkpoint: Mapping[str, Any]) -> str:
    """`status.checkpoint` in words: where the replicas stopped, and whether the job has
    resumed from it."""
    text = (
        f"step {checkpoint.get('step')} (epoch {checkpoint.get('epoch')}), written as the "
        f"replicas stopped at {checkpoint.get('stoppedAt')}"
    )
    if checkpoint.get("resumedAt"):
        return f"{text}; resumed from it at {checkpoint['resumedAt']}"
    return f"{text}; the job resumes from it"


def describe(
    job: TFJob,
    replicas: Sequence[Replica],
    events: Sequence[Mapping[str, Any]],
    logs: Mapping[str, Sequence[str]],
    now: datetime,
    dispatch: Dispatch | None = None,
) -> str:
    """The job's status, each replica, the last events, and the log tails in `logs` (by
    replica name; the client reads them for replicas that are not healthy); for a job
    another controller runs (`dispatch`), where it runs."""
    created = job.created
    lines = [
        f"Name:       {job.name}",
        f"Namespace:  {job.namespace}",
        f"API:        {job.api_version}",
        f"State:      {state_text(job)}",
    ]
    if created:
        lines.append(f"Age:        {age((now - created).total_seconds())}")
    status = job.object.get("status") or {}
    if status.get("restartCount"):
        lines.append(f"Restarts:   {status['restartCount']}")
    if checkpoint := status.get("checkpoint"):
        lines.append(f"Checkpoint: {checkpoint_text(checkpoint)}")
    if dispatch is not None:
        lines.append(f"Runs on:    {dispatch.where}")
        if dispatch.cluster:
            lines.append(f"            {dispatch.elsewhere}")
        for name, state, message in dispatch.checks:
            lines.append(f"  check {name}: {state}" + (f": {message}" if message else ""))
    lines.append("Conditions:")
    for condition in job.conditions:
        lines.append(
            f"  {condition.get('type', ''):<11}{condition.get('status', ''):<7}"
            f"{condition.get('reason', '')}: {condition.get('message', '')}"
        )
    wanted = ", ".join(f"{kind} {count}" for kind, count in job.replica_counts.items())
    lines.append(f"Replicas ({wanted}):")
    if not replicas:
        lines.append("  no pods")
    for replica in replicas:
        where = f" on {replica.node}" if replica.node else ""
        lines.append(f"  {replica.name:<13}{replica.summary}{where}")
        if replica.message and replica.phase not in HEALTHY:
            lines.append(f"    {replica.message}")
        for line in logs.get(replica.name, ())[-LOG_LINES:]:
            lines.append(f"    log| {line[:300]}")
    lines.append("Events:")
    shown = sorted(events, key=event_time)[-EVENTS:]
    if not shown:
        lines.append("  none")
    for event in shown:
        stamp = event_time(event)
        when = age((now - datetime.fromisoformat(stamp)).total_seconds()) if stamp else "?"
        count = event.get("count") or (event.get("series") or {}).get("count") or 1
        repeat = f" (x{count})" if count > 1 else ""
        involved = (event.get("involvedObject") or {}).get("name", "")
        lines.append(
            f"  {when:>6} ago  {event.get('type', ''):<8}{event.get('reason', '')}{repeat}"
            f"  {involved}: {event.get('message', '')}"
        )
    return "\n".join(lines)


def needs_log(replica: Replica) -> bool:
    """Whether `describe` should show the replica's log: it failed, restarted or waits for
    a reason other than being scheduled or pulled."""
    return (
        (replica.phase not in HEALTHY and replica.exit_code is not None)
        or bool(replica.restarts)
        or replica.reason in ("CrashLoopBackOff", "Error")
    )


def event_time(event: Mapping[str, Any]) -> str:
    """When an event last happened, as an ISO timestamp that sorts in time order."""
    stamp = (
        event.get("lastTimestamp")
        or (event.get("series") or {}).get("lastObservedTime")
        or event.get("eventTime")
        or (event.get("metadata") or {}).get("creationTimestamp")
        or ""
    )
    return str(stamp).replace("Z", "+00:00")
