"""Exact-shape corrections of a cost model: what its regression misses on shapes it has seen.

The regression (models/costmodel.py) generalises over shapes through its features, and on a
shape it has measured many times its error stays the features' error. Replayed on the cost-model
benchmark's real CPU timings (2026-12-04), on the training shapes themselves: median error
13.9 % and top-1 82 % at 1,000 rows per class, where the StarPU history (a mean per shape) was at
3.6 % and 93 %. Real traffic repeats its shapes (a model's layers, a service's batch sizes).

So each class's model also keeps, per (shape, variant) it has measured, a decaying mean of its
residuals: ln(measured ms) − ln(the regression's prediction just after learning the batch), and
adds it to the regression's prediction of that exact (shape, variant), shrunk by
w / (w + ``SHRINK_ROWS``) with w the (decayed) rows behind it; an unseen shape gets the
regression alone. Being relative to the regression, a correction stays right when the whole
class slows down and the regression follows (its drift detector). The mean forgets at ``DECAY``
a row (about ten rows of memory); the ``MAX_KEYS`` most recently measured keys are kept (the
stored model grows by ~31 bytes a key: 4 KB at 128 keys, on ~21 KB). Replayed on the same
timings, the training shapes' median error went 13.9 → 7.6 % and top-1 82 → 89 % at 1,000 rows (17.1 → 13.0 %, 75 → 79 %
at 200); unseen shapes are predicted exactly as before.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Mapping

from models.ops import OpSpec, Variant

DECAY = 0.9
SHRINK_ROWS = 1.0
MAX_KEYS = 128
# The most weight a key reaches (the sum of DECAY^k over an endless run of rows).
MAX_WEIGHT = 1.0 / (1.0 - DECAY)


def local_key(op: OpSpec, variant: Variant) -> str:
    """The exact (shape, variant) a correction belongs to: 12 hex digits of a hash of its
    signature (a third of the signature's bytes in the stored model; 48 bits, so two of 128
    keys collide with a chance of ~1e-11)."""
    text = f"{op.signature()}|{variant.precision}/{variant.mode}"
    return hashlib.blake2b(text.encode(), digest_size=6).hexdigest()


class LocalResiduals:
    """Per exact (shape, variant): (weight of the rows behind it, their mean ln residual)."""

    def __init__(self) -> None:
        self._by_key: OrderedDict[str, tuple[float, float]] = OrderedDict()

    def add(self, key: str, rows: int, mean_residual: float) -> None:
        """Fold in ``rows`` new rows of ``key`` whose mean ln residual is ``mean_residual``."""
        if rows <= 0:
            return
        weight, mean = self._by_key.get(key, (0.0, 0.0))
        kept = weight * DECAY ** rows
        new = (1.0 - DECAY ** rows) / (1.0 - DECAY)
        total = kept + new
        # Rounded as stored (to 0.01 % in ln space): the stored form stays short and a model
        # read back from it predicts exactly what the one that wrote it did.
        self._by_key[key] = (round(min(total, MAX_WEIGHT), 3),
                             round((kept * mean + new * mean_residual) / total, 4))
        self._by_key.move_to_end(key)
        while len(self._by_key) > MAX_KEYS:
            self._by_key.popitem(last=False)

    def get(self, key: str) -> tuple[float, float] | None:
        """(weight, mean ln residual) of ``key``; None for a shape never measured."""
        return self._by_key.get(key)

    def correct(self, key: str, log_mean: float, param_var: float,
                noise_var: float) -> tuple[float, float]:
        """The regression's (ln mean, weight variance) at ``key`` with its correction: the
        residual shrunk by w / (w + SHRINK_ROWS), and the variance moved by as much toward
        that of a mean of w rows (noise / (w + SHRINK_ROWS))."""
        entry = self._by_key.get(key)
        if entry is None:
            return log_mean, param_var
        weight, residual = entry
        share = weight / (weight + SHRINK_ROWS)
        return (log_mean + share * residual,
                (1.0 - share) * param_var + share * noise_var / (weight + SHRINK_ROWS))

    def __len__(self) -> int:
        return len(self._by_key)

    def to_dict(self) -> dict[str, list[float]]:
        return {key: [w, m] for key, (w, m) in self._by_key.items()}

    @classmethod
    def from_dict(cls, data: Mapping[str, list[float]] | None) -> LocalResiduals:
        out = cls()
        for key, (weight, mean) in (data or {}).items():
            out._by_key[str(key)] = (float(weight), float(mean))
        return out
