"""Leader election (leader.py): client-go's rules, against a fake Lease API and clocks."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
import pytest

from tfjob_operator.leader import (
    ElectionError,
    Elector,
    LeaseRecord,
    Timings,
    can_take,
    released_spec,
    taken_spec,
)
from tfjob_operator.metrics import Metrics

AT = datetime(2026, 11, 25, 12, 0, 0, 123456, tzinfo=UTC)


def record(holder: str, transitions: int = 0, renew: str = "r1", seconds: int = 15) -> LeaseRecord:
    return LeaseRecord(holder, seconds, "a0", renew, transitions, "7")


def test_a_free_or_own_lease_may_be_taken_at_once() -> None:
    assert can_take(None, "b", now=0.0, observed_at=0.0)
    assert can_take(record(""), "b", now=0.0, observed_at=0.0)
    assert can_take(record("b"), "b", now=0.0, observed_at=0.0)


def test_anothers_lease_is_taken_only_after_its_duration_as_observed_here() -> None:
    held = record("a", seconds=15)
    assert not can_take(held, "b", now=114.9, observed_at=100.0)
    assert can_take(held, "b", now=115.0, observed_at=100.0)


def test_taking_counts_a_transition_and_renewing_keeps_the_acquire_time() -> None:
    taken = taken_spec(record("a", transitions=3), "b", 15, AT)
    assert taken == {
        "holderIdentity": "b",
        "leaseDurationSeconds": 15,
        "acquireTime": "2026-11-25T12:00:00.123456Z",
        "renewTime": "2026-11-25T12:00:00.123456Z",
        "leaseTransitions": 4,
    }
    renewed = taken_spec(record("b", transitions=4), "b", 15, AT + timedelta(seconds=2))
    assert renewed["acquireTime"] == "a0"
    assert renewed["leaseTransitions"] == 4
    assert taken_spec(None, "b", 15, AT)["leaseTransitions"] == 0


def test_a_released_lease_has_no_holder_and_expires_at_once() -> None:
    assert released_spec(record("b", transitions=4), AT) == {
        "holderIdentity": "",
        "leaseDurationSeconds": 1,
        "acquireTime": "2026-11-25T12:00:00.123456Z",
        "renewTime": "2026-11-25T12:00:00.123456Z",
        "leaseTransitions": 4,
    }


def test_timings_must_leave_the_old_leader_time_to_stop() -> None:
    Timings().check()
    with pytest.raises(ElectionError, match="lease duration > renew deadline"):
        Timings(lease_duration=10, renew_deadline=10).check()


class FakeLeases:
    """The Lease API: GET, POST and PUT with resourceVersion preconditions."""

    def __init__(self) -> None:
        self.body: dict[str, Any] | None = None
        self.version = 0
        self.writes: list[tuple[str, str]] = []
        self.down = False
        #: Each request's time limit, and how often writes in flight were abandoned.
        self.limits: list[float] = []
        self.abandoned = 0
        #: Seconds each answer takes, on `clock`; one longer than the request's limit
        #: times out at the limit.
        self.latency = 0.0
        self.clock: Clock | None = None

    def abandon_writes(self) -> None:
        self.abandoned += 1

    async def request(
        self, method: str, path: str, *, data: bytes | None = None, **options: Any
    ) -> tuple[int, bytes]:
        limit = options["limit_seconds"]
        self.limits.append(limit)
        if self.clock is not None:
            self.clock.now += min(self.latency, limit)
            if self.latency > limit:
                raise TimeoutError(f"no answer in {limit:g}s")
        if self.down:
            raise OSError("connection refused")
        if path.endswith("/events"):
            return 201, b"{}"
        if method == "GET":
            return (404, b"{}") if self.body is None else (200, orjson.dumps(self.body))
        assert data is not None
        body = orjson.loads(data)
        if method == "POST" and self.body is not None:
            return 409, b"{}"
        if method == "PUT" and (
            self.body is None
            or body["metadata"].get("resourceVersion") != self.body["metadata"]["resourceVersion"]
        ):
            return 409, b"{}"
        self.version += 1
        body["metadata"]["resourceVersion"] = str(self.version)
        self.body = body
        self.writes.append((method, body["spec"]["holderIdentity"]))
        return 200, orjson.dumps(body)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def elector(leases: FakeLeases, identity: str, clock: Clock) -> Elector:
    return Elector(
        leases,  # type: ignore[arg-type]
        "tfjob-system",
        "tfjob-operator",
        identity,
        Timings(),
        Metrics(),
        monotonic=clock,
        wall=lambda: AT,
    )


def test_the_first_candidate_creates_the_lease_and_leads() -> None:
    async def scenario() -> None:
        leases, clock = FakeLeases(), Clock()
        first = elector(leases, "operator-a", clock)
        assert await first._try_take()
        assert leases.writes == [("POST", "operator-a")]
        assert first.may_write()
        second = elector(leases, "operator-b", clock)
        assert not await second._try_take()
        assert not second.may_write()

    asyncio.run(scenario())


def test_a_standby_takes_over_only_once_the_lease_went_unrenewed_for_its_duration() -> None:
    async def scenario() -> None:
        leases, clock = FakeLeases(), Clock()
        leader = elector(leases, "operator-a", clock)
        assert await leader._try_take()
        standby = elector(leases, "operator-b", clock)
        await standby._read(10)  # the watch shows it the Lease: observed now
        clock.now += 14.9
        assert not await standby._try_take()
        clock.now += 0.2
        assert await standby._try_take()
        assert leases.body is not None
        assert leases.body["spec"]["holderIdentity"] == "operator-b"
        assert leases.body["spec"]["leaseTransitions"] == 1
        # The old leader, whose renewal is now past its deadline, may not write.
        assert not leader.may_write()

    asyncio.run(scenario())


def test_a_leader_that_cannot_renew_stops_writing_at_its_renew_deadline() -> None:
    async def scenario() -> None:
        leases, clock = FakeLeases(), Clock()
        leader = elector(leases, "operator-a", clock)
        assert await leader._try_take()
        clock.now += 9.9
        assert leader.may_write()
        clock.now += 0.1
        assert not leader.may_write()

    asyncio.run(scenario())


def test_renewing_keeps_the_leader_writing_and_a_lost_lease_ends_its_leadership() -> None:
    async def scenario() -> None:
        leases, clock = FakeLeases(), Clock()
        leader = elector(leases, "operator-a", clock)
        assert await leader._try_take()
        clock.now += 5
        assert await leader._renew_once(10)
        clock.now += 9
        assert leader.may_write()  # renewed 9 s ago
        # Someone took the Lease meanwhile: the renewal finds it is not the holder.
        assert leases.body is not None
        leases.body["spec"]["holderIdentity"] = "operator-b"
        leases.body["metadata"]["resourceVersion"] = "99"
        assert not await leader._renew_once(10)

    asyncio.run(scenario())


def test_a_renewal_may_use_all_that_is_left_of_the_renew_deadline() -> None:
    """As client-go's: an API server answering in 4-10 s does not cost the leadership."""

    async def scenario() -> None:
        leases, clock = FakeLeases(), Clock()
        leader = elector(leases, "operator-a", clock)
        assert await leader._try_take()
        clock.now += 2
        leases.limits.clear()
        assert await leader._renew_once(8.0)
        assert leases.limits == [8.0]  # not 2 x the retry period (4 s)

    asyncio.run(scenario())


