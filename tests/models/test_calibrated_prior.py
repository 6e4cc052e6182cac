"""A CPU class's cold prior from the matmul rates its executors measured (pure logic:
models/priors.py, models/registry.py, models/decision.py)."""

from __future__ import annotations

import dataclasses
import math

import pytest

from models.decision import Candidate, PriorModels
from models.ops import Variant, parse_op
from models.priors import prior_for_class
from models.registry import check_calibration, class_calibration, live_classes

MATMUL = parse_op({"kind": "matmul", "m": 512, "k": 512, "n": 512})
FP32, BF16 = Variant("fp32"), Variant("bf16")


def test_the_generic_cpu_guesses_bf16_at_half_the_fp32_rate() -> None:
    prior = prior_for_class("torch-cpu-x86")
    assert prior.work_log_ms(MATMUL, BF16) > prior.work_log_ms(MATMUL, FP32)
    assert not prior.device.name.endswith("~calibrated")


def test_measured_rates_replace_the_guesses_of_a_live_cpu_class() -> None:
    """torch's bf16 at 2 % of its fp32 rate (no bf16 GEMM on an AVX2 EPYC), JAX's at 175 %:
    the prior ranks the precisions as measured."""
    slow = prior_for_class("torch-cpu-x86", {"fp32": 60.0, "bf16": 1.4})
    fast = prior_for_class("jax-cpu-x86", {"fp32": 38.0, "bf16": 66.0})
    assert slow.device.name.endswith("~calibrated")
    assert slow.device.peak_flops["fp32"] == pytest.approx(60e9)
    assert slow.work_log_ms(MATMUL, BF16) - slow.work_log_ms(MATMUL, FP32) == pytest.approx(
        math.log(60.0 / 1.4))
    assert fast.work_log_ms(MATMUL, BF16) < fast.work_log_ms(MATMUL, FP32)
    # Precisions it did not measure keep the generic CPU's guess.
    assert slow.device.peak_flops["int8"] == prior_for_class("torch-cpu-x86").device.peak_flops[
        "int8"]


@pytest.mark.parametrize("device_class", ["sim-h100", "torch-cuda-h100", "jax-tpu-v5e"])
def test_catalog_priors_ignore_a_calibration(device_class: str) -> None:
    plain = prior_for_class(device_class)
    assert prior_for_class(device_class, {"fp32": 1.0, "bf16": 1.0}) == plain


def test_unusable_rates_are_ignored() -> None:
    plain = prior_for_class("numpy-cpu-x86")
    for bad in ({"fp32": 0.0}, {"fp32": -3.0}, {"fp32": float("nan")}, {"fp32": float("inf")}):
        assert prior_for_class("numpy-cpu-x86", bad) == plain


def test_a_class_takes_the_median_of_its_devices_rates() -> None:
    members = [{"calibration": {"fp32": 10.0, "bf16": 2.0}}, {"calibration": {"fp32": 30.0}},
               {"calibration": {"fp32": 20.0, "bf16": -1.0}}, {"calibration": None}, {}]
    assert class_calibration(members) == (("bf16", 2.0), ("fp32", 20.0))
    assert class_calibration([{}]) == ()
    device = {"device_id": "a", "device_class": "torch-cpu-x86", "last_seen_ms": 1000.0,
              "capabilities": [["matmul", "fp32", "eager"]], "calibration": {"fp32": 50.0}}
    assert live_classes([device], 1000.0, 5.0)["torch-cpu-x86"].calibration == (("fp32", 50.0),)


@pytest.mark.parametrize("bad", [[1.0], {"fp64": 1.0}, {"fp32": 0}, {"fp32": True},
                                 {"fp32": "fast"}, {"fp32": float("nan")}])
def test_a_malformed_calibration_is_refused(bad: object) -> None:
    with pytest.raises(ValueError, match="calibration"):
        check_calibration(bad)
    check_calibration(None)
    check_calibration({"fp32": 59.7, "bf16": 1.4})


