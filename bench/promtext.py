"""Figures read from Prometheus text exposition (the API server's and the operator's)."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families


def dispatched_requests(text: str, flow_schema: str) -> int:
    """apiserver_flowcontrol_dispatched_requests_total of one flow schema."""
    return int(
        sum(
            sample.value
            for family in text_string_to_metric_families(text)
            if family.name == "apiserver_flowcontrol_dispatched_requests"
            for sample in family.samples
            if sample.name.endswith("_total") and sample.labels.get("flow_schema") == flow_schema
        )
    )


def terminated_watchers(text: str) -> dict[str, int]:
    """Watches the API server closed because their client read too slowly, by resource."""
    found: dict[str, int] = {}
    for family in text_string_to_metric_families(text):
        if family.name != "apiserver_terminated_watchers":
            continue
        for sample in family.samples:
            if sample.name.endswith("_total") and sample.value:
                resource = sample.labels.get("resource", "")
                group = sample.labels.get("group", "")
                key = f"{resource}.{group}" if group else resource
                found[key] = found.get(key, 0) + int(sample.value)
    return found


def storage_updates(text: str) -> dict[str, tuple[float, int]]:
    """The API server's etcd updates so far by resource (plural, without its group):
    (seconds in all, count), from etcd_request_duration_seconds."""
    found: dict[str, tuple[float, int]] = {}
    for family in text_string_to_metric_families(text):
        if family.name != "etcd_request_duration_seconds":
            continue
        for sample in family.samples:
            if sample.labels.get("operation") != "update":
                continue
            resource = sample.labels.get("resource", "")
            seconds, count = found.get(resource, (0.0, 0))
            if sample.name.endswith("_sum"):
                found[resource] = (seconds + sample.value, count)
            elif sample.name.endswith("_count"):
                found[resource] = (seconds, count + int(sample.value))
    return found


def counters(text: str | None, prefix: str) -> dict[str, float]:
    """Every sample of the families named `prefix*`, but buckets and creation times."""
    if text is None:
        return {}
    found: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        if not family.name.startswith(prefix):
            continue
        for sample in family.samples:
            if sample.name.endswith(("_created", "_bucket")):
                continue
            labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()))
            found[f"{sample.name}{{{labels}}}" if labels else sample.name] = round(sample.value, 4)
    return found
