"""Every kind of cost model by name: the Bayesian one the router uses and its comparators.

Kept apart from ``models.costmodel`` so that the comparators (``models.sgd_model``,
``models.history``), which build on ``models.costmodel``, are imported by this registry only:
no import cycle, no imports hidden inside functions.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from models.costmodel import CostModel, CostModelLike
from models.history import HistoryCostModel
from models.sgd_model import SGDCostModel

__all__ = ["COST_MODEL_KINDS", "cost_model_from_dict", "make_cost_model"]

COST_MODEL_KINDS: tuple[str, ...] = ("blr", "sgd", "history", "powerlaw")


def make_cost_model(kind: str, device_class: str, **options: Any) -> CostModelLike:
    """A cold cost model of ``kind`` ("blr" default, "sgd" comparator, "history"/"powerlaw"
    StarPU-style) for ``device_class``."""
    if kind == "blr":
        return CostModel.for_class(device_class, **options)
    if kind == "sgd":
        return SGDCostModel.for_class(device_class, **options)
    if kind in ("history", "powerlaw"):
        return HistoryCostModel(device_class, mode=kind, **options)
    raise ValueError(f"unknown cost model kind {kind!r}; expected one of {COST_MODEL_KINDS}")


def cost_model_from_dict(data: Mapping[str, Any]) -> CostModelLike:
    """Rebuild any cost model from its `to_dict` output (dispatching on ``data["kind"]``)."""
    kind = data.get("kind")
    if kind == CostModel.KIND:
        return CostModel.from_dict(data)
    if kind == "sgd":
        return SGDCostModel.from_dict(data)
    if kind in ("history", "powerlaw"):
        return HistoryCostModel.from_dict(data)
    raise ValueError(f"unknown cost model kind {kind!r}")
