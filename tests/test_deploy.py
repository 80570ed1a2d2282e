"""The reference deployment under deploy/, read as an operator's tools would read it.

Every Kubernetes manifest is validated against the API's schema of one Kubernetes version
(kubernetes-validate, offline), and the manifests and the compose file are checked for what
makes them work: each variable they set is one the service reads, secrets are referenced,
never written, the probes ask the right questions, the termination grace outlasts the
drain, the pieces select one another, and the connections fit PostgreSQL. No container
runs here (no Docker engine, no cluster).
"""

import re
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import kubernetes_validate
import pytest
import yaml
from pydantic import SecretStr

from backend.cli import REQUESTS_AFTER_DRAIN_S
from backend.settings import Settings

DEPLOY = Path(__file__).resolve().parent.parent / "deploy"
MANIFESTS = sorted((DEPLOY / "kubernetes").glob("*.yaml"))
KUBERNETES_VERSION = "1.33"
# What the service reads from the environment: each setting's name, or its alias.
SETTINGS = {(field.alias or name).upper() for name, field in Settings.model_fields.items()}
# What must come from a Secret: the secret settings, and the database URLs (a password).
SECRETS = {
    (field.alias or name).upper()
    for name, field in Settings.model_fields.items()
    if SecretStr in getattr(field.annotation, "__args__", (field.annotation,))
} | {"DATABASE_URL", "DATABASE_DIRECT_URL"}


def _documents(path: Path) -> list[dict[str, Any]]:
    return [document for document in yaml.safe_load_all(path.read_text()) if document]


def _kubernetes() -> dict[str, dict[str, Any]]:
    """The manifests' objects by kind (one of each here)."""
    objects = [document for path in MANIFESTS for document in _documents(path)]
    by_kind = {document["kind"]: document for document in objects}
    assert len(by_kind) == len(objects)
    return by_kind


def _compose() -> dict[str, Any]:
    compose: dict[str, Any] = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    return compose


