"""The compose file, Dockerfile and Procfile describe the same processes, configured by env."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker" / "compose.yaml"


def test_compose_file_has_kafka_worker_and_cpu_executors():
    spec = yaml.safe_load(COMPOSE.read_text())
    services = spec["services"]
    assert services["kafka"]["image"].startswith("apache/kafka:")
    assert services["kafka"]["environment"]["KAFKA_PROCESS_ROLES"] == "broker,controller"
    assert services["worker"]["command"][0] == "worker"
    runtimes = {s["command"][2] for n, s in services.items() if n.startswith("executor-")}
    assert runtimes == {"torch", "jax", "numpy"}
    for name, service in services.items():
        if name == "kafka":
            continue
        env = service["environment"]
        assert env["SWITCHYARD_BROKER"] == "kafka:9092"  # configured by environment only
        assert set(env) <= {k for k in env if k.startswith("SWITCHYARD_")}


def _compose_available() -> bool:
    if shutil.which("docker") is None:
        return False
    return subprocess.run(["docker", "compose", "version"], capture_output=True).returncode == 0


@pytest.mark.skipif(not _compose_available(), reason="the docker client has no compose plugin here")
def test_docker_compose_config_validates():
    proc = subprocess.run(["docker", "compose", "-f", str(COMPOSE), "config", "--quiet"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_procfile_names_every_process_type():
    kinds = {line.split(":", 1)[0] for line in (ROOT / "Procfile").read_text().splitlines()
             if line.strip()}
    assert kinds == {"kafka", "worker", "executor-torch", "executor-jax", "executor-numpy"}


def test_dockerfile_installs_the_package_and_runs_the_cli():
    text = (ROOT / "docker" / "Dockerfile").read_text()
    assert "pip install ." in text
    assert 'ENTRYPOINT ["switchyard"]' in text
