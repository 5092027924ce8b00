"""The benchmark's large job (bench/big_job.py): at the bound the CRD allows, valid as the
operator reads it, and its figures' table."""

from __future__ import annotations

from bench import big_job
from tfjob_operator.spec import MAX_REPLICAS


def test_the_large_job_is_at_the_replica_bound_and_the_operator_accepts_it() -> None:
    spec = big_job.BIG_SHAPE.parsed(big_job.BIG_NAME)
    assert spec.total_replicas == MAX_REPLICAS
    assert len(big_job.Jobs(((big_job.BIG_NAME, big_job.BIG_SHAPE),)).children) == MAX_REPLICAS


def test_the_table_says_each_figure_with_its_unit() -> None:
    summary = {"count": 50, "p50": 0.4, "p99": 0.9}
    result = {
        "big_job": {"replicas": 1000, "shape": "chief=1,worker=999",
                    "floor_create_seconds": 20.0, "operator_create_seconds": 24.0, "ratio": 1.2,
                    "operator_create_seconds_beside_small": 30.0},
        "small_jobs": {"count": 50, "shape": "chief=1,worker=4,ps=2",
                       "create_to_pods_alone_seconds": summary,
                       "create_to_pods_beside_big_seconds": {**summary, "p50": 0.6}},
        "operator": {"peak_rss_mib_big_alone": 85.0, "peak_rss_mib_small_alone": 60.0,
                     "peak_rss_mib_together": 90.0, "rss_at_ready_mib": 45.0,
                     "requests_big_alone": {}},
    }  # fmt: skip
    text = big_job.table(result)
    assert "| its children created: floor / operator | 20.0 s / 24.0 s (1.2x); beside" in text
    assert "alone 0.4 / 0.9 s; beside the large job 0.6 / 0.9 s" in text
    assert "85.0 MiB large alone, 60.0 MiB small alone, 90.0 MiB together" in text