def test_a_cold_class_is_predicted_from_its_calibrated_prior() -> None:
    """The decider's prior for a class with no learned model follows the candidate's
    calibration, one prior per distinct calibration."""
    priors = PriorModels()
    calibration = (("bf16", 1.4), ("fp32", 60.0))

    def predicted(variant: Variant, calibrated: tuple[tuple[str, float], ...]) -> float:
        c = Candidate(device_class="torch-cpu-x86", variant=variant, calibration=calibrated)
        return priors.get({}, c.device_class, c.calibration)[0].predict_one(
            MATMUL, variant).mean_ms

    assert predicted(BF16, calibration) > 5 * predicted(FP32, calibration)
    assert predicted(BF16, ()) < 5 * predicted(FP32, ())


SOFTMAX = parse_op({"kind": "softmax", "rows": 4096, "dim": 2048})
LAYERNORM = parse_op({"kind": "layernorm", "rows": 4096, "dim": 2048})


def test_a_measured_reference_kernel_bends_its_kinds_roofline() -> None:
    """The reference op of a kind is predicted at its measured time; other shapes of the kind
    by the same factor on the work; unmeasured kinds keep the roofline."""
    from models.priors import REFERENCE_OPS, kernel_key

    plain = prior_for_class("jax-cpu-x86", {"fp32": 40.0})
    bent = prior_for_class("jax-cpu-x86", {"fp32": 40.0, kernel_key("softmax", "fp32"): 80.0})
    reference = REFERENCE_OPS["softmax"]
    assert math.exp(bent.roofline_log_ms(reference, FP32)) == pytest.approx(80.0, rel=1e-6)
    factor = bent.kind_factor("softmax", "fp32")
    assert factor > 10
    assert bent.work_log_ms(SOFTMAX, FP32) - plain.work_log_ms(SOFTMAX, FP32) == pytest.approx(
        math.log(factor))
    # bf16 not measured: the kind's fp32 factor; layernorm not measured: its roofline.
    assert bent.kind_factor("softmax", "bf16") == factor
    assert bent.work_log_ms(LAYERNORM, FP32) == plain.work_log_ms(LAYERNORM, FP32)


def test_a_kind_measured_in_and_out_of_the_cache_bends_by_size() -> None:
    """softmax measured at its reference op (at the L3's edge) and again at 4096^2 (out of the
    cache), 3x further off the roofline there: each is predicted at its measured time, a size
    between them by a factor between (linear in ln bytes), a larger one by the large factor;
    bf16, measured only in the cache, follows fp32's curve from its own point, and an old
    stored prior (factors without sizes) still reads."""
    from models.priors import OUT_OF_CACHE_OPS, REFERENCE_OPS, PriorDevice, kernel_key

    small, large = REFERENCE_OPS["softmax"], OUT_OF_CACHE_OPS["softmax"]
    one = prior_for_class("torch-cpu-x86", {"fp32": 50.0, kernel_key("softmax", "fp32"): 10.0})
    small_factor = one.kind_factor("softmax", "fp32")
    roofline_large_ms = math.exp(one.roofline_log_ms(large, FP32)) / small_factor
    large_ms = 3.0 * small_factor * roofline_large_ms
    two = prior_for_class("torch-cpu-x86", {
        "fp32": 50.0, kernel_key("softmax", "fp32"): 10.0,
        kernel_key("softmax.large", "fp32"): large_ms, kernel_key("softmax", "bf16"): 20.0})
    assert math.exp(two.roofline_log_ms(small, FP32)) == pytest.approx(10.0, rel=1e-6)
    assert math.exp(two.roofline_log_ms(large, FP32)) == pytest.approx(large_ms, rel=0.01)
    # Between the points, with the last-level cache far above both: linear in ln bytes.
    between = parse_op({"kind": "softmax", "rows": 4096, "dim": 2048})
    roomy = dataclasses.replace(two, cache_bytes=(32e3, 1e6, 1e12))
    factor = roomy.kind_factor("softmax", "fp32", between.bytes_moved("fp32"))
    assert 1.05 * small_factor < factor < 0.95 * 3.0 * small_factor
    # With a 32 MB L3 between them, the change happens from 32 to 64 MB: a 67 MB softmax is
    # at the large factor, a 48 MB one between, the small point at its own.
    l3 = dataclasses.replace(two, cache_bytes=(32e3, 1e6, 32e6))
    assert l3.kind_factor("softmax", "fp32", between.bytes_moved("fp32")) == pytest.approx(
        3.0 * small_factor, rel=0.01)
    assert (1.05 * small_factor < l3.kind_factor("softmax", "fp32", 48e6)
            < 0.95 * 3.0 * small_factor)
    assert l3.kind_factor("softmax", "fp32", small.bytes_moved("fp32")) == pytest.approx(
        small_factor)
    # (the measured time less the per-call overhead is the work: within 1 % of 3x)
    assert two.kind_factor("softmax", "fp32", 1e12) == pytest.approx(3.0 * small_factor, rel=0.01)
    assert two.kind_factor("softmax", "fp32", 1.0) == pytest.approx(small_factor)
    # One size measured: that factor at every size.
    assert one.kind_factor("softmax", "fp32", 1e12) == small_factor
    # bf16 in the cache at its own factor, out of it 3x that, as fp32 slows there.
    bf16_small = two.kind_factor("softmax", "bf16", small.bytes_moved("bf16"))
    assert math.exp(two.roofline_log_ms(small, BF16)) == pytest.approx(20.0, rel=1e-6)
    assert two.kind_factor("softmax", "bf16", 1e12) == pytest.approx(
        bf16_small * 3.0 * small_factor / two.kind_factor("softmax", "fp32",
                                                          small.bytes_moved("bf16")), rel=0.01)
    stored = two.to_dict()
    assert PriorDevice.from_dict(stored) == two
    stored["kind_factors"] = [entry[:3] for entry in stored["kind_factors"]][:1]
    assert PriorDevice.from_dict(stored).kind_factor("softmax", "bf16", 1e12) == pytest.approx(
        stored["kind_factors"][0][2])


