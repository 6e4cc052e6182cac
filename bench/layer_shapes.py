"""Real model-layer shapes as a trace: ``python -m bench.layer_shapes`` writes
``traces/model-layers.jsonl`` (each workload's id names the layer; traces/README.md describes
the set).

Transformer blocks (BERT-base/large, GPT-2 small/medium, a Llama-7B-like block at a quarter of
its width) at 16 and 64 tokens (one sequence; attention also at 256), ResNet-50 bottleneck
convolutions at batch 1 and a CIFAR ResNet-20's at batch 8, and published MLPs (the MNIST
784-512-512-10 MLP, DLRM's bottom and top MLPs, a BERT-base FFN as one MLP). Everything keeps
the published widths except the Llama-like block, and is capped at `MAX_FLOPS` so that one op
takes at most tens of ms on one CPU core (bf16 emulated included): token counts and batch
sizes are what is scaled down, not the layers.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from models.ops import parse_op

# 2.7e8 FLOPs: ~5 ms at the ~50 GFLOP/s one core reaches in fp32 BLAS, tens of ms where bf16
# is emulated: a full-mode benchmark times every layer in every variant in a few minutes.
MAX_FLOPS = 2.7e8
TRACE = Path(__file__).resolve().parent.parent / "traces" / "model-layers.jsonl"

# name: (d_model, heads, ffn width, causal, activation)
TRANSFORMERS: dict[str, tuple[int, int, int, bool, str]] = {
    "bert-base": (768, 12, 3072, False, "gelu"),
    "bert-large": (1024, 16, 4096, False, "gelu"),
    "gpt2-small": (768, 12, 3072, True, "gelu"),
    "gpt2-medium": (1024, 16, 4096, True, "gelu"),
    # Llama-7B: d 4096, 32 heads of 128, FFN 11008 (SwiGLU); at a quarter width with the
    # head size kept: d 1024, 8 heads, FFN 2752, GELU standing in for SwiGLU.
    "llama7b-quarter": (1024, 8, 2752, True, "gelu"),
}
TOKENS = (16, 64)
ATTENTION_SEQ = (64, 256)
# ResNet-50 bottleneck convolutions at a 224x224 input, batch 1:
# (name, in, out, side, kernel)
RESNET50 = (
    ("resnet50.s1.conv1x1a", 64, 64, 56, 1),
    ("resnet50.s1.conv3x3", 64, 64, 56, 3),
    ("resnet50.s1.conv1x1b", 64, 256, 56, 1),
    ("resnet50.s2.conv3x3", 128, 128, 28, 3),
    ("resnet50.s2.conv1x1b", 128, 512, 28, 1),
    ("resnet50.s3.conv1x1a", 1024, 256, 14, 1),
    ("resnet50.s3.conv3x3", 256, 256, 14, 3),
    ("resnet50.s4.conv3x3", 512, 512, 7, 3),
    ("resnet50.s4.conv1x1b", 512, 2048, 7, 1),
)
# CIFAR ResNet-20 3x3 convolutions (He et al. 2016, section 4.2), batch 8.
RESNET20 = (("resnet20.s1", 16, 32), ("resnet20.s2", 32, 16), ("resnet20.s3", 64, 8))
# (name, batch, widths, activation)
MLPS = (
    ("mnist-mlp", 64, [784, 512, 512, 10], "relu"),
    ("dlrm.bottom", 128, [13, 512, 256, 64], "relu"),
    ("dlrm.top", 32, [479, 1024, 1024, 512, 256, 1], "relu"),
    ("bert-base.ffn", 16, [768, 3072, 768], "gelu"),
)


def transformer_ops(name: str, d: int, heads: int, ffn: int, causal: bool,
                    act: str) -> list[tuple[str, dict[str, Any]]]:
    """The ops of one block: QKV and output projections, attention, layernorm, FFN."""
    ops: list[tuple[str, dict[str, Any]]] = []
    for t in TOKENS:
        def linear(i: int, o: int, activation: str = "none", t: int = t) -> dict[str, Any]:
            return {"kind": "linear", "batch": t, "in_features": i, "out_features": o,
                    "bias": True, "activation": activation}

        ops += [
            (f"{name}.t{t}.qkv", linear(d, 3 * d)),
            (f"{name}.t{t}.out", linear(d, d)),
            (f"{name}.t{t}.ffn_up", linear(d, ffn, act)),
            (f"{name}.t{t}.ffn_down", linear(ffn, d)),
            (f"{name}.t{t}.layernorm", {"kind": "layernorm", "rows": t, "dim": d}),
            (f"{name}.t{t}.q_kT", {"kind": "matmul", "m": t, "k": d // heads, "n": t}),
        ]
    for seq in ATTENTION_SEQ:
        ops.append((f"{name}.s{seq}.attention",
                    {"kind": "attention", "batch": 1, "heads": heads, "seq_len": seq,
                     "head_dim": d // heads, "causal": causal}))
        ops.append((f"{name}.s{seq}.scores_softmax",
                    {"kind": "softmax", "rows": heads * seq, "dim": seq}))
    ops.append((f"{name}.heads_bmm", {"kind": "bmm", "b": heads, "m": 64, "k": d // heads,
                                      "n": 64}))
    return ops


def layer_ops() -> list[tuple[str, dict[str, Any]]]:
    """Every (layer name, op) of the set, under `MAX_FLOPS`, without repeated shapes."""
    ops: list[tuple[str, dict[str, Any]]] = []
    for name, (d, heads, ffn, causal, act) in TRANSFORMERS.items():
        ops += transformer_ops(name, d, heads, ffn, causal, act)
    for name, cin, cout, side, kernel in RESNET50:
        ops.append((name, {"kind": "conv2d", "batch": 1, "in_channels": cin,
                           "out_channels": cout, "height": side, "width": side,
                           "kernel": kernel, "stride": 1, "padding": kernel // 2}))
    for name, channels, side in RESNET20:
        ops.append((name, {"kind": "conv2d", "batch": 8, "in_channels": channels,
                           "out_channels": channels, "height": side, "width": side,
                           "kernel": 3, "stride": 1, "padding": 1}))
    for name, batch, dims, act in MLPS:
        ops.append((name, {"kind": "mlp", "batch": batch, "dims": dims, "activation": act}))
    seen: set[str] = set()
    kept = []
    for name, op in ops:
        spec = parse_op({**op, "dtype": "float32"})
        if spec.flops() > MAX_FLOPS or spec.signature() in seen:
            continue
        seen.add(spec.signature())
        kept.append((name, op))
    return kept


def write_trace(path: Path = TRACE) -> int:
    """Write the trace (one fp32/bf16 workload per layer); returns the number of lines."""
    lines = []
    for index, (name, op) in enumerate(layer_ops()):
        lines.append(json.dumps({"id": f"layer-{index:03d}-{name}", "op": {**op,
                                 "dtype": "float32"}, "precisions": ["fp32", "bf16"],
                                 "seed": index}))
    path.write_text("\n".join(lines) + "\n")
    return len(lines)


if __name__ == "__main__":
    print(f"{write_trace()} layers -> {TRACE}")
