"""The window stage's own sweep of expired windows (agents/window.py)."""

from __future__ import annotations

from agents.window import expired_keys


def test_expired_keys_come_back_as_hashable_tuples_whatever_the_store_returns():
    # RocksDB hands keys back JSON-decoded (lists); Faust's expiry bookkeeping hashes them.
    keys = [["sim-h100|matmul", [0.0, 10.0]], ("sim-h100|bmm", (100.0, 110.0)),
            "not-a-window-key", ["short", [1.0]]]
    out = expired_keys(keys, now_s=150.0, expires_s=60.0)
    assert out == [("sim-h100|matmul", (0.0, 10.0))]
    assert all(isinstance(k, tuple) and isinstance(k[1], tuple) for k in out)
    assert len({*out}) == 1  # hashable
    assert expired_keys(keys, now_s=171.0, expires_s=60.0)[1] == ("sim-h100|bmm", (100.0, 110.0))
