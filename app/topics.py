"""Topic names and partitioning of the contract, declared in one place.

Names are fixed by the contract (docs/contract.md). Device-keyed topics (metrics, heartbeats)
are *partitioned by device class* while keyed by device id: every record of one class lands in
one partition, so the window and learn stages own a class's state without a repartition hop.
"""

from __future__ import annotations

import os
import re
import zlib

# An optional namespace put before every name (empty by default, so the names are exactly the
# contract's). It lets several independent deployments — or test sessions — share one cluster.
NAMESPACE = os.environ.get("SWITCHYARD_TOPIC_NAMESPACE", "")

WORKLOADS = f"{NAMESPACE}switchyard.workloads"
ROUTES_PREFIX = f"{NAMESPACE}switchyard.routes."
METRICS = f"{NAMESPACE}switchyard.metrics"
HEARTBEATS = f"{NAMESPACE}switchyard.heartbeats"
RESULTS = f"{NAMESPACE}switchyard.results"
DEADLETTER = f"{NAMESPACE}switchyard.deadletter"
# Internal: executors' raw outcomes, keyed by workload id. The worker turns the first outcome of
# each workload into its one record on switchyard.results and drops later duplicates.
OUTCOMES = f"{NAMESPACE}switchyard.outcomes"
# Internal: requests to route a workload again after its device class died.
REROUTES = f"{NAMESPACE}switchyard.reroutes"

_CLASS_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,99}$")


def is_device_class(name: str) -> bool:
    """Whether ``name`` is a topic-safe device class (``<runtime>-<device kind>-<model>``)."""
    return bool(_CLASS_RE.match(name)) and name.count("-") >= 1


def route_topic(device_class: str) -> str:
    """The route topic of one device class."""
    if not is_device_class(device_class):
        raise ValueError(f"device class {device_class!r} is not topic-safe")
    return ROUTES_PREFIX + device_class


def class_partition(device_class: str, partitions: int) -> int:
    """The partition every metric and heartbeat of ``device_class`` goes to.

    CRC32 rather than ``hash()``: Python salts string hashes per process, and producers in
    different processes must agree.
    """
    return zlib.crc32(device_class.encode()) % partitions
