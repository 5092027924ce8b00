"""Events of repeats count up one Event (events.py), as client-go's recorder does."""

from __future__ import annotations

from support.builders import NOW

from tfjob_operator.events import WARNING, Event, EventSeries, repeat_patch


def test_repeats_of_a_replica_share_a_series_whatever_their_messages() -> None:
    series = EventSeries(window=600)
    pulled = series.of("uid", Event(WARNING, "ErrImagePull", "dial :41234", "worker-0"), 0.0)
    again = series.of("uid", Event(WARNING, "ErrImagePull", "dial :41999", "worker-0"), 30.0)
    assert again is pulled
    other_reason = series.of("uid", Event(WARNING, "ImagePullBackOff", "x", "worker-0"), 30.0)
    other_replica = series.of("uid", Event(WARNING, "ErrImagePull", "x", "worker-1"), 30.0)
    other_job = series.of("uid-2", Event(WARNING, "ErrImagePull", "x", "worker-0"), 30.0)
    assert len({id(s) for s in (pulled, other_reason, other_replica, other_job)}) == 4


def test_without_a_series_only_identical_messages_repeat_and_the_window_ends_one() -> None:
    series = EventSeries(window=600)
    created = series.of("uid", Event("Normal", "SuccessfulCreatePod", "Created pods a"), 0.0)
    assert series.of("uid", Event("Normal", "SuccessfulCreatePod", "Created pods a"), 1.0) is (
        created
    )
    assert series.of("uid", Event("Normal", "SuccessfulCreatePod", "Created pods b"), 1.0) is not (
        created
    )
    assert series.of(
        "uid", Event("Normal", "SuccessfulCreatePod", "Created pods a"), 700.0
    ) is not (created)


def test_a_repeat_patches_the_count_the_time_and_the_latest_message() -> None:
    patch = repeat_patch(Event(WARNING, "FailedCreatePod", "x" * 2000), 3, NOW)
    assert patch["count"] == 3
    assert patch["lastTimestamp"] == "2026-11-22T12:00:00Z"
    assert len(patch["message"]) == 1024