def _replicas(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The services that run `todo-agent serve` (the image's command)."""
    return {
        name: service
        for name, service in compose["services"].items()
        if service.get("image", "").startswith("todo-agent") and "command" not in service
    }


def _interpolated(value: str) -> str:
    """A compose value with its ${VARIABLE} references filled in, as `docker compose` would."""
    return re.sub(r"\$\{[^}]*\}", "secret", value)


def _container(pod_owner: dict[str, Any]) -> dict[str, Any]:
    containers: list[dict[str, Any]] = pod_owner["spec"]["template"]["spec"]["containers"]
    [container] = containers
    return container


@pytest.mark.parametrize("path", MANIFESTS, ids=lambda path: path.name)
def test_every_manifest_is_valid_for_the_kubernetes_api(path: Path) -> None:
    for document in _documents(path):
        kubernetes_validate.validate(document, KUBERNETES_VERSION, strict=True)


def test_the_manifests_hold_every_piece_of_the_deployment() -> None:
    assert set(_kubernetes()) == {
        "ConfigMap",
        "Deployment",
        "Service",
        "PodDisruptionBudget",
        "HorizontalPodAutoscaler",
        "Job",
    }


def test_every_variable_the_deployments_set_is_one_the_service_reads() -> None:
    kubernetes = _kubernetes()
    set_there = set(kubernetes["ConfigMap"]["data"])
    for owner in (kubernetes["Deployment"], kubernetes["Job"]):
        set_there |= {variable["name"] for variable in _container(owner).get("env", [])}
    compose = _compose()
    for name in [*_replicas(compose), "migrate"]:
        set_there |= set(compose["services"][name]["environment"])
    assert set_there - SETTINGS == set()


def test_secrets_are_referenced_never_written() -> None:
    kubernetes = _kubernetes()
    assert SECRETS & set(kubernetes["ConfigMap"]["data"]) == set()
    for owner in (kubernetes["Deployment"], kubernetes["Job"]):
        container = _container(owner)
        for variable in container["env"]:
            if variable["name"] in SECRETS:
                assert "value" not in variable
                assert variable["valueFrom"]["secretKeyRef"]["key"] == variable["name"]
        assert [source["configMapRef"]["name"] for source in container.get("envFrom", [])] in (
            [],
            ["todo-agent"],
        )
    compose = _compose()
    for name in [*_replicas(compose), "migrate"]:
        for variable, value in compose["services"][name]["environment"].items():
            if variable in SECRETS:
                # From deploy/.env or the shell: a reference, or nothing (passed through).
                assert value is None or "${" in value, (name, variable)


def test_the_probes_ask_the_right_questions() -> None:
    container = _container(_kubernetes()["Deployment"])
    assert container["readinessProbe"]["httpGet"]["path"] == "/ready"
    # Liveness never asks the database: an outage would restart every replica.
    assert container["livenessProbe"]["httpGet"]["path"] == "/health"
    assert container["startupProbe"]["httpGet"]["path"] == "/health"
    startup = container["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 60  # migrations first
    assert container["resources"]["requests"].keys() >= {"cpu", "memory"}


def test_the_termination_grace_outlasts_the_drain() -> None:
    kubernetes = _kubernetes()
    grace_s = float(kubernetes["ConfigMap"]["data"]["SHUTDOWN_GRACE_S"])
    pod = kubernetes["Deployment"]["spec"]["template"]["spec"]
    [sleep, seconds] = _container(kubernetes["Deployment"])["lifecycle"]["preStop"]["exec"][
        "command"
    ]
    assert sleep == "sleep"
    drain_s = float(seconds) + grace_s + REQUESTS_AFTER_DRAIN_S
    assert pod["terminationGracePeriodSeconds"] > drain_s

    compose = _compose()
    for name, replica in _replicas(compose).items():
        stop_grace_s = float(replica["stop_grace_period"].removesuffix("s"))
        assert stop_grace_s > float(replica["environment"]["SHUTDOWN_GRACE_S"]) + (
            REQUESTS_AFTER_DRAIN_S
        ), name


def test_the_service_the_budget_and_the_autoscaler_find_the_deployment() -> None:
    kubernetes = _kubernetes()
    deployment = kubernetes["Deployment"]
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    selector = deployment["spec"]["selector"]["matchLabels"]
    assert selector.items() <= labels.items()
    service = kubernetes["Service"]["spec"]
    assert service["selector"].items() <= labels.items()
    ports = {port["name"] for port in _container(deployment)["ports"]}
    assert {port["targetPort"] for port in service["ports"]} <= ports
    budget = kubernetes["PodDisruptionBudget"]["spec"]
    assert budget["selector"]["matchLabels"] == selector
    autoscaler = kubernetes["HorizontalPodAutoscaler"]["spec"]
    assert autoscaler["scaleTargetRef"] == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": deployment["metadata"]["name"],
    }
    # A voluntary disruption always leaves replicas serving.
    assert budget["maxUnavailable"] < autoscaler["minReplicas"]


def test_the_migration_job_migrates_straight_to_postgresql() -> None:
    container = _container(_kubernetes()["Job"])
    assert container["command"] == ["todo-agent", "migrate"]
    assert {variable["name"] for variable in container["env"]} >= {"DATABASE_DIRECT_URL"}
    # It signs nothing: the server's secrets are not asked of it.
    assert {variable["name"] for variable in container["env"]} & {
        "JWT_SECRET",
        "MCP_STATE_SECRET",
    } == set()


def test_compose_runs_several_replicas_through_pgbouncer_after_migrating() -> None:
    compose = _compose()
    services = compose["services"]
    replicas = _replicas(compose)
    assert len(replicas) >= 2
    assert services["migrate"]["command"] == ["todo-agent", "migrate"]
    assert services["pgbouncer"]["environment"]["POOL_MODE"] == "transaction"
    for name, replica in replicas.items():
        assert replica["depends_on"]["migrate"] == {
            "condition": "service_completed_successfully"
        }, name
        environment = replica["environment"]
        assert urlsplit(_interpolated(environment["DATABASE_URL"])).hostname == "pgbouncer"
        assert urlsplit(_interpolated(environment["DATABASE_DIRECT_URL"])).hostname == "postgres"
        assert "/ready" in " ".join(replica["healthcheck"]["test"])
    migrate = services["migrate"]["environment"]
    assert urlsplit(_interpolated(migrate["DATABASE_DIRECT_URL"])).hostname == "postgres"
    for name in ("postgres", "pgbouncer"):
        assert services[name]["healthcheck"]["test"], name

    caddyfile = (DEPLOY / "caddy" / "Caddyfile").read_text()
    proxy = services["caddy"]
    assert "./caddy/Caddyfile:/etc/caddy/Caddyfile:ro" in proxy["volumes"]
    assert set(proxy["depends_on"]) == set(replicas)
    [upstreams] = re.findall(r"reverse_proxy ([^{]+)\{", caddyfile)
    assert upstreams.split() == [f"{name}:8000" for name in replicas]
    assert re.search(r"health_uri /ready\n", caddyfile)


def test_compose_connections_fit_postgresql() -> None:
    """Each replica keeps up to DB_POOL_SIZE connections to PgBouncer, which shares
    DEFAULT_POOL_SIZE of its own to PostgreSQL among them; each also holds one LISTEN
    connection straight to PostgreSQL, and the migration step one more."""
    compose = _compose()
    services = compose["services"]
    replicas = _replicas(compose)
    pooler = services["pgbouncer"]["environment"]
    clients = sum(int(replica["environment"]["DB_POOL_SIZE"]) for replica in replicas.values())
    assert clients <= int(pooler["MAX_CLIENT_CONN"])
    command = services["postgres"]["command"]
    [max_connections] = [
        int(setting.split("=")[1]) for setting in command if setting.startswith("max_connections=")
    ]
    superuser_reserved = 3  # PostgreSQL's default
    direct = len(replicas) + 1
    assert int(pooler["DEFAULT_POOL_SIZE"]) + direct <= max_connections - superuser_reserved


def test_compose_postgresql_has_pgvector_and_the_example_asks_for_meaning() -> None:
    """Search by meaning needs pgvector in the server (the official image has none) and an
    embeddings model; `migrate` creates the extension, as the image's superuser."""
    compose = _compose()
    services = compose["services"]
    assert services["postgres"]["image"].startswith("pgvector/pgvector:pg16")
    superuser = services["postgres"]["environment"]["POSTGRES_USER"]
    migrate = services["migrate"]["environment"]
    assert urlsplit(_interpolated(migrate["DATABASE_DIRECT_URL"])).username == superuser
    for name, replica in _replicas(compose).items():
        assert "EMBEDDINGS_MODEL" in replica["environment"], name
    example = (DEPLOY / "env.example").read_text()
    assert re.findall(r"^EMBEDDINGS_MODEL=\S+$", example, flags=re.MULTILINE)