def test_a_slow_api_server_closes_the_write_fence_for_a_while_not_the_leadership() -> None:
    """Answers 6 s late: each renewal takes 6 s of its 10, as client-go's would, and the
    leader keeps the Lease; its writes are fenced by the last renewal, sent 6 s ago."""

    async def scenario() -> None:
        leases, clock = FakeLeases(), Clock()
        leader = elector(leases, "operator-a", clock)
        assert await leader._try_take()
        leases.clock, leases.latency = clock, 6.0
        for _ in range(3):
            clock.now += 2  # the retry period
            assert await leader._renew_within(clock.now + 10) is None
            assert leader.write_deadline() == pytest.approx(clock.now + 4)
        clock.now += 4
        assert not leader.may_write()  # no renewal answered in time: fenced, still leading
        leases.latency = 11.0
        why = await leader._renew_within(clock.now + 10)
        assert why == "could not renew it for 10s (renew deadline)"

    asyncio.run(scenario())


def test_a_leader_that_finds_the_lease_lost_stops_writing_and_abandons_its_writes() -> None:
    async def scenario() -> None:
        leases, clock = FakeLeases(), Clock()
        timings = Timings(lease_duration=1.0, renew_deadline=0.5, retry_period=0.05)
        leader = Elector(
            leases,  # type: ignore[arg-type]
            "tfjob-system", "tfjob-operator", "operator-a", timings, Metrics(),
            monotonic=clock, wall=lambda: AT,
        )  # fmt: skip
        assert await leader._try_take()
        assert leases.body is not None
        leases.body["spec"]["holderIdentity"] = "operator-b"
        leases.body["metadata"]["resourceVersion"] = "99"
        leader.record = None  # its watch has not shown it yet
        await asyncio.wait_for(leader._renew(), 5)
        # Well within its renew deadline by its clock, it writes nothing more.
        assert not leader.may_write()
        assert leases.abandoned == 1

    asyncio.run(scenario())


def test_release_gives_the_lease_up_so_a_standby_takes_it_at_once() -> None:
    async def scenario() -> None:
        leases, clock = FakeLeases(), Clock()
        leader = elector(leases, "operator-a", clock)
        assert await leader._try_take()
        await leader.release()
        assert not leader.may_write()
        standby = elector(leases, "operator-b", clock)
        assert await standby._try_take()  # no waiting for the lease's duration

    asyncio.run(scenario())


def test_an_unreachable_api_server_is_a_lost_attempt_not_a_crash() -> None:
    async def scenario() -> None:
        leases, clock = FakeLeases(), Clock()
        leases.down = True
        candidate = elector(leases, "operator-a", clock)
        assert not await candidate._attempt()
        leases.down = False
        assert await candidate._attempt()

    asyncio.run(scenario())
