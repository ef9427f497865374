"""bench/agent_workload.py --profile: the in-process stages, gzip measured as the exporter does it."""

from __future__ import annotations

import pytest

from bench.agent_workload import STAGES, build_workload, profile


@pytest.fixture(scope="module")
def workload():
    return build_workload(2, 1, 16)


def test_gzip_is_timed_with_gzip_and_absent_without(workload):
    with_gzip = profile(workload, top=5, compression="gzip")
    without = profile(workload, top=5, compression="none")
    assert set(with_gzip["us_per_turn"]) == set(STAGES)
    assert with_gzip["us_per_turn"]["gzip"] > 0
    assert without["us_per_turn"]["gzip"] == 0
    # the other stages are timed either way
    assert without["us_per_turn"]["read"] > 0 and without["us_per_turn"]["encode"] > 0
