"""Prometheus scrape endpoint."""

from fastapi import APIRouter, Response

from backend import metrics

router = APIRouter(tags=["operations"])


@router.get("/metrics", operation_id="metrics", response_class=Response)
async def scrape() -> Response:
    """Prometheus text format."""
    body, content_type = metrics.render()
    return Response(body, media_type=content_type)
