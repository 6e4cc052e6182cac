"""The op catalog: validation, shapes, FLOP/byte formulas and the float64 reference."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from models.ops import (
    OP_KINDS,
    PRECISIONS,
    SpecError,
    Variant,
    make_inputs,
    parse_op,
    reference,
    supports_precision,
)

SMALL = st.integers(min_value=1, max_value=6)


@st.composite
def valid_ops(draw: Any) -> dict[str, Any]:
    """Valid op dicts of every kind, small enough to evaluate."""
    kind = draw(st.sampled_from(OP_KINDS))
    d: dict[str, Any] = {"kind": kind, "dtype": draw(st.sampled_from(["float32", "float64"]))}
    act = st.sampled_from(["none", "relu", "gelu", "tanh", "silu"])
    if kind == "matmul":
        d.update(m=draw(SMALL), k=draw(SMALL), n=draw(SMALL))
    elif kind == "bmm":
        d.update(b=draw(SMALL), m=draw(SMALL), k=draw(SMALL), n=draw(SMALL))
    elif kind == "linear":
        d.update(
            batch=draw(SMALL),
            in_features=draw(SMALL),
            out_features=draw(SMALL),
            bias=draw(st.booleans()),
            activation=draw(act),
        )
    elif kind == "conv2d":
        kernel = draw(st.integers(1, 3))
        padding = draw(st.integers(0, 2))
        low = max(1, kernel - 2 * padding)
        d.update(
            batch=draw(SMALL),
            in_channels=draw(SMALL),
            out_channels=draw(SMALL),
            height=draw(st.integers(low, 7)),
            width=draw(st.integers(low, 7)),
            kernel=kernel,
            stride=draw(st.integers(1, 3)),
            padding=padding,
        )
    elif kind == "attention":
        d.update(
            batch=draw(SMALL),
            heads=draw(SMALL),
            seq_len=draw(SMALL),
            head_dim=draw(SMALL),
            causal=draw(st.booleans()),
        )
    elif kind in ("layernorm", "softmax"):
        d.update(rows=draw(SMALL), dim=draw(SMALL))
    else:
        d.update(
            batch=draw(SMALL),
            dims=draw(st.lists(SMALL, min_size=2, max_size=4)),
            activation=draw(act),
        )
    return d


@settings(max_examples=150, deadline=None)
@given(valid_ops(), st.integers(0, 2**32))
def test_valid_specs_round_trip_and_match_their_shapes(d: dict[str, Any], seed: int) -> None:
    spec = parse_op(d)
    assert parse_op(spec.to_dict()) == spec
    assert spec.signature() == parse_op(spec.to_dict()).signature()
    inputs = make_inputs(spec, seed)
    assert {k: v.shape for k, v in inputs.items()} == spec.input_shapes()
    assert all(v.dtype == np.dtype(spec.dtype) for v in inputs.values())
    out = reference(spec, inputs)
    assert out.shape == spec.output_shape() and out.dtype == np.float64
    assert np.isfinite(out).all()
    assert spec.flops() > 0
    assert spec.bytes_moved("fp16") * 2 == spec.bytes_moved("fp32") == spec.bytes_moved("int8") * 4
    assert spec.arithmetic_intensity("fp32") == pytest.approx(
        spec.flops() / spec.bytes_moved("fp32")
    )


JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=6)
    ),
    max_leaves=20,
)


@settings(max_examples=150, deadline=None)
@given(
    st.one_of(
        JSONISH,
        valid_ops().flatmap(
            lambda d: st.fixed_dictionaries({k: st.just(v) | JSONISH for k, v in d.items()})
        ),
    )
)
def test_anything_either_parses_or_raises_spec_error(obj: object) -> None:
    try:
        spec = parse_op(obj)
    except SpecError as exc:
        assert str(exc)
    else:
        assert spec.elements() <= 2**28


MATMUL = {"kind": "matmul", "m": 4, "k": 5, "n": 6}


@pytest.mark.parametrize(
    ("patch", "message"),
    [
        ({"kind": "conv3d"}, "unknown op kind"),
        ({"kind": None}, "unknown op kind"),
        ({"m": None}, "must be an integer"),
        ({"m": 0}, "must be >= 1"),
        ({"m": -3}, "must be >= 1"),
        ({"m": 2.0}, "must be an integer"),
        ({"m": 2.5}, "must be an integer"),
        ({"m": True}, "must be an integer"),
        ({"m": "4"}, "must be an integer"),
        ({"m": 2**40}, "per-dimension limit"),
        ({"dtype": "int32"}, "unsupported dtype"),
        ({"dtype": ["float32"]}, "unsupported dtype"),
        ({"extra": 1}, "unknown field"),
        ({"m": 2**15, "k": 2**15, "n": 2**15}, "over the limit"),
    ],
)
def test_invalid_matmuls_are_refused_with_a_reason(patch: dict[str, Any], message: str) -> None:
    with pytest.raises(SpecError, match=message):
        parse_op({**MATMUL, **patch})


@pytest.mark.parametrize(
    ("obj", "message"),
    [
        ([], "JSON object"),
        ({"kind": "matmul", "m": 1, "k": 1}, "missing field 'n'"),
        (
            {
                "kind": "linear",
                "batch": 1,
                "in_features": 2,
                "out_features": 2,
                "activation": "swish",
            },
            "unknown activation",
        ),
        (
            {"kind": "linear", "batch": 1, "in_features": 2, "out_features": 2, "bias": 1},
            "true or false",
        ),
        (
            {
                "kind": "attention",
                "batch": 1,
                "heads": 1,
                "seq_len": 2,
                "head_dim": 2,
                "causal": "yes",
            },
            "true or false",
        ),
        (
            {
                "kind": "conv2d",
                "batch": 1,
                "in_channels": 1,
                "out_channels": 1,
                "height": 2,
                "width": 2,
                "kernel": 3,
            },
            "conv2d output would be",
        ),
        (
            {
                "kind": "conv2d",
                "batch": 1,
                "in_channels": 1,
                "out_channels": 1,
                "height": 4,
                "width": 4,
                "kernel": 3,
                "stride": 0,
            },
            "stride must be >= 1",
        ),
        (
            {
                "kind": "conv2d",
                "batch": 1,
                "in_channels": 1,
                "out_channels": 1,
                "height": 4,
                "width": 4,
                "kernel": 3,
                "padding": -1,
            },
            "padding must be >= 0",
        ),
        ({"kind": "mlp", "batch": 1, "dims": [4]}, "2 to 17 entries"),
        ({"kind": "mlp", "batch": 1, "dims": [4] * 18}, "2 to 17 entries"),
        ({"kind": "mlp", "batch": 1, "dims": "4,4"}, "list of integers"),
        ({"kind": "mlp", "batch": 1, "dims": [4, 0]}, r"dims\[1\] must be >= 1"),
    ],
)
def test_invalid_specs_of_other_kinds(obj: object, message: str) -> None:
    with pytest.raises(SpecError, match=message):
        parse_op(obj)


def test_element_cap_counts_inputs_and_output() -> None:
    spec = parse_op({"kind": "matmul", "m": 10, "k": 10, "n": 10})
    assert spec.elements() == 300
    assert parse_op(spec.to_dict(), max_elements=300) == spec
    with pytest.raises(SpecError, match="300 elements"):
        parse_op(spec.to_dict(), max_elements=299)


@pytest.mark.parametrize(
    ("obj", "flops", "elements"),
    [
        ({"kind": "matmul", "m": 2, "k": 3, "n": 4}, 2 * 2 * 3 * 4, 6 + 12 + 8),
        ({"kind": "bmm", "b": 5, "m": 2, "k": 3, "n": 4}, 5 * 48, 5 * 26),
        # GEMM 2*8*16*32 + bias 8*32 + gelu 8*32
        (
            {
                "kind": "linear",
                "batch": 8,
                "in_features": 16,
                "out_features": 32,
                "activation": "gelu",
            },
            8192 + 256 + 256,
            128 + 512 + 32 + 256,
        ),
        (
            {"kind": "linear", "batch": 8, "in_features": 16, "out_features": 32, "bias": False},
            8192,
            128 + 512 + 256,
        ),
        # 3x3 stride 1 pad 1 keeps 8x8: 2 * C*k*k per output * N*O*H*W
        (
            {
                "kind": "conv2d",
                "batch": 2,
                "in_channels": 3,
                "out_channels": 4,
                "height": 8,
                "width": 8,
                "kernel": 3,
                "padding": 1,
            },
            2 * 27 * 2 * 4 * 64,
            2 * 3 * 64 + 4 * 27 + 2 * 4 * 64,
        ),
        (
            {
                "kind": "conv2d",
                "batch": 1,
                "in_channels": 1,
                "out_channels": 1,
                "height": 7,
                "width": 5,
                "kernel": 3,
                "stride": 2,
            },
            2 * 9 * 3 * 2,
            35 + 9 + 6,
        ),
        # b*h*s*s scores, each 4*d (two GEMMs) + 5 (softmax)
        (
            {"kind": "attention", "batch": 2, "heads": 4, "seq_len": 16, "head_dim": 8},
            2 * 4 * 16 * 16 * (4 * 8 + 5),
            4 * 2 * 4 * 16 * 8,
        ),
        ({"kind": "layernorm", "rows": 10, "dim": 20}, 5 * 200, 400),
        ({"kind": "softmax", "rows": 10, "dim": 20}, 5 * 200, 400),
        # layers 4->8->2: GEMMs 2*3*4*8 + 2*3*8*2, relu between (3*8), not after the last
        ({"kind": "mlp", "batch": 3, "dims": [4, 8, 2]}, 192 + 96 + 24, 12 + 32 + 16 + 6),
    ],
)
def test_known_flop_and_byte_counts(obj: dict[str, Any], flops: int, elements: int) -> None:
    spec = parse_op(obj)
    assert spec.flops() == flops
    assert spec.elements() == elements
    assert spec.bytes_moved("fp32") == 4 * elements
    assert spec.bytes_moved("bf16") == 2 * elements


def test_square_matmul_intensity_grows_with_size() -> None:
    small = parse_op({"kind": "matmul", "m": 64, "k": 64, "n": 64})
    large = parse_op({"kind": "matmul", "m": 4096, "k": 4096, "n": 4096})
    # 2n^3 / (3 n^2 * 4 bytes) = n/6
    assert small.arithmetic_intensity("fp32") == pytest.approx(64 / 6)
    assert large.arithmetic_intensity("fp32") == pytest.approx(4096 / 6)


def test_supports_precision_limits_int8_to_gemm_shaped_ops() -> None:
    assert {k for k in OP_KINDS if supports_precision(k, "int8")} == {"linear", "matmul", "mlp"}
    assert all(supports_precision(k, p) for k in OP_KINDS for p in PRECISIONS if p != "int8")
    assert not supports_precision("matmul", "fp64")
    assert not supports_precision("conv3d", "fp32")


def test_variant_round_trip_and_errors() -> None:
    v = Variant("bf16", "compiled")
    assert Variant.from_dict(v.to_dict()) == v
    assert Variant.from_dict({"precision": "fp16"}) == Variant("fp16", "eager")
    for bad in (
        {"precision": "fp64"},
        {"precision": "fp32", "mode": "jit"},
        {"mode": "eager"},
        "fp32",
    ):
        with pytest.raises(SpecError):
            Variant.from_dict(bad)


def test_signatures_are_stable_text_and_distinguish_specs() -> None:
    spec = parse_op(
        {"kind": "attention", "batch": 1, "heads": 2, "seq_len": 3, "head_dim": 4, "causal": True}
    )
    assert (
        spec.signature() == "attention:batch=1,heads=2,seq_len=3,head_dim=4,causal=1,dtype=float32"
    )
    mlp = parse_op({"kind": "mlp", "batch": 2, "dims": [3, 4]})
    assert mlp.signature() == "mlp:batch=2,dims=3x4,activation=relu,dtype=float32"
    assert spec.signature() != parse_op({**spec.to_dict(), "causal": False}).signature()


def test_make_inputs_is_deterministic_per_seed_and_scaled() -> None:
    spec = parse_op({"kind": "linear", "batch": 64, "in_features": 256, "out_features": 64})
    a, b = make_inputs(spec, 1), make_inputs(spec, 1)
    assert all(np.array_equal(a[k], b[k]) for k in a)
    assert not np.array_equal(a["x"], make_inputs(spec, 2)["x"])
    assert a["x"].dtype == np.float32
    # weights ~ N(0, 1/fan_in) keep outputs O(1) whatever the width
    assert 0.5 < float(np.std(reference(spec, a))) < 2.0
    # Inputs do not depend on which other inputs exist: x is the same with or without bias.
    nobias = parse_op({**spec.to_dict(), "bias": False})
    assert np.array_equal(make_inputs(nobias, 1)["x"], a["x"])
    # The stream is pinned: these exact bits come out on every platform and runtime.
    assert a["x"][0, :3].tolist() == [
        -0.016616998240351677,
        -1.1902087926864624,
        0.8245428800582886,
    ]


def test_reference_semantics_by_hand() -> None:
    lin = parse_op(
        {"kind": "linear", "batch": 1, "in_features": 2, "out_features": 2, "activation": "gelu"}
    )
    x = {
        "x": np.array([[1.0, -2.0]]),
        "weight": np.array([[1.0, 0.0], [0.0, 1.0]]),
        "bias": np.array([0.5, 0.0]),
    }
    gelu = [v * 0.5 * (1 + math.erf(v / math.sqrt(2))) for v in (1.5, -2.0)]
    np.testing.assert_allclose(reference(lin, x), [gelu], rtol=1e-12)

    ln = parse_op({"kind": "layernorm", "rows": 3, "dim": 50})
    out = reference(ln, make_inputs(ln, 0))
    np.testing.assert_allclose(out.mean(axis=1), 0, atol=1e-12)
    np.testing.assert_allclose(out.var(axis=1), 1, atol=1e-3)  # eps 1e-5 shrinks var a hair

    sm = parse_op({"kind": "softmax", "rows": 2, "dim": 3})
    big = {"x": np.array([[1000.0, 1000.0, 1000.0], [0.0, 0.0, math.log(2)]])}
    np.testing.assert_allclose(reference(sm, big), [[1 / 3] * 3, [0.25, 0.25, 0.5]])

    att = parse_op(
        {"kind": "attention", "batch": 1, "heads": 1, "seq_len": 4, "head_dim": 2, "causal": True}
    )
    inputs = make_inputs(att, 3)
    out = reference(att, inputs)
    np.testing.assert_allclose(out[0, 0, 0], inputs["v"][0, 0, 0], rtol=1e-6)  # row 0 sees only v0

    conv = parse_op(
        {
            "kind": "conv2d",
            "batch": 1,
            "in_channels": 2,
            "out_channels": 3,
            "height": 5,
            "width": 4,
            "kernel": 3,
            "stride": 2,
            "padding": 1,
        }
    )
    inputs = {k: v.astype(np.float64) for k, v in make_inputs(conv, 5).items()}
    xp = np.pad(inputs["x"], ((0, 0), (0, 0), (1, 1), (1, 1)))
    direct = np.zeros(conv.output_shape())
    for o in range(3):
        for i in range(direct.shape[2]):
            for j in range(direct.shape[3]):
                direct[0, o, i, j] = np.sum(
                    xp[0, :, 2 * i : 2 * i + 3, 2 * j : 2 * j + 3] * inputs["weight"][o]
                )
    np.testing.assert_allclose(reference(conv, inputs), direct, rtol=1e-12)

    mlp = parse_op({"kind": "mlp", "batch": 2, "dims": [3, 4, 2], "activation": "relu"})
    inputs = make_inputs(mlp, 9)
    h = np.maximum(inputs["x"].astype(np.float64) @ inputs["w0"].T, 0) @ inputs["w1"].T
    np.testing.assert_allclose(reference(mlp, inputs), h, rtol=1e-6)  # no act after the last


@pytest.mark.parametrize("case_name", ["matmul", "bmm", "attention", "layernorm", "softmax"])
def test_batched_equivalent_computes_the_stacked_workloads(case_name: str) -> None:
    """The op a batched call is learned as computes exactly the stacked workloads."""
    from models.ops import batched_equivalent, make_inputs, reference
    from tests.runtimes.cases import case

    spec = case(case_name)
    size = 3
    inputs = [make_inputs(spec, seed) for seed in range(size)]
    equivalent = batched_equivalent(spec, size)
    assert equivalent is not None and equivalent.flops() == pytest.approx(size * spec.flops())
    stacked = {name: np.stack([one[name] for one in inputs]) for name in inputs[0]}
    folded = {name: x.reshape(equivalent.input_shapes()[name]) for name, x in stacked.items()}
    expected = np.stack([reference(spec, one) for one in inputs])
    out = reference(equivalent, folded)
    np.testing.assert_allclose(out.reshape(expected.shape), expected, rtol=1e-12)
    assert batched_equivalent(spec, 1) == spec


def test_ops_with_a_weight_per_workload_have_no_batched_equivalent() -> None:
    from models.ops import batched_equivalent
    from tests.runtimes.cases import case

    for name in ("linear-gelu", "mlp-relu", "conv2d-1x1"):
        assert batched_equivalent(case(name), 4) is None


def test_a_repeated_description_is_checked_once_and_kept_apart_by_type_and_limit() -> None:
    """parse_op remembers specs by their exact description (values with their types) and
    limit: the same description gives the same frozen spec; ``true`` is still not ``1``, a
    lower limit still refuses, and a refused description is refused every time."""
    import models.ops as ops

    ops._PARSED.clear()
    first = parse_op({"kind": "matmul", "m": 8, "k": 8, "n": 8})
    assert parse_op({"kind": "matmul", "m": 8, "k": 8, "n": 8}) is first
    assert len(ops._PARSED) == 1
    with pytest.raises(SpecError):
        parse_op({"kind": "matmul", "m": True, "k": 8, "n": 8})
    with pytest.raises(SpecError):
        parse_op({"kind": "matmul", "m": 8.0, "k": 8, "n": 8})
    with pytest.raises(SpecError, match="over the limit"):
        parse_op({"kind": "matmul", "m": 8, "k": 8, "n": 8}, max_elements=10)
    for _ in range(2):
        with pytest.raises(SpecError):
            parse_op({"kind": "matmul", "m": 0, "k": 8, "n": 8})
    with pytest.raises(SpecError):  # an unhashable value is checked (and refused) as before
        parse_op({"kind": "matmul", "m": [8], "k": 8, "n": 8})
    assert len(ops._PARSED) == 1
    for i in range(ops._PARSED_SIZE + 5):
        parse_op({"kind": "matmul", "m": i + 1, "k": 2, "n": 2})
    assert len(ops._PARSED) <= ops._PARSED_SIZE
