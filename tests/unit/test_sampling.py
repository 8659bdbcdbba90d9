"""The rollout workers' host-side action sampler against the softmax it must follow."""

from __future__ import annotations

import numpy as np
from scipy import stats

from jaxflow.policies import sample_categorical


def test_gumbel_max_frequencies_follow_softmax():
    logits = np.array([[2.0, 0.5, -1.0, 0.0]], np.float32)
    p = np.exp(logits[0].astype(np.float64))
    p /= p.sum()
    rng = np.random.default_rng(0)
    n = 200_000
    actions, _ = sample_categorical(rng, np.repeat(logits, n, axis=0))
    counts = np.bincount(actions, minlength=4)
    # Chi-square goodness of fit at the 0.1% level: a wrong sampler fails with near certainty.
    assert stats.chisquare(counts, n * p).pvalue > 1e-3
    np.testing.assert_allclose(counts / n, p, atol=4e-3)


def test_log_probs_are_log_softmax_of_the_chosen_action():
    rng = np.random.default_rng(1)
    logits = rng.normal(size=(64, 5)).astype(np.float32) * 3
    actions, logp = sample_categorical(rng, logits)
    expected = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    np.testing.assert_allclose(logp, expected[np.arange(64), actions], rtol=1e-5, atol=1e-5)
    assert actions.dtype == np.int32 and logp.dtype == np.float32


def test_same_seed_same_actions():
    logits = np.zeros((16, 3), np.float32)
    a1, _ = sample_categorical(np.random.default_rng(7), logits)
    a2, _ = sample_categorical(np.random.default_rng(7), logits)
    np.testing.assert_array_equal(a1, a2)
