"""Topic names and partitioning of the contract, declared in one place.

Names are fixed by the contract (docs/contract.md). Device-keyed topics (metrics, heartbeats)
are *partitioned by device class* while keyed by device id: every record of one class lands in
one partition, so the window and learn stages own a class's state without a repartition hop.
"""

from __future__ import annotations

import re
import zlib
from dataclasses import dataclass

from aiokafka.partitioner import murmur2


@dataclass(frozen=True)
class TopicNames:
    """The contract's topic names under one namespace (``Settings.topic_namespace``; empty:
    exactly the contract's names). The one place a topic name is built: every process takes
    its names from its settings (``Settings.topic_names``), none from the environment at
    import, so several deployments — or test sessions — share one cluster side by side."""

    namespace: str = ""

    def _name(self, base: str) -> str:
        return f"{self.namespace}switchyard.{base}"

    @property
    def workloads(self) -> str:
        return self._name("workloads")

    @property
    def results(self) -> str:
        return self._name("results")

    @property
    def outcomes(self) -> str:
        """Internal: executors' raw outcomes, keyed by workload id. The worker turns the first
        outcome of each workload into its one record on the results topic and drops later
        duplicates."""
        return self._name("outcomes")

    @property
    def reroutes(self) -> str:
        """Internal: requests to route a workload again after its device class died."""
        return self._name("reroutes")

    @property
    def metrics(self) -> str:
        return self._name("metrics")

    @property
    def heartbeats(self) -> str:
        return self._name("heartbeats")

    @property
    def deadletter(self) -> str:
        return self._name("deadletter")

    def route(self, device_class: str) -> str:
        """The route topic of one device class."""
        if not is_device_class(device_class):
            raise ValueError(f"device class {device_class!r} is not topic-safe")
        return self._name(f"routes.{device_class}")

    def executor_group(self, device_class: str) -> str:
        """The consumer group of one device class's executors."""
        return f"{self.namespace}switchyard-executor.{device_class}"


_CLASS_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,99}$")


def is_device_class(name: str) -> bool:
    """Whether ``name`` is a topic-safe device class (``<runtime>-<device kind>-<model>``)."""
    return bool(_CLASS_RE.match(name)) and name.count("-") >= 1


def key_partition(key: str, partitions: int) -> int:
    """The partition Kafka's default partitioner gives a record keyed ``key`` (murmur2, as the
    Java client and aiokafka compute it): where a workload, its outcome and its result go. An
    executor batching outcomes (docs/contract.md) puts each on its workload's partition."""
    return (murmur2(key.encode()) & 0x7FFFFFFF) % partitions


def class_partition(device_class: str, partitions: int) -> int:
    """The partition every metric and heartbeat of ``device_class`` goes to.

    CRC32 rather than ``hash()``: Python salts string hashes per process, and producers in
    different processes must agree.
    """
    return zlib.crc32(device_class.encode()) % partitions
