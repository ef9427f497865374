"""The reputation math (SPEC §7) with hand-computed numbers; no store involved."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from otelsignals.reputation import (
    AgentWindow,
    Evaluation,
    ReputationConfig,
    components,
    current_streak,
    latency_score,
    lifecycle_of,
    percentile,
    reputation,
    score_of,
)

CFG = ReputationConfig()


def ev(passed: bool = True, latency_ms: float = 500.0, at: float = 0.0, agent: str = "a") -> Evaluation:
    return Evaluation(agent, passed, latency_ms, at)


def run(pattern: str, latency_ms: float = 500.0) -> list[Evaluation]:
    """'P' = pass, 'F' = fail, oldest first."""
    return [ev(c == "P", latency_ms, float(i)) for i, c in enumerate(pattern)]


def test_defaults_are_the_documented_ones() -> None:
    assert (CFG.window, CFG.calibration, CFG.streak_target) == (500, 50, 20)
    assert (CFG.latency_good_ms, CFG.latency_bad_ms, CFG.latency_percentile) == (1000.0, 10000.0, 95.0)
    assert CFG.latency_aggregate == "mean"  # the reference's "normalised inverse of average latency"


# 50 evaluations: 40 passes; the newest 5 are passes after a failure. 45 latencies of 1 000 ms, 5 of
# 5 500 ms: mean 1 450 ms (latency 1 - 450 / 9 000 = 0.95); p95 (nearest rank 48 of 50) 5 500 ms (0.5).
HAND_PATTERN = "P" * 35 + "F" * 10 + "P" * 5
HAND_LATENCIES = [1000.0] * 45 + [5500.0] * 5


@pytest.mark.parametrize(
    ("aggregate", "latency", "score"),
    [
        ("mean", 0.95, 623),  # 320 + 237.5 + 50 + 15 = 622.5, rounded half up
        ("percentile", 0.5, 510),  # 320 + 125 + 50 + 15
    ],
)
def test_hand_computed_active_score(aggregate: str, latency: float, score: int) -> None:
    window = [
        ev(c == "P", lat, float(i))
        for i, (c, lat) in enumerate(zip(HAND_PATTERN, HAND_LATENCIES, strict=True))
    ]
    rep = reputation(window, 50, ReputationConfig(latency_aggregate=aggregate))  # type: ignore[arg-type]
    assert rep.components == {
        "pass_rate": 0.8,
        "latency": pytest.approx(latency),
        "streak": 0.25,
        "volume": 0.1,
    }
    assert rep.score == score
    # window_size is the window scored over (500), window_entries what it holds so far.
    assert (rep.agent_id, rep.lifecycle, rep.eval_count, rep.window_size, rep.window_entries) == (
        "a",
        "active",
        50,
        500,
        50,
    )
    assert rep.calibration is None
    assert rep.to_json() == {
        "agent_id": "a",
        "score": score,
        "lifecycle": "active",
        "eval_count": 50,
        "window_size": 500,
        "window_entries": 50,
        "components": rep.components,
    }


def test_perfect_and_worst_mature_windows() -> None:
    assert reputation(run("P" * 500, 200.0), 500).score == 1000
    worst = reputation(run("F" * 500, 60_000.0), 10_000)
    assert worst.components == {"pass_rate": 0.0, "latency": 0.0, "streak": 0.0, "volume": 1.0}
    assert worst.score == 150
    assert worst.lifecycle == "mature" and worst.eval_count == 10_000 and worst.window_size == 500


def test_window_longer_than_configured_keeps_the_newest() -> None:
    window = run("F" * 100 + "P" * 500)
    rep = reputation(window, 600)
    assert rep.window_size == 500 and rep.components["pass_rate"] == 1.0 and rep.score == 1000


@pytest.mark.parametrize(
    ("latency_ms", "expected"),
    [(0.0, 1.0), (999.9, 1.0), (1000.0, 1.0), (5500.0, 0.5), (7750.0, 0.25), (10000.0, 0.0), (1e9, 0.0)],
)
def test_latency_normalisation(latency_ms: float, expected: float) -> None:
    assert latency_score(latency_ms, CFG) == pytest.approx(expected)


def test_latency_is_the_mean_or_the_configured_percentile() -> None:
    window = [ev(True, lat) for lat in [1000.0] * 9 + [10000.0]]  # one slow outlier in 10
    assert components(window, CFG)["latency"] == pytest.approx(0.9)  # mean 1 900 ms: 1 - 900 / 9 000
    p95 = ReputationConfig(latency_aggregate="percentile")
    assert components(window, p95)["latency"] == 0.0  # p95 = 10th of 10 = 10 000 ms
    median = ReputationConfig(latency_aggregate="percentile", latency_percentile=50)
    assert components(window, median)["latency"] == 1.0  # p50 = 5th of 10 = 1 000 ms
    custom = ReputationConfig(latency_good_ms=0, latency_bad_ms=2000)
    assert components([ev(True, 500.0)], custom)["latency"] == 0.75


def test_percentile_nearest_rank() -> None:
    assert percentile([7.0], 95) == 7.0
    assert percentile([float(i) for i in range(1, 21)], 95) == 19.0
    assert percentile([float(i) for i in range(100, 0, -1)], 95) == 95.0
    assert percentile([float(i) for i in range(1, 101)], 100) == 100.0
    assert percentile([3.0, 1.0, 2.0], 50) == 2.0


def test_streak_normalisation() -> None:
    assert current_streak(run("PPPF")) == 0
    assert current_streak(run("FPPP")) == 3
    assert components(run("F" + "P" * 10), CFG)["streak"] == 0.5
    assert components(run("P" * 20), CFG)["streak"] == 1.0
    assert components(run("P" * 45), CFG)["streak"] == 1.0  # capped
    assert components(run("P" * 30 + "F"), CFG)["streak"] == 0.0  # a failure resets it
    assert components(run("P" * 3), ReputationConfig(streak_target=4))["streak"] == 0.75


def test_volume_normalisation() -> None:
    assert components(run("P" * 50), CFG)["volume"] == 0.1
    assert components(run("P" * 250), CFG)["volume"] == 0.5
    assert components(run("P" * 500), CFG)["volume"] == 1.0
    assert components(run("P" * 10), ReputationConfig(window=20, calibration=5))["volume"] == 0.5
    assert components([], CFG) == {"pass_rate": 0.0, "latency": 0.0, "streak": 0.0, "volume": 0.0}


def test_score_rounds_half_up_and_is_bounded() -> None:
    zero = {"pass_rate": 0.0, "latency": 0.0, "streak": 0.0}
    assert score_of({**zero, "volume": 0.75}) == 113  # 112.5; banker's rounding would give 112
    assert score_of({**zero, "volume": 0.25}) == 38  # 37.5
    assert score_of({"pass_rate": 1.0, "latency": 1.0, "streak": 1.0, "volume": 1.0}) == 1000
    assert score_of({"pass_rate": 2.0, "latency": 5.0, "streak": 1.5, "volume": 9.0}) == 1000  # clamped
    assert score_of({"pass_rate": -1.0, "latency": -1.0, "streak": 0.0, "volume": 0.0}) == 0


@pytest.mark.parametrize(
    ("total", "lifecycle"),
    [
        (0, "new"),
        (1, "calibrating"),
        (49, "calibrating"),
        (50, "active"),
        (499, "active"),
        (500, "mature"),
        (501, "mature"),
        (10**9, "mature"),
    ],
)
def test_lifecycle_boundaries(total: int, lifecycle: str) -> None:
    assert lifecycle_of(total, CFG) == lifecycle
    window = run("P" * min(total, 500)) if total else []
    rep = reputation(window, total, agent_id="a")
    assert rep.lifecycle == lifecycle and rep.eval_count == total
    assert (rep.window_size, rep.window_entries) == (500, min(total, 500))
    if lifecycle in ("new", "calibrating"):
        assert rep.score is None and rep.components == {}
        assert rep.calibration == (f"{total}/50" if total else None)
        assert rep.to_json()["score"] is None
    else:
        assert isinstance(rep.score, int) and rep.calibration is None
        assert "calibration" not in rep.to_json()


def test_calibration_withheld_even_for_a_perfect_record() -> None:
    rep = reputation(run("P" * 49, 1.0), 49)
    assert rep.score is None and rep.calibration == "49/50" and rep.to_json()["calibration"] == "49/50"
    assert reputation(run("P" * 10), 10, ReputationConfig(calibration=5)).lifecycle == "active"


def test_agent_id_and_mixed_windows() -> None:
    assert reputation([], 0, agent_id="x").agent_id == "x"
    with pytest.raises(ValueError, match="agent_id is required"):
        reputation([], 0)
    with pytest.raises(ValueError, match="other than"):
        reputation([ev(agent="a"), ev(agent="b")], 2)
    # A count below the window length (impossible from a store) is raised to it.
    assert reputation(run("P" * 60), 3).eval_count == 60


@pytest.mark.parametrize(
    "kwargs",
    [
        {"window": 0},
        {"calibration": 0},
        {"calibration": 501},
        {"latency_good_ms": 10000.0, "latency_bad_ms": 1000.0},
        {"latency_good_ms": 5.0, "latency_bad_ms": 5.0},
        {"latency_bad_ms": math.inf},
        {"latency_percentile": 0},
        {"latency_percentile": 101},
        {"streak_target": 0},
    ],
)
def test_config_validation(kwargs: dict[str, float]) -> None:
    problems = ReputationConfig(**kwargs).validate()  # type: ignore[arg-type]
    assert len(problems) == 1
    key = problems[0].split(":")[0]
    assert key in kwargs or key == "calibration", problems
    # Off, only the window is used (by the store), so only it is held against the section.
    disabled = ReputationConfig(enabled=False, **kwargs).validate()  # type: ignore[arg-type]
    assert disabled == (problems if key == "window" else [])


@pytest.mark.parametrize(
    ("agent", "latency", "at"), [("", 1.0, 0.0), ("a", -1.0, 0.0), ("a", math.nan, 0.0), ("a", 1.0, math.inf)]
)
def test_evaluation_validation(agent: str, latency: float, at: float) -> None:
    with pytest.raises(ValueError):
        Evaluation(agent, True, latency, at)


def test_evaluation_normalises_types() -> None:
    e = Evaluation("a", 1, 5, 7)  # type: ignore[arg-type]
    assert e.passed is True and isinstance(e.latency_ms, float) and isinstance(e.at, float)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.booleans(), st.floats(0, 1e6)), min_size=1, max_size=600),
    st.integers(0, 10_000),
)
def test_score_and_components_are_bounded(items: list[tuple[bool, float]], extra: int) -> None:
    window = [ev(p, lat, float(i)) for i, (p, lat) in enumerate(items)]
    rep = reputation(window, len(window) + extra)
    if rep.score is None:
        assert rep.lifecycle == "calibrating"
    else:
        assert 0 <= rep.score <= 1000
        assert all(0.0 <= v <= 1.0 for v in rep.components.values())
        assert rep.score == score_of(rep.components)


def test_the_mean_latency_does_not_depend_on_the_window_order() -> None:
    """Replicas sharing a store read a window in different orders: the score must match to the bit."""
    latencies = [0.1 * n + 1e-9 * (n % 7) for n in range(1, 500)] + [1e6, 3.3, 7.7]
    forward = [ev(True, lat, float(i)) for i, lat in enumerate(latencies)]
    backward = list(reversed(forward))
    assert components(forward, CFG)["latency"] == components(backward, CFG)["latency"]


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.booleans(), st.floats(0, 20_000)), max_size=40),
    st.sampled_from(["mean", "percentile"]),
)
def test_a_followed_window_scores_as_the_whole_window(
    items: list[tuple[bool, float]], aggregate: str
) -> None:
    config = ReputationConfig(window=12, calibration=3, streak_target=4, latency_aggregate=aggregate)  # type: ignore[arg-type]
    evaluations = [ev(passed, latency, float(i)) for i, (passed, latency) in enumerate(items)]
    followed = AgentWindow("a", config.window)
    for number, evaluation in enumerate(evaluations, 1):
        assert followed.append(number, evaluation)
        assert followed.total == number
        assert followed.reputation(config) == reputation(evaluations[:number], number, config, agent_id="a")


def test_a_followed_window_refuses_a_number_that_skips_and_takes_what_it_missed() -> None:
    config = ReputationConfig(window=4, calibration=1)
    followed = AgentWindow("a", config.window)
    assert followed.append(1, ev(True, 100.0))
    assert not followed.append(3, ev(False, 300.0))  # number 2 was recorded elsewhere
    assert not followed.append(1, ev(False, 300.0))  # and an old number is no next one
    assert followed.total == 1
    # What the store gives for "numbered above 1" once its count is 6: the newest 4 of 2..6 (trimmed).
    newer = [ev(False, 300.0), ev(True, 400.0), ev(True, 500.0), ev(True, 600.0)]
    followed.extend(newer, 6)
    assert followed.total == 6
    assert followed.reputation(config) == reputation(newer, 6, config, agent_id="a")
    assert followed.append(7, ev(True, 700.0))
    with pytest.raises(ValueError):
        followed.extend([ev(), ev()], 8)  # two entries cannot be numbered 8..8
    with pytest.raises(ValueError):
        followed.extend([], 5)  # the count never goes back
    with pytest.raises(ValueError):
        AgentWindow("a", 0)
