"""Informative probes: which execution an idle class should run to teach its cost model most.

With the operator's consent (``Settings.idle_probing``, off by default: a probe spends device
time and energy nobody asked for), a class that has been idle for a while is handed one
execution of a shape recently seen in the traffic, in the variant its model is least sure of
(agents/probe.py sends it; the executor publishes its metric and no outcome). This is
nn-Meter's adaptive sampling (MobiSys 2021) done online: measure where the model is
uncertain, not where the traffic happens to go, so that the options the router never picks
are measured too.

An option's informativeness is the standard deviation of ln(ms) due to the model's weights
(``Prediction.param_var``): what more measurements of it shrink (the measurement noise is not
shrunk by measuring again). An option the class has never run ranks before every option it
has run, whatever their scores: on replayed CPU measurements (``switchyard bench costmodel``,
the sampling table), 200 rows per class chosen that way were more accurate on unseen shapes
than 200 drawn as the traffic draws them. Options whose predicted time (with its expected
setup, e.g. a first compilation) exceeds a ceiling are never probed: an idle class must stay
ready for real work.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from models.costmodel import CostModelLike
from models.decision import PriorModels
from models.ops import Variant
from models.workload import Workload

# Request fields a probe does not copy from the workload it imitates: its inputs are
# generated from the seed, nothing is returned, and no deadline or budget applies.
NOT_COPIED = ("id", "inputs", "return_output", "deadline_ms", "max_cost", "submitted_at_ms")
PROBE_REASON = "probe"


@dataclass(frozen=True)
class ProbeOption:
    """One execution an idle class could run: a recent workload's shape in one variant."""

    workload: Workload
    device_class: str
    variant: Variant
    setup_ms: float = 0.0  # expected build/compile and warm-up where the shape is cold there
    setup_runs: float = 0.0  # predicted executions to add to it (``Candidate.setup_runs``)
    seen: bool = False  # the class has (probably) run this shape and variant already
    # The class's measured matmul rates (``Candidate.calibration``): its cold prior's.
    calibration: tuple[tuple[str, float], ...] = ()


@dataclass(frozen=True)
class Probe:
    """The chosen option and what the model predicts for it."""

    option: ProbeOption
    predicted_ms: float
    predicted_std_ms: float
    weight_std: float  # std of ln(ms) due to the model's weights: the informativeness
    model_version: int


def informative_order(scores: Sequence[float], seen: Sequence[bool]) -> list[int]:
    """Indices of options, most informative first: never-run options before run ones, each
    group by descending score (ties keep their order)."""
    return sorted(range(len(scores)), key=lambda i: (bool(seen[i]), -float(scores[i])))


def weight_std(param_var: float) -> float:
    """The std of ln(ms) due to the weights, from a prediction's ``param_var``."""
    return math.sqrt(max(float(param_var), 0.0))


def pick_probe(options: Iterable[ProbeOption], models: Mapping[str, CostModelLike],
               priors: PriorModels, max_ms: float, min_weight_std: float) -> Probe | None:
    """The most informative option (``informative_order``) whose predicted time plus setup is
    within ``max_ms`` and whose weight std is at least ``min_weight_std``; None when no option
    qualifies (the model is sure enough everywhere, or everything unsure is too long)."""
    qualified: list[Probe] = []
    for option in options:
        model, learned = priors.get(models, option.device_class, option.calibration)
        prediction = model.predict_one(option.workload.op, option.variant)
        std = weight_std(prediction.param_var)
        setup = option.setup_ms + option.setup_runs * prediction.mean_ms
        if prediction.mean_ms + setup <= max_ms and std >= min_weight_std:
            qualified.append(Probe(option, float(prediction.mean_ms), float(prediction.std_ms),
                                   std, int(model.version) if learned else 0))
    if not qualified:
        return None
    order = informative_order([p.weight_std for p in qualified],
                              [p.option.seen for p in qualified])
    return qualified[order[0]]


def probe_request(template: Workload, probe_id: str) -> dict[str, Any]:
    """The request a probe carries in its route: the template workload's op, precisions and
    seed under the probe's own id (inputs generated from the seed, nothing returned)."""
    request = {k: v for k, v in template.raw.items() if k not in NOT_COPIED}
    request["id"] = probe_id
    return request


class RecentShapes:
    """The last ``capacity`` distinct shapes routed (op and accepted precisions), newest last:
    what probes imitate, so that they measure shapes the traffic actually has."""

    def __init__(self, capacity: int = 64) -> None:
        self.capacity = int(capacity)
        self._shapes: OrderedDict[tuple[str, tuple[str, ...]], Workload] = OrderedDict()

    @staticmethod
    def key(workload: Workload) -> tuple[str, tuple[str, ...]]:
        return (workload.op.signature(), tuple(workload.precisions))

    def add(self, workload: Workload) -> None:
        key = self.key(workload)
        self._shapes[key] = workload
        self._shapes.move_to_end(key)
        while len(self._shapes) > self.capacity:
            self._shapes.popitem(last=False)

    def workloads(self) -> list[Workload]:
        return list(self._shapes.values())

    def __len__(self) -> int:
        return len(self._shapes)