def test_kernels_rank_the_runtimes_a_rate_cannot() -> None:
    """Two classes with the same matmul rate: the one whose softmax measured 4x slower is
    predicted 4x slower on a softmax of another shape, and the same on a matmul."""
    from models.priors import kernel_key

    fast = prior_for_class("torch-cpu-x86", {"fp32": 50.0, kernel_key("softmax", "fp32"): 20.0})
    slow = prior_for_class("numpy-cpu-x86", {"fp32": 50.0, kernel_key("softmax", "fp32"): 80.0})
    assert slow.work_log_ms(SOFTMAX, FP32) - fast.work_log_ms(SOFTMAX, FP32) == pytest.approx(
        math.log(4.0), rel=0.01)
    assert slow.work_log_ms(MATMUL, FP32) == fast.work_log_ms(MATMUL, FP32)


def test_a_stored_prior_keeps_its_kind_factors() -> None:
    from models.priors import PriorDevice, kernel_key

    prior = prior_for_class("numpy-cpu-x86", {kernel_key("layernorm", "fp32"): 30.0})
    assert prior.kind_factors and PriorDevice.from_dict(prior.to_dict()) == prior
    assert prior.device.name.endswith("~calibrated")


def test_a_timed_activation_costs_what_it_added_to_the_reference_linear() -> None:
    """The reference linear is timed plain and with gelu: the linear kind's factor comes from
    the plain one (NumPy's gelu, scipy's erf, once took three times the GEMM and made every
    linear look slow), and gelu's cost per element from the difference, added to each linear
    and mlp applying it (between an mlp's layers, not after the last); relu keeps its nominal
    FLOP. A stored prior keeps the cost; bf16 takes fp32's."""
    from models.opspecs import LinearSpec, MlpSpec
    from models.priors import REFERENCE_POINTS, PriorDevice, kernel_key

    plain_ms, gelu_ms = 1.6, 6.4
    prior = prior_for_class("numpy-cpu-x86", {
        "fp32": 80.0, kernel_key("linear", "fp32"): plain_ms,
        kernel_key("linear.gelu", "fp32"): gelu_ms})
    reference = REFERENCE_POINTS["linear.gelu"]
    per_element = (gelu_ms - plain_ms) / 1e3 / (reference.batch * reference.out_features)
    assert prior.activation_s == (("gelu", "fp32", pytest.approx(per_element)),)
    assert [kind for kind, *_ in prior.kind_factors] == ["linear"]  # gelu is no kind factor
    assert math.exp(prior.roofline_log_ms(REFERENCE_POINTS["linear"], FP32)) == pytest.approx(
        plain_ms, rel=1e-6)
    # (within the roofline's nominal FLOP per element, which the plain linear does not do)
    assert math.exp(prior.roofline_log_ms(reference, FP32)) == pytest.approx(gelu_ms, rel=1e-3)
    layer = LinearSpec(batch=16, in_features=1024, out_features=3072)
    with_gelu = dataclasses.replace(layer, activation="gelu")
    added = math.exp(prior.work_log_ms(with_gelu, FP32)) - math.exp(prior.work_log_ms(layer, FP32))
    assert added == pytest.approx(16 * 3072 * per_element * 1e3, rel=1e-3)
    relu = dataclasses.replace(layer, activation="relu")
    assert prior.work_log_ms(relu, FP32) == pytest.approx(prior.work_log_ms(layer, FP32),
                                                          abs=1e-3)
    mlp = MlpSpec(batch=16, dims=(768, 3072, 768), activation="gelu")
    mlp_relu = dataclasses.replace(mlp, activation="relu")
    assert (math.exp(prior.work_log_ms(mlp, FP32)) - math.exp(prior.work_log_ms(mlp_relu, FP32))
            == pytest.approx(16 * 3072 * per_element * 1e3, rel=1e-3))
    assert prior.activation_cost_s("gelu", "bf16") == prior.activation_cost_s("gelu", "fp32")
    assert PriorDevice.from_dict(prior.to_dict()) == prior
    # Without the plain linear there is nothing to subtract: no cost, and no kind factor.
    alone = prior_for_class("numpy-cpu-x86", {"fp32": 80.0,
                                              kernel_key("linear.gelu", "fp32"): gelu_ms})
    assert alone.activation_s == () and alone.kind_factors == ()


