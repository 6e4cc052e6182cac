"""True costs for the ``oracle`` policy: an exhaustive pre-profile, or the simulator's model.

The scheduling benchmark profiles every (op, variant) of its trace on every live runtime before
the run and writes ``{"true_ms": {device_class: {"<op signature>|<precision>/<mode>": ms}}}``
(a bare ``{device_class: {...}}`` mapping is read too). `load_true_costs` turns such a file
into the ``true_ms(device_class, op, variant) -> ms`` function `models.baselines.OraclePolicy`
takes. A ``sim-<model>`` class not in the profile costs exactly what the simulator sleeps before
noise and drift: the catalog's roofline. Anything else missing falls back on the class's
roofline prior, so a gap in the profile degrades the bound instead of crashing the decider.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path

from models.baselines import TrueCost
from models.devices import DEVICE_CATALOG, roofline_seconds
from models.ops import OpSpec, Variant
from models.priors import parse_device_class, prior_for_class

__all__ = ["load_true_costs", "profile_key", "true_costs_from", "true_ms_table"]


def profile_key(op: OpSpec, variant: Variant) -> str:
    """The key of one (op, variant) in a profile: ``"<op signature>|<precision>/<mode>"``."""
    return f"{op.signature()}|{variant.precision}/{variant.mode}"


def true_ms_table(data: Mapping[str, object]) -> dict[str, dict[str, float]]:
    """The ``{class: {key: ms}}`` table of a decoded profile; ValueError when malformed."""
    table = data.get("true_ms", data)
    if not isinstance(table, Mapping):
        raise ValueError("an oracle profile is {device_class: {op|variant: ms}}")
    out: dict[str, dict[str, float]] = {}
    for device_class, entries in table.items():
        if not isinstance(entries, Mapping):
            raise ValueError(f"oracle profile entry {device_class!r} is not an object")
        costs: dict[str, float] = {}
        for key, ms in entries.items():
            value = float(ms)
            if not math.isfinite(value) or value < 0:
                raise ValueError(f"oracle cost {device_class}/{key} = {ms!r} is not a time")
            costs[str(key)] = value
        out[str(device_class)] = costs
    return out


def simulated_ms(device_class: str, op: OpSpec, variant: Variant) -> float | None:
    """The simulator's noise- and drift-free time of a sim class, None when it is not one."""
    runtime, _, model = parse_device_class(device_class)
    spec = DEVICE_CATALOG.get(model) if runtime == "sim" else None
    if spec is None or not spec.supports(variant.precision):
        return None
    return roofline_seconds(spec, op, variant) * 1e3


def true_costs_from(table: Mapping[str, Mapping[str, float]]) -> TrueCost:
    """``true_ms`` over a profile table, with the fallbacks described in the module docstring."""
    frozen = {c: dict(entries) for c, entries in table.items()}

    def true_ms(device_class: str, op: OpSpec, variant: Variant) -> float:
        measured = frozen.get(device_class, {}).get(profile_key(op, variant))
        if measured is not None:
            return measured
        simulated = simulated_ms(device_class, op, variant)
        if simulated is not None:
            return simulated
        return math.exp(prior_for_class(device_class).roofline_log_ms(op, variant))

    return true_ms


def load_true_costs(path: str | Path | None) -> TrueCost:
    """Read a profile file (None: no file, sim roofline and priors only) into ``true_ms``."""
    if path is None:
        return true_costs_from({})
    data = json.loads(Path(path).read_text())
    if not isinstance(data, Mapping):
        raise ValueError(f"{path}: an oracle profile is a JSON object")
    return true_costs_from(true_ms_table(data))
