"""Liveness and readiness probes."""

from fastapi import APIRouter, Response

from backend.deps import Context
from backend.models.health import Health, Readiness
from backend.services.health import serving_readiness

router = APIRouter(tags=["operations"])


@router.get("/health", operation_id="health")
async def health() -> Health:
    """200 while the process runs."""
    return Health(status="ok")


@router.get(
    "/ready",
    operation_id="ready",
    responses={503: {"model": Readiness, "description": "Not ready"}},
)
async def ready(context: Context, response: Response) -> Readiness:
    """200 when the database answers and its migrations are at head, and the process is not
    shutting down; else 503."""
    report = await serving_readiness(context.database, draining=context.draining)
    if report.status != "ready":
        response.status_code = 503
        response.headers["Retry-After"] = "5"
    return report