def test_a_class_takes_the_median_of_its_devices_kernels() -> None:
    """Heartbeats' kernel_ms by signature become (kernel_key, median ms); a signature that is
    not a reference op (another version's) and unusable times are ignored."""
    from models.priors import REFERENCE_OPS, kernel_key
    from models.registry import check_kernel_ms

    signature = REFERENCE_OPS["softmax"].signature()
    members = [{"kernel_ms": {signature: {"fp32": 10.0, "bf16": 4.0}}},
               {"kernel_ms": {signature: {"fp32": 30.0}, "softmax:rows=1,dim=1": {"fp32": 1.0}}},
               {"kernel_ms": {signature: {"fp32": 20.0, "bf16": 0.0}}}, {"kernel_ms": None},
               {"calibration": {"fp32": 5.0}}]
    assert class_calibration(members) == (
        ("fp32", 5.0), (kernel_key("softmax", "bf16"), 4.0), (kernel_key("softmax", "fp32"), 20.0))
    check_kernel_ms(None)
    check_kernel_ms({signature: {"fp32": 1.5}})
    for bad in ([1.0], {signature: 3.0}, {signature: {"fp64": 1.0}}, {signature: {"fp32": -1}},
                {"x" * 300: {"fp32": 1.0}}):
        with pytest.raises(ValueError, match="kernel_ms"):
            check_kernel_ms(bad)


def test_the_measured_per_call_cost_replaces_the_runtimes_guess() -> None:
    """An 8^3 matmul's time is the class's per-call overhead (JAX's eager dispatch measured
    ~85 µs here against a guess of 30); other precisions of it and absurd values are not."""
    from models.priors import DISPATCH, DISPATCH_OP, kernel_key

    guess = prior_for_class("jax-cpu-x86").device.launch_overhead_s
    measured = prior_for_class("jax-cpu-x86", {kernel_key(DISPATCH, "fp32"): 0.085})
    assert measured.device.launch_overhead_s == pytest.approx(85e-6)
    assert measured.device.launch_overhead_s != guess
    assert not measured.kind_factors  # dispatch bends no kind
    tiny = math.exp(measured.roofline_log_ms(DISPATCH_OP, FP32))
    assert tiny == pytest.approx(0.085, rel=0.01)
    assert prior_for_class("jax-cpu-x86", {kernel_key(DISPATCH, "bf16"): 0.5}
                           ).device.launch_overhead_s == guess
    assert prior_for_class("jax-cpu-x86", {kernel_key(DISPATCH, "fp32"): 5000.0}
                           ).device.launch_overhead_s == pytest.approx(1e-2)


