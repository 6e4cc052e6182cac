"""bench/prior_stds.py: the offline replay of the calibrated classes' prior stds."""

from __future__ import annotations

import json
import math

import pytest

from bench import prior_stds
from bench.common import REPO
from models import costmodel


def test_a_replay_reads_the_priors_output_and_leaves_the_stds_as_they_were(
        monkeypatch: pytest.MonkeyPatch) -> None:
    results = json.loads((REPO / "bench/out/priors.json").read_text())
    monkeypatch.setattr(prior_stds, "DRAWS", 1)
    before = dict(costmodel.PRIOR_STD["calibrated"])
    out = prior_stds.replay(results, {**costmodel.PRIOR_STD["live"], "work": 0.5}, 2.0)
    assert costmodel.PRIOR_STD["calibrated"] == before
    assert set(out) == {"unseen_kind_median", "unseen_kind_p90", "held_out_median",
                        "variant_top1"}
    assert all(math.isfinite(v) and v >= 0 for v in out.values())
    assert out["unseen_kind_p90"] >= out["unseen_kind_median"] and out["variant_top1"] <= 1
