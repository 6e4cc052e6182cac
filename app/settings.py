"""One typed settings object, read from the environment (prefix ``SWITCHYARD_``).

Every knob of the system lives here so that a deployment is configured by environment alone
(Procfile, compose file, CI). Secrets are ``SecretStr``: they never appear in ``repr``, logs or
the web view.
"""

from __future__ import annotations

import ssl
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from app.topics import TopicNames

PolicyName = Literal[
    "switchyard", "round_robin", "random", "pow2", "jsq", "static", "dmda", "oracle"
]
SecurityProtocol = Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]
SaslMechanism = Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
LogLevel = Literal["debug", "info", "warning", "error"]


class Settings(BaseSettings):
    """Switchyard's configuration. Field ``foo_bar`` is read from ``SWITCHYARD_FOO_BAR``."""

    model_config = SettingsConfigDict(env_prefix="SWITCHYARD_", extra="ignore", frozen=True)

    # --- Kafka -------------------------------------------------------------------------------
    broker: str = Field(
        default="127.0.0.1:9092",
        description="Kafka bootstrap servers, comma separated (host:port).",
    )
    security_protocol: SecurityProtocol = "PLAINTEXT"
    sasl_mechanism: SaslMechanism = "PLAIN"
    sasl_username: str | None = None
    sasl_password: SecretStr | None = None
    ssl_cafile: Path | None = None
    ssl_certfile: Path | None = None
    ssl_keyfile: Path | None = None
    ssl_password: SecretStr | None = None

    # --- The Faust worker ----------------------------------------------------------------------
    app_id: str = Field(default="switchyard", description="Faust app id (consumer group prefix).")
    topic_namespace: str = Field(
        default="", description="Prefix of every topic name (Settings.topic_names); empty "
        "gives the contract's names.",
    )
    store: str = Field(default="rocksdb://", description="Table store: rocksdb:// or memory://.")
    data_dir: Path = Field(default=Path("data"), description="Worker state (RocksDB tables).")
    # Static group membership (KIP-345): a worker restarted after a crash takes its partitions
    # back at once instead of waiting for the dead member's session to time out (most of the
    # 17-21 s from kill -9 to the next result; tests/reliability/test_worker_crash.py). The id
    # must be stable across restarts of one worker and differ between workers: by default it
    # is derived from the host and the worker's data dir (worker_instance_id() below).
    static_membership: bool = True
    worker_instance: str | None = Field(
        default=None, description="The worker's group.instance.id (default: host + data dir).")
    web_port: int = Field(default=6066, ge=1, le=65535)
    web_bind: str = Field(default="127.0.0.1", description="Bind address of the web view.")
    web_debug_routes: bool = Field(
        default=False, description="Expose Faust's raw /table/ and debug pages (off: read-only API)."
    )
    log_level: LogLevel = "info"
    # Partition counts of the contract topics. Workload-keyed topics (workloads, outcomes,
    # results) must share one count: the completion table's changelog *is* the results topic.
    workload_partitions: int = Field(default=4, ge=1, le=256)
    metric_partitions: int = Field(default=4, ge=1, le=256)
    route_partitions: int = Field(default=4, ge=1, le=256)

    # --- Routing -------------------------------------------------------------------------------
    policy: PolicyName = "switchyard"
    static_class: str | None = Field(
        default=None, description="Device class used by the `static` policy (None: the first seen)."
    )
    seed: int = Field(default=0, description="Seed of the deciders' random generator.")
    oracle_profile: Path | None = Field(
        default=None, description="True costs for the `oracle` policy (benchmarks only)."
    )
    # A device is dead after missing this long of heartbeats: three periods tolerate one lost
    # heartbeat and a GC pause without flapping.
    heartbeat_interval_s: float = Field(default=1.0, gt=0)
    device_timeout_s: float = Field(default=5.0, gt=0)
    # In-flight work whose class has no live device for this long is routed again.
    reroute_check_s: float = Field(default=1.0, gt=0)

    # Informative probes (agents/probe.py, models/probing.py): a class idle for
    # ``idle_probe_after_s`` is handed one execution of a recently seen shape in the variant its
    # cost model is least sure of, at most every ``idle_probe_interval_s``; only when predicted
    # (with setup) within ``idle_probe_max_ms`` and when the model's weight std of ln(ms) is at
    # least ``idle_probe_min_std``. Off by default: probes spend device time nobody asked for.
    idle_probing: bool = Field(
        default=False, description="Send informative probe executions to idle classes.")
    idle_probe_after_s: float = Field(default=2.0, gt=0)
    idle_probe_interval_s: float = Field(default=1.0, gt=0)
    idle_probe_max_ms: float = Field(default=50.0, gt=0)
    idle_probe_min_std: float = Field(default=0.05, ge=0)

    # Per-workload cost of an executor outside the measured execution (fetching the route,
    # publishing metric and outcome, committing): about 5-10 ms on the 2-core development VM.
    # Counted in each class's expected wait, so small ops do not all pile onto one class.
    dispatch_overhead_ms: float = Field(default=8.0, ge=0)

    # The worker's producer (routes, table changelogs): how long a send waits for others to
    # join its request, and the most bytes per partition batch. Every request costs the worker
    # and the broker CPU; a linger trades that wait for fewer requests (2 ms against 0 made no
    # difference that stood out of the noise in a 5,000-workload burst on the 2-core VM).
    producer_linger_ms: float = Field(default=0.0, ge=0)
    producer_max_batch_bytes: int = Field(default=16384, ge=1024)

    # --- Executors -----------------------------------------------------------------------------
    # torch.compile on the CPU builds C++ per shape (~27 s cold on a 2-core machine): refused
    # unless asked for, so a first request does not stall an executor for half a minute.
    torch_compile_cpu: bool = False
    # How long an executor's producer waits for the broker's answer before it retries (and
    # before a batch expires). aiokafka's default; its producer is idempotent, so a retry of a
    # request the broker did append is dropped by the broker, never appended twice.
    executor_request_timeout_s: float = Field(default=40.0, gt=0)
    # Routes an executor fetches at once. They run one after another (the device runs one op at
    # a time); their outcomes travel while the next op runs, and one commit covers the batch.
    executor_fetch_records: int = Field(default=64, ge=1)
    # An executor publishes the metrics of what it ran as one record (the metrics topic's batch
    # form, docs/contract.md) of up to this many rows, flushed once its first row is this old,
    # and always before the routes it covers are committed. A record per execution made the
    # worker's per-event cost the metric path's (BENCHMARKS.md, pipeline). 1: one row a record.
    executor_metric_batch_rows: int = Field(default=128, ge=1)
    executor_metric_linger_ms: float = Field(default=20.0, ge=0)
    # Outcomes too travel in batches (the outcomes topic's batch form, docs/contract.md): the
    # outcomes of one workload partition finished back to back go as one record of up to this
    # many, published when the routes in hand are all run, when the first of them is
    # executor_outcome_linger_ms old (an op still running), or at the row limit. An executor
    # with nothing else in hand publishes an outcome at once. 1: one outcome a record.
    executor_outcome_batch_rows: int = Field(default=64, ge=1)
    executor_outcome_linger_ms: float = Field(default=2.0, ge=0)
    # Dynamic batching: among the fetched routes not yet run, those of one op spec (shapes and
    # dtype included) and variant run as one batched call (runtimes/work.py) of at most
    # executor_max_batch workloads, where the runtime batches them (Runtime.batchable).
    executor_batching: bool = True
    executor_max_batch: int = Field(default=32, ge=1)
    # How long an executor holding fewer than executor_fetch_records routes waits for more
    # before it runs them. 0: it batches only what is already queued, so a workload at low
    # load is never held back for a batch (BENCHMARKS.md, batching).
    executor_batch_wait_ms: float = Field(default=0.0, ge=0)
    # A CPU executor measures its matmul rate per precision, one reference op of each other
    # kind and its per-call cost before it serves (0.4-5 s in all on one core here,
    # runtimes/calibrate.py) and its heartbeats carry them: the class's cold cost-model prior
    # runs at those rates, each kind's roofline bent by its reference op, with the measured
    # per-call overhead, instead of a generic CPU's. false: the generic CPU.
    executor_calibrate: bool = True
    # A remote class (models/transfer.py): the link the executor sits behind — round trip and
    # bandwidth, both or neither — and its price per device-hour (any currency; used by the
    # cost objective). Heartbeats carry them. Behind a link the executor really waits each
    # workload's transfer time (flagged link_simulated) and does not batch.
    executor_link_rtt_ms: float | None = Field(default=None, ge=0)
    executor_link_bandwidth_mbit_s: float | None = Field(default=None, gt=0)
    executor_price_per_hour: float | None = Field(default=None, ge=0)
    # A catalog device (models/devices.py) whose published idle and peak power model the
    # energy of executions no counter measures (flagged energy_simulated); sim runtimes
    # always use their own device.
    executor_power_model: str | None = None

    # --- Windows -------------------------------------------------------------------------------
    tumbling_window_s: float = Field(default=10.0, gt=0)
    hopping_window_s: float = Field(default=60.0, gt=0)
    hopping_step_s: float = Field(default=10.0, gt=0)
    window_expires_s: float = Field(default=300.0, gt=0)
    # RocksDB memory per table partition. The store's defaults (a 2 GiB block cache and three
    # 64 MiB write buffers per partition, for a dozen tables x partitions) let a worker's
    # resident memory climb for as long as it runs (test_soak's long form: +146 MiB in 10 min).
    rocksdb_write_buffer_mib: int = Field(default=4, ge=1)
    rocksdb_block_cache_mib: int = Field(default=8, ge=1)

    # Python's cyclic garbage collector: a young-generation collection every this many
    # allocations (CPython's default is 700). A worker holds a large, long-lived heap (Faust,
    # tables' caches) that the default's frequent full collections walked again and again:
    # half of the metric path's JSON decoding time (docs/architecture.md). 0 keeps Python's.
    gc_gen0_threshold: int = Field(default=50_000, ge=0)

    # --- Metric path batching (per-event table writes are the cost; see docs/architecture.md) ---
    metric_batch_size: int = Field(default=500, ge=1)
    metric_batch_within_s: float = Field(default=0.25, gt=0)

    # Workloads are decided in batches (their routes are not awaited: agents/decide.py). A
    # batch is handed over as soon as its first workload is in, with whatever was already
    # queued behind it (app/faust_patches.py::take_batches); ``*_within_s`` > 0 also waits that
    # long for it to fill (latency at low load traded for larger batches).
    decide_batch_size: int = Field(default=200, ge=1)
    decide_batch_within_s: float = Field(default=0.0, ge=0)
    # Outcomes are completed in batches too (one table read of the offset ledger per batch).
    complete_batch_size: int = Field(default=200, ge=1)
    complete_batch_within_s: float = Field(default=0.0, ge=0)

    # --- Input limits ----------------------------------------------------------------------------
    max_elements: int = Field(default=2**28, ge=1, description="Inputs + output elements of one op.")
    max_inline_elements: int = Field(default=2**20, ge=1)
    max_message_bytes: int = Field(default=8 * 1024 * 1024, ge=1024)
    max_json_depth: int = Field(default=32, ge=2)

    @field_validator("broker")
    @classmethod
    def _broker_has_port(cls, value: str) -> str:
        """``host:port`` servers, comma separated; Faust's URL form is accepted too
        (``kafka://host:port;host:port``, as Faust users write it) and normalised."""
        servers = []
        for server in value.replace(";", ",").split(","):
            server = server.strip()
            if server.startswith("kafka://"):
                server = server[len("kafka://"):]
            host, sep, port = server.rpartition(":")
            if not sep or not host or not port.isdigit() or "/" in server:
                raise ValueError(f"broker {server!r} is not host:port (or kafka://host:port)")
            servers.append(server)
        return ",".join(servers)

    @model_validator(mode="after")
    def _security_is_complete(self) -> Settings:
        # Caught here, at start-up, with the variable's name: otherwise aiokafka refuses a
        # missing SASL username with a bare ValueError, and Faust sends an empty one and is
        # refused by the broker. Settings a protocol does not use are not checked.
        if self.security_protocol.startswith("SASL"):
            missing = [f"SWITCHYARD_SASL_{name.upper()}" for name, value in
                       (("username", self.sasl_username), ("password", self.sasl_password))
                       if not value]
            if missing:
                raise ValueError(f"{self.security_protocol} needs {' and '.join(missing)}")
        if (self.security_protocol.endswith("SSL") and self.ssl_keyfile
                and not self.ssl_certfile):
            raise ValueError("SWITCHYARD_SSL_KEYFILE is set without SWITCHYARD_SSL_CERTFILE")
        if (self.executor_link_rtt_ms is None) != (self.executor_link_bandwidth_mbit_s is None):
            raise ValueError("a link needs both SWITCHYARD_EXECUTOR_LINK_RTT_MS and "
                             "SWITCHYARD_EXECUTOR_LINK_BANDWIDTH_MBIT_S")
        return self

    @property
    def topic_names(self) -> TopicNames:
        """The contract's topic names under this deployment's ``topic_namespace``."""
        return TopicNames(self.topic_namespace)

    @property
    def broker_url(self) -> str:
        """The broker in Faust's URL form (``kafka://host:port;host:port``)."""
        return "kafka://" + ";".join(s.strip() for s in self.broker.split(","))

    def ssl_context(self) -> ssl.SSLContext | None:
        """An SSL context for SSL/SASL_SSL, built from the configured files."""
        if self.security_protocol not in ("SSL", "SASL_SSL"):
            return None
        context = ssl.create_default_context(
            cafile=str(self.ssl_cafile) if self.ssl_cafile else None
        )
        if self.ssl_certfile:
            context.load_cert_chain(
                str(self.ssl_certfile),
                str(self.ssl_keyfile) if self.ssl_keyfile else None,
                # Never None: with None, OpenSSL prompts for the passphrase of an encrypted
                # key on the terminal, which stalls a worker started from one (and fails
                # with a bare "Invalid argument" without one). "" fails with an SSLError.
                self.ssl_password.get_secret_value() if self.ssl_password else "",
            )
        return context

    def worker_instance_id(self) -> str | None:
        """The worker's static group-membership id, or None when static membership is off."""
        if not self.static_membership:
            return None
        if self.worker_instance:
            return self.worker_instance
        import hashlib
        import socket

        where = f"{socket.gethostname()}:{self.data_dir.expanduser().resolve()}"
        return f"{self.app_id}-{socket.gethostname()}-{hashlib.sha1(where.encode()).hexdigest()[:10]}"

    def kafka_client_kwargs(self) -> dict[str, Any]:
        """Security keyword arguments for aiokafka producers, consumers and admin clients."""
        kwargs: dict[str, Any] = {"security_protocol": self.security_protocol}
        if self.security_protocol.startswith("SASL"):
            kwargs["sasl_mechanism"] = self.sasl_mechanism
            kwargs["sasl_plain_username"] = self.sasl_username
            kwargs["sasl_plain_password"] = (
                self.sasl_password.get_secret_value() if self.sasl_password else None
            )
        context = self.ssl_context()
        if context is not None:
            kwargs["ssl_context"] = context
        return kwargs

    def public_view(self) -> dict[str, Any]:
        """Settings as shown to operators: secrets masked, paths as text."""
        shown = self.model_dump(mode="json")
        for name in ("sasl_password", "ssl_password"):
            if shown.get(name) is not None:
                shown[name] = "**********"
        return shown


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The process-wide settings, read once from the environment."""
    return Settings()
