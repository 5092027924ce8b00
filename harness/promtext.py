"""Figures read from Prometheus text exposition (the API server's and the operator's)."""

from __future__ import annotations

from collections.abc import Mapping

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


def histogram_totals(
    text: str, family_name: str, key: str | None = None, where: Mapping[str, str] | None = None
) -> dict[str, tuple[float, int]]:
    """(seconds in all, count) of a histogram so far, by the value of its label `key` ("" for
    a histogram read whole), over the samples whose labels match `where`."""
    found: dict[str, tuple[float, int]] = {}
    for family in text_string_to_metric_families(text):
        if family.name != family_name:
            continue
        for sample in family.samples:
            if any(sample.labels.get(name) != value for name, value in (where or {}).items()):
                continue
            label = sample.labels.get(key, "") if key else ""
            seconds, count = found.get(label, (0.0, 0))
            if sample.name.endswith("_sum"):
                found[label] = (seconds + sample.value, count)
            elif sample.name.endswith("_count"):
                found[label] = (seconds, count + int(sample.value))
    return found


def histogram_delta(
    before: str,
    after: str,
    family_name: str,
    key: str | None = None,
    where: Mapping[str, str] | None = None,
) -> dict[str, tuple[float, int]]:
    """What a histogram observed between two readings, by key (see `histogram_totals`):
    (seconds, count), for the keys observed at all in between."""
    start = histogram_totals(before, family_name, key, where)
    end = histogram_totals(after, family_name, key, where)
    found = {}
    for label, (seconds, count) in end.items():
        seconds_before, count_before = start.get(label, (0.0, 0))
        if count > count_before:
            found[label] = (seconds - seconds_before, count - count_before)
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