def test_a_class_takes_the_median_of_its_devices_setup_excess() -> None:
    """Heartbeats' setup_excess_ms by mode become (mode, median ms) on the class; unknown
    modes and unusable values are ignored by the class and refused by the heartbeat check."""
    from models.registry import check_setup_excess, class_setup_excess

    members = [{"setup_excess_ms": {"eager": 200.0, "compiled": 90.0}},
               {"setup_excess_ms": {"eager": 100.0, "turbo": 1.0}},
               {"setup_excess_ms": {"eager": 300.0, "compiled": float("nan")}},
               {"setup_excess_ms": None}, {}]
    assert class_setup_excess(members) == (("compiled", 90.0), ("eager", 200.0))
    check_setup_excess(None)
    check_setup_excess({"eager": 0.0, "compiled": 104})
    for bad in ([1.0], {"turbo": 1.0}, {"eager": -1.0}, {"eager": True},
                {"eager": float("inf")}, {"eager": "3"}):
        with pytest.raises(ValueError, match="setup_excess_ms"):
            check_setup_excess(bad)


def test_a_calibrated_class_keeps_one_kinds_residuals_out_of_another_kind() -> None:
    """A class whose reference kernels were timed starts from the ``calibrated`` prior stds
    (a tighter shared work slope and hinges); a rates-only or generic one from ``live``.
    Learned softmax rows that miss their prior more the larger they are move an unseen
    kind's (conv2d's) prediction less than they would with the live stds."""
    from models import costmodel
    from models.costmodel import PRIOR_STD, CostModel, prior_stds_name
    from models.priors import kernel_key

    kernels = {"fp32": 60.0, kernel_key("softmax", "fp32"): 2.0,
               kernel_key("conv2d", "fp32"): 5.0}
    calibrated = prior_for_class("torch-cpu-x86", kernels)
    assert prior_stds_name(calibrated) == "calibrated"
    assert prior_stds_name(prior_for_class("torch-cpu-x86", {"fp32": 60.0})) == "live"
    assert prior_stds_name(prior_for_class("torch-cpu-x86")) == "live"
    assert prior_stds_name(prior_for_class("sim-h100")) == "sim"
    assert PRIOR_STD["calibrated"]["work"] < PRIOR_STD["live"]["work"]

    conv = parse_op({"kind": "conv2d", "batch": 8, "in_channels": 32, "out_channels": 64,
                     "height": 64, "width": 64, "kernel": 3, "stride": 1, "padding": 1})
    rows = []
    for rows_n in (256, 512, 1024, 2048, 4096):
        for cols in (256, 1024, 4096):
            op = parse_op({"kind": "softmax", "rows": rows_n, "dim": cols})
            prior_ms = math.exp(calibrated.roofline_log_ms(op, FP32))
            # 1x the prior at the smallest, ~4x at the largest: a slope the prior lacks.
            rows.append((op, FP32, prior_ms * (rows_n * cols / 65536) ** 0.25, None))

    def moved(stds: dict[str, float]) -> float:
        saved = PRIOR_STD["calibrated"]
        PRIOR_STD["calibrated"] = stds
        try:
            model = CostModel("torch-cpu-x86", calibrated)
            cold = model.predict_one(conv, FP32).log_mean
            model.learn_many(rows * 3)
            return abs(model.predict_one(conv, FP32).log_mean - cold)
        finally:
            PRIOR_STD["calibrated"] = saved

    assert costmodel.PRIOR_STD is PRIOR_STD
    # Deterministic (no noise drawn): 1.43 against 1.87 ln units when written.
    assert moved(PRIOR_STD["calibrated"]) < 0.9 * moved(PRIOR_STD["live"])
