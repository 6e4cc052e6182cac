"""Choosing informative probes for idle classes (models/probing.py)."""

from __future__ import annotations

from models.costmodel import CostModel
from models.decision import PriorModels
from models.ops import OpSpec, Variant, parse_op
from models.probing import (
    ProbeOption,
    RecentShapes,
    informative_order,
    pick_probe,
    probe_request,
)
from models.workload import Workload

CLASS = "torch-cpu-x86"
FP32, BF16 = Variant("fp32"), Variant("bf16")
SMALL = parse_op({"kind": "matmul", "m": 64, "k": 64, "n": 64})
LARGE = parse_op({"kind": "matmul", "m": 4096, "k": 4096, "n": 4096})


def workload(op: OpSpec = SMALL, wid: str = "w", precisions=("fp32", "bf16"), **raw) -> Workload:
    return Workload(id=wid, op=op, precisions=tuple(precisions),
                    raw={"id": wid, "op": op.to_dict(), "precisions": list(precisions), **raw})


def learned_on(variant: Variant, rows: int = 200) -> CostModel:
    """A model that learned ``rows`` executions of SMALL at ``variant`` only."""
    model = CostModel.for_class(CLASS)
    model.learn_many([(SMALL, variant, 0.05, None)] * rows)
    return model


def test_informative_order_puts_never_run_options_first_then_the_most_uncertain() -> None:
    assert informative_order([0.1, 0.9, 0.5, 0.3], [True, True, False, False]) == [2, 3, 1, 0]


def test_the_variant_the_model_never_learned_is_probed() -> None:
    models = {CLASS: learned_on(FP32)}
    options = [ProbeOption(workload(), CLASS, FP32, seen=True),
               ProbeOption(workload(), CLASS, BF16, seen=True)]
    probe = pick_probe(options, models, PriorModels(), max_ms=1000.0, min_weight_std=0.0)
    assert probe is not None and probe.option.variant == BF16
    fp32 = models[CLASS].predict_one(SMALL, FP32).param_var
    bf16 = models[CLASS].predict_one(SMALL, BF16).param_var
    assert bf16 > fp32  # the premise: learning fp32 rows shrank fp32's weight variance most


def test_a_never_run_option_wins_over_a_more_uncertain_run_one() -> None:
    models = {CLASS: learned_on(FP32)}
    options = [ProbeOption(workload(), CLASS, BF16, seen=True),
               ProbeOption(workload(), CLASS, FP32, seen=False)]
    probe = pick_probe(options, models, PriorModels(), max_ms=1000.0, min_weight_std=0.0)
    assert probe is not None and probe.option.variant == FP32


def test_options_predicted_past_the_ceiling_with_their_setup_are_not_probed() -> None:
    priors = PriorModels()
    long_ms = priors.get({}, CLASS)[0].predict_one(LARGE, FP32).mean_ms
    short_ms = priors.get({}, CLASS)[0].predict_one(SMALL, FP32).mean_ms
    assert short_ms < 10.0 < long_ms
    big = ProbeOption(workload(LARGE), CLASS, FP32)
    assert pick_probe([big], {}, priors, max_ms=10.0, min_weight_std=0.0) is None
    small_with_compile = ProbeOption(workload(), CLASS, FP32, setup_ms=50.0)
    assert pick_probe([small_with_compile], {}, priors, max_ms=10.0, min_weight_std=0.0) is None
    probe = pick_probe([big, ProbeOption(workload(), CLASS, FP32)], {}, priors, max_ms=10.0,
                       min_weight_std=0.0)
    assert probe is not None and probe.option.workload.op == SMALL
    assert probe.model_version == 0  # the prior's prediction: no learned model yet


def test_nothing_is_probed_where_the_model_is_already_sure() -> None:
    models = {CLASS: learned_on(FP32, rows=2000)}
    option = ProbeOption(workload(precisions=("fp32",)), CLASS, FP32, seen=True)
    std = pick_probe([option], models, PriorModels(), 1000.0, 0.0).weight_std
    assert pick_probe([option], models, PriorModels(), 1000.0, min_weight_std=std * 1.01) is None
    # A cold class (its prior only) is far less sure of the same option.
    cold = pick_probe([option], {}, PriorModels(), 1000.0, 0.0)
    assert cold is not None and cold.weight_std > 3 * std


def test_a_probe_request_copies_the_shape_but_not_the_inputs_the_deadline_or_the_id() -> None:
    template = workload(wid="client-7", inputs={"a": [[1.0]]}, return_output=True,
                        deadline_ms=5.0, max_cost=0.1, seed=11)
    request = probe_request(template, "probe-1")
    assert request == {"id": "probe-1", "op": SMALL.to_dict(), "precisions": ["fp32", "bf16"],
                       "seed": 11}


def test_recent_shapes_keep_each_distinct_shape_once_newest_last_and_bounded() -> None:
    shapes = RecentShapes(capacity=2)
    shapes.add(workload(SMALL, "a"))
    shapes.add(workload(LARGE, "b"))
    shapes.add(workload(SMALL, "c"))  # the same shape again: moved to the end, not added
    assert [w.id for w in shapes.workloads()] == ["b", "c"]
    shapes.add(workload(SMALL, "d", precisions=("fp32",)))  # other precisions: another shape
    assert [w.id for w in shapes.workloads()] == ["c", "d"]
    assert len(shapes) == 2
