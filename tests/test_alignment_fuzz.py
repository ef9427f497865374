"""bench/alignment_fuzz.py as a regression test: random conversations recorded in seven styles
(whole histories, the new turn only, a sliding window, parallel results reordered, wrapper spans in
a later trace part, a condense-question step, a chat title) all assemble to the conversation as it
went, with every model call counted once. The full run (600 conversations a style, several seeds)
is the benchmark's; this one is small enough for every CI run."""

from __future__ import annotations

import pytest

from bench.alignment_fuzz import STYLES, run


@pytest.mark.parametrize("seed", [1, 7])
def test_every_recording_style_assembles_the_conversation_as_it_went(seed: int) -> None:
    outcomes = run(seed, conversations=60, styles=STYLES, examples=1)
    wrong = {style: outcome.examples for style, outcome in outcomes.items() if outcome.wrong_any}
    assert not wrong, "\n\n".join(f"{style}:\n{examples[0]}" for style, examples in wrong.items())
    assert all(outcome.conversations == 60 for outcome in outcomes.values())
