"""The compose file, Dockerfile and Procfile describe the same processes, configured by env."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import yaml

from tests.conftest import require_tool

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


def test_compose_file_validates_against_the_compose_schema(tmp_path: Path) -> None:
    """``config --quiet`` checks the file against Compose's schema. With Docker's compose
    plugin the file is checked as it is; with Debian's ``docker-compose`` (1.29, what .ci/run
    installs: the plugin is not among Debian's packages) the top-level ``name``, which its
    schema predates, is left out. Neither needs a Docker engine."""
    if shutil.which("docker") and subprocess.run(["docker", "compose", "version"],
                                                 capture_output=True).returncode == 0:
        argv, path = ["docker", "compose"], COMPOSE
    else:
        argv = [require_tool("docker-compose", install="apt-get install -y docker-compose")]
        spec = yaml.safe_load(COMPOSE.read_text())
        assert spec.pop("name") == "switchyard"
        # Beside the original, so relative build contexts and env files resolve the same.
        path = COMPOSE.with_name(f".compose-v1-{tmp_path.name}.yaml")
        path.write_text(yaml.safe_dump(spec, sort_keys=False))
    try:
        proc = subprocess.run([*argv, "-f", str(path), "config", "--quiet"],
                              capture_output=True, text=True, cwd=COMPOSE.parent)
    finally:
        if path != COMPOSE:
            path.unlink()
    assert proc.returncode == 0, proc.stderr or proc.stdout


def test_procfile_names_every_process_type():
    kinds = {line.split(":", 1)[0] for line in (ROOT / "Procfile").read_text().splitlines()
             if line.strip()}
    assert kinds == {"kafka", "worker", "executor-torch", "executor-jax", "executor-numpy"}


def test_dockerfile_installs_the_package_and_runs_the_cli():
    text = (ROOT / "docker" / "Dockerfile").read_text()
    assert "pip install ." in text
    assert 'ENTRYPOINT ["switchyard"]' in text
