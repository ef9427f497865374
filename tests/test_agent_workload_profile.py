"""bench/agent_workload.py --profile: the in-process stages, gzip timed as the exporter does it."""

from __future__ import annotations

import pytest

from bench.agent_workload import STAGES, build_workload, profile
from otelsignals.pipeline import senders


@pytest.fixture(scope="module")
def workload():
    return build_workload(2, 1, 16)


def test_gzip_is_the_exporters_own_and_absent_without(workload, monkeypatch):
    bodies: list[int] = []
    exporters_gzip = senders.gzip_fast

    def counted(body: bytes) -> bytes:
        bodies.append(len(body))
        return exporters_gzip(body)

    monkeypatch.setattr(senders, "gzip_fast", counted)
    with_gzip = profile(workload, top=5, compression="gzip")
    assert bodies, "the profile gzips with the exporter's function"
    bodies.clear()
    without = profile(workload, top=5, compression="none")
    assert not bodies
    assert set(with_gzip["us_per_turn"]) == set(STAGES)
    assert with_gzip["us_per_turn"]["gzip"] > 0
    assert without["us_per_turn"]["gzip"] == 0
    # encoding is timed either way, the last batch's too, and never has the gzip taken off twice
    for result in (with_gzip, without):
        assert result["us_per_turn"]["read"] > 0
        assert result["us_per_turn"]["encode"] > 0
