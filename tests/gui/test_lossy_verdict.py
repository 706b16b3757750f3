"""The lossy panels' verdict badge: the word is numerics' verdict, the sentence the RMS error it means."""

from __future__ import annotations

import math

from graphlens.gui.lossy_panel import BADGE_STYLES, verdict_badge
from graphlens.numerics.metrics import Verdict


def test_the_badge_says_numerics_verdict_and_the_error_it_means():
    word, style, sentence = verdict_badge(26.0)
    assert word == "FAIR" and style == BADGE_STYLES[Verdict.FAIR]
    assert "26.0 dB" in sentence and "about 5% of their size" in sentence  # 10^(-26/20) = 0.050
    assert verdict_badge(math.inf)[0] == "GOOD" and "exactly" in verdict_badge(math.inf)[2]
    word, _, sentence = verdict_badge(-math.inf)
    assert word == "POOR" and "exactly" not in sentence and "NaN or infinity" in sentence
