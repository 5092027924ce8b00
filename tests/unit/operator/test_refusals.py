"""The refusals a job's children met (refusals.py): their backoff, what counts as the same
refusal, and what the controller forgets."""

from __future__ import annotations

from dataclasses import replace

from support.builders import NOW

from tfjob_operator.refusals import MAX_RETRY_SECONDS, Refusal, Refusals

FORBIDDEN = Refusal("pod", "worker-0", 403, "Forbidden", "quota", 1, NOW, 1)
POD = ("pod", "mnist-worker-0")


def test_each_refusal_doubles_the_wait_up_to_a_minute_and_keeps_its_first_moment() -> None:
    refusals = Refusals(uniform=lambda: 0.0)  # the least jitter
    waits = []
    for attempt in range(8):
        refusal, new = refusals.record(
            replace(FORBIDDEN, message=f"quota {attempt}"), POD[1], 100.0
        )
        assert new == (attempt == 0)
        waits.append(refusals.retry_in(POD, 100.0))
    assert waits == [2, 4, 8, 16, 32, MAX_RETRY_SECONDS, MAX_RETRY_SECONDS, MAX_RETRY_SECONDS]
    assert refusal.count == 8
    assert refusal.since == NOW  # the grace of an invalid pod counts from the first
    assert refusal.message == "quota 7"  # the API server's latest words
    assert refusals.backing_off(POD, 1, 159.0)
    assert not refusals.backing_off(POD, 1, 160.0)
    assert not refusals.backing_off(POD, 2, 100.0)  # an edited spec is tried at once


def test_another_status_or_generation_is_a_new_refusal() -> None:
    refusals = Refusals()
    refusals.record(FORBIDDEN, POD[1], 0.0)
    later = NOW.replace(minute=5)
    invalid = replace(FORBIDDEN, status=422, reason="Invalid", since=later)
    refusal, new = refusals.record(invalid, POD[1], 10.0)
    assert new
    assert (refusal.count, refusal.since, refusal.permanent) == (1, later, True)
    assert not FORBIDDEN.permanent


def test_a_pod_and_its_service_are_separate_and_forgotten_when_not_created_again() -> None:
    refusals = Refusals()
    refusals.record(FORBIDDEN, "mnist-worker-0", 0.0)
    service = replace(FORBIDDEN, kind="service")
    refusals.record(service, "mnist-worker-0", 0.0)
    assert sorted(r.condition_reason for r in refusals) == [
        "FailedCreatePod",
        "FailedCreateService",
    ]
    refusals.keep_only([("service", "mnist-worker-0")])
    assert [r.kind for r in refusals] == ["service"]
    refusals.accepted(("service", "mnist-worker-0"))
    assert not refusals
    assert refusals.next_retry(0.0) is None


def test_retries_are_jittered_by_up_to_half_their_wait() -> None:
    refusals = Refusals(uniform=lambda: 1.0)  # the most jitter
    refusals.record(FORBIDDEN, POD[1], 100.0)
    assert refusals.retry_in(POD, 100.0) == 3.0
