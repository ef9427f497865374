"""Agent reputation over its last evaluations (SPEC §7). Pure: no I/O, no clock.

    score = round(pass_rate × 400 + latency × 250 + streak × 200 + volume × 150), an int 0–1000

over the window (the agent's newest ``window`` evaluations, oldest first). Each component is in [0, 1]:

- ``pass_rate``: passed evaluations / evaluations in the window.
- ``latency``:   ``clamp(1 - (l_ms - good_ms) / (bad_ms - good_ms))`` where ``l_ms`` is the mean of
  the window's latencies (the reference's "normalised inverse of average latency"), or with
  ``latency_aggregate: percentile`` their ``latency_percentile`` (default 95, nearest rank: more
  than one slow turn in twenty moves it; one alone does not): 1 at or below ``good_ms`` (default
  1 000 ms), 0 at or above ``bad_ms`` (default 10 000 ms), linear between.
- ``streak``:    consecutive passes at the newest end of the window / ``streak_target`` (default
  20), capped at 1; a failure resets it to 0.
- ``volume``:    evaluations in the window / ``window`` (default 500), capped at 1.

Rounding is half-up (``floor(x + 0.5)``), so the score does not depend on banker's rounding.

Lifecycle, by the agent's total number of evaluations ever recorded (not the window size):
``new`` (0), ``calibrating`` (1 to ``calibration - 1``, default 1–49: score and components
withheld, ``calibration`` is ``"N/50"``), ``active`` (``calibration`` to ``window - 1``, 50–499),
``mature`` (``window`` and more, 500+: the oldest evaluation leaves the window as a new one arrives).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

Lifecycle = Literal["new", "calibrating", "active", "mature"]

WEIGHTS = {"pass_rate": 400, "latency": 250, "streak": 200, "volume": 150}
MAX_SCORE = sum(WEIGHTS.values())  # 1000


@dataclass(frozen=True, slots=True)
class Evaluation:
    """One evaluated conversation turn or session of an agent. ``at`` is a Unix time in seconds."""

    agent_id: str
    passed: bool
    latency_ms: float
    at: float
    # Names this evaluation to a store that may be asked to record it twice (a retry after an
    # answer lost on the way: the Redis store records a key once); empty: not named.
    key: str = field(default="", compare=False, repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.agent_id, str) or not self.agent_id:
            raise ValueError("agent_id must be a non-empty string")
        if not math.isfinite(self.latency_ms) or self.latency_ms < 0:
            raise ValueError(f"latency_ms must be a finite number >= 0, not {self.latency_ms!r}")
        if not math.isfinite(self.at):
            raise ValueError(f"at must be a finite Unix time, not {self.at!r}")
        object.__setattr__(self, "passed", bool(self.passed))
        object.__setattr__(self, "latency_ms", float(self.latency_ms))
        object.__setattr__(self, "at", float(self.at))


@dataclass(slots=True)
class ReputationConfig:
    """The ``reputation`` section of the configuration, and the parameters of the score above."""

    enabled: bool = True
    window: int = 500
    calibration: int = 50
    latency_good_ms: float = 1000.0
    latency_bad_ms: float = 10000.0
    latency_percentile: float = 95.0
    # "mean" (the reference's average latency) or "percentile" (latency_percentile of the window).
    latency_aggregate: Literal["mean", "percentile"] = "mean"
    streak_target: int = 20
    # Evaluations waiting to be written to the store; beyond, new ones are dropped and counted.
    max_pending: int = 10_000

    def validate(self) -> list[str]:
        """Every problem, as ``"key: what is wrong"``. Only ``window`` matters when reputation is
        off (the store keeps that many evaluations per agent), so only it is checked then."""
        problems = []
        if self.window < 1:
            problems.append(f"window: must be at least 1, got {self.window}")
        if not self.enabled:
            return problems
        if self.calibration < 1 or 1 <= self.window < self.calibration:
            problems.append(
                f"calibration: must be between 1 and window ({self.window}), got {self.calibration}"
            )
        if not math.isfinite(self.latency_bad_ms) or not 0 <= self.latency_good_ms < self.latency_bad_ms:
            problems.append(
                "latency_bad_ms: must be finite and above latency_good_ms (itself at least 0), got "
                f"latency_good_ms {self.latency_good_ms} and latency_bad_ms {self.latency_bad_ms}"
            )
        if not 0 < self.latency_percentile <= 100:
            problems.append(
                f"latency_percentile: must be above 0 and at most 100, got {self.latency_percentile}"
            )
        if self.streak_target < 1:
            problems.append(f"streak_target: must be at least 1, got {self.streak_target}")
        return problems


@dataclass(frozen=True, slots=True)
class Reputation:
    agent_id: str
    score: int | None
    lifecycle: Lifecycle
    eval_count: int
    window_size: int  # the window the score is computed over (config ``window``)
    window_entries: int  # evaluations in it so far
    calibration: str | None = None
    components: dict[str, float] = field(default_factory=dict)

    def to_json(self) -> dict[str, object]:
        out: dict[str, object] = {
            "agent_id": self.agent_id,
            "score": self.score,
            "lifecycle": self.lifecycle,
            "eval_count": self.eval_count,
            "window_size": self.window_size,
            "window_entries": self.window_entries,
        }
        if self.calibration is not None:
            out["calibration"] = self.calibration
        if self.components:
            out["components"] = dict(self.components)
        return out


def clamp01(x: float) -> float:
    return 0.0 if x <= 0 else 1.0 if x >= 1 else float(x)


def percentile(values: Sequence[float], pct: float) -> float:
    """Nearest-rank percentile: the ceil(pct/100 × n)-th smallest value (n >= 1)."""
    ordered = sorted(values)
    rank = max(1, math.ceil(pct / 100.0 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


def aggregate_latency(latencies: Sequence[float], config: ReputationConfig) -> float:
    if config.latency_aggregate == "percentile":
        return percentile(latencies, config.latency_percentile)
    # fsum is exactly rounded, so the mean does not depend on the order the window was read in:
    # replicas sharing a store compute the same score to the last bit.
    return math.fsum(latencies) / len(latencies)


def latency_score(latency_ms: float, config: ReputationConfig) -> float:
    good, bad = config.latency_good_ms, config.latency_bad_ms
    return clamp01(1.0 - (latency_ms - good) / (bad - good))


def current_streak(window: Sequence[Evaluation]) -> int:
    return _streak([e.passed for e in window])


def _streak(passed: Sequence[bool]) -> int:
    n = 0
    for ok in reversed(passed):
        if not ok:
            break
        n += 1
    return n


def lifecycle_of(total_count: int, config: ReputationConfig) -> Lifecycle:
    if total_count <= 0:
        return "new"
    if total_count < config.calibration:
        return "calibrating"
    if total_count < config.window:
        return "active"
    return "mature"


def components(window: Sequence[Evaluation], config: ReputationConfig) -> dict[str, float]:
    """The four normalised components in [0, 1] (all 0 for an empty window)."""
    return _components([e.passed for e in window], [e.latency_ms for e in window], config)


def _components(
    passed: Sequence[bool], latencies: Sequence[float], config: ReputationConfig
) -> dict[str, float]:
    n = len(passed)
    if n == 0:
        return dict.fromkeys(WEIGHTS, 0.0)
    return {
        "pass_rate": sum(passed) / n,
        "latency": latency_score(aggregate_latency(latencies, config), config),
        "streak": clamp01(_streak(passed) / config.streak_target),
        "volume": clamp01(n / config.window),
    }


def score_of(parts: dict[str, float]) -> int:
    raw = sum(WEIGHTS[name] * clamp01(parts[name]) for name in WEIGHTS)
    return max(0, min(MAX_SCORE, math.floor(raw + 0.5)))


def reputation(
    window: Sequence[Evaluation],
    total_count: int,
    config: ReputationConfig | None = None,
    *,
    agent_id: str | None = None,
) -> Reputation:
    """The reputation of one agent from its window (oldest first) and its total evaluation count.

    Only the newest ``config.window`` entries count if a longer sequence is passed. ``agent_id``
    names the agent when the window is empty (otherwise it is taken from the window).
    """
    config = config or ReputationConfig()
    window = list(window[-config.window :]) if window else []
    if agent_id is None:
        if not window:
            raise ValueError("agent_id is required when the window is empty")
        agent_id = window[0].agent_id
    if any(e.agent_id != agent_id for e in window):
        raise ValueError(f"the window holds evaluations of agents other than {agent_id!r}")
    return _reputation(
        agent_id, [e.passed for e in window], [e.latency_ms for e in window], total_count, config
    )


def _reputation(
    agent_id: str,
    passed: Sequence[bool],
    latencies: Sequence[float],
    total_count: int,
    config: ReputationConfig,
) -> Reputation:
    total_count = max(int(total_count), len(passed))
    lifecycle = lifecycle_of(total_count, config)
    if lifecycle in ("new", "calibrating"):
        return Reputation(
            agent_id=agent_id,
            score=None,
            lifecycle=lifecycle,
            eval_count=total_count,
            window_size=config.window,
            window_entries=len(passed),
            calibration=f"{total_count}/{config.calibration}" if lifecycle == "calibrating" else None,
        )
    parts = _components(passed, latencies, config)
    return Reputation(
        agent_id=agent_id,
        score=score_of(parts),
        lifecycle=lifecycle,
        eval_count=total_count,
        window_size=config.window,
        window_entries=len(passed),
        components=parts,
    )


class AgentWindow:
    """An agent's newest evaluations as one process follows them between reads of the shared store.

    The store numbers an agent's evaluations 1, 2, 3… across every replica that writes to it (the
    number is the agent's count once it is recorded). As long as the numbers this process records
    follow each other, no one else wrote and the window is the store's own, with no read;
    :meth:`append` refuses a number that skips (another replica recorded in between) and the
    caller then reads what it missed, the entries numbered above :attr:`total`, and passes them
    to :meth:`extend`. Only what the score uses is kept: pass/fail and latency.
    """

    __slots__ = ("_latencies", "_passed", "agent_id", "total")

    def __init__(self, agent_id: str, size: int) -> None:
        if size < 1:
            raise ValueError("size must be >= 1")
        self.agent_id = agent_id
        self.total = 0  # the number of the newest evaluation kept: the agent's count
        self._passed: deque[bool] = deque(maxlen=size)
        self._latencies: deque[float] = deque(maxlen=size)

    def append(self, number: int, evaluation: Evaluation) -> bool:
        """Keep the evaluation the store numbered ``number``; False, keeping nothing, when that is
        not the next number."""
        if number != self.total + 1:
            return False
        self._passed.append(evaluation.passed)
        self._latencies.append(evaluation.latency_ms)
        self.total = number
        return True

    def extend(self, newer: Sequence[Evaluation], total: int) -> None:
        """Keep the store's entries numbered above :attr:`total` (``newer``, oldest first) now that its
        count is ``total``; ``newer`` may be only the newest of them, as the store trims its window."""
        if total < self.total or len(newer) > total - self.total:
            raise ValueError(f"entries {self.total + 1}..{total} cannot be {len(newer)} entries")
        self._passed.extend(e.passed for e in newer)
        self._latencies.extend(e.latency_ms for e in newer)
        self.total = total

    def reputation(self, config: ReputationConfig) -> Reputation:
        """:func:`reputation` of the window (``config.window`` must not exceed its size)."""
        return _reputation(self.agent_id, self._passed, self._latencies, self.total, config)
