"""The chat page: static files shipped in the package, served with a strict policy."""

from pathlib import Path
from typing import Any

from fastapi import APIRouter, FastAPI
from fastapi.responses import FileResponse, HTMLResponse
from fastapi.staticfiles import StaticFiles
from starlette.responses import Response
from starlette.types import Scope

from backend.settings import Settings

STATIC_DIR = Path(__file__).resolve().parent.parent / "static"

# The page's own files only; it talks to its own origin (the API) and nothing else. Its
# manifest and service worker (an installable page) come from the same origin too.
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; manifest-src 'self'; worker-src 'self'; base-uri 'none'; "
        "form-action 'self'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Permissions-Policy": "camera=(), microphone=(), geolocation=()",
    "Cross-Origin-Opener-Policy": "same-origin",
    # Revalidate every time: a new release's files are never mixed with an old page.
    "Cache-Control": "no-cache",
}


class _PageFiles(StaticFiles):
    async def get_response(self, path: str, scope: Scope) -> Response:
        response = await super().get_response(path, scope)
        response.headers.update(SECURITY_HEADERS)
        return response


def _index(settings: Settings) -> str:
    # The one thing the page must know before it can sign in: whether a name is enough.
    page = (STATIC_DIR / "index.html").read_text(encoding="utf-8")
    state = "on" if settings.dev_sign_in else "off"
    return page.replace('data-dev-sign-in="off"', f'data-dev-sign-in="{state}"', 1)


def install(app: FastAPI, settings: Settings) -> None:
    """Serve the page at `/` and its files under `/static/`."""
    page = _index(settings)
    router = APIRouter(include_in_schema=False)

    @router.get("/")
    async def index() -> Any:
        """The chat page."""
        return HTMLResponse(page, headers=SECURITY_HEADERS)

    # From the root, not /static/: a service worker controls only the paths under its own,
    # and the manifest's scope is the whole page.
    @router.get("/sw.js")
    async def service_worker() -> Any:
        """The page's service worker: pushed reminders as notifications."""
        return FileResponse(
            STATIC_DIR / "sw.js", media_type="text/javascript", headers=SECURITY_HEADERS
        )

    @router.get("/manifest.webmanifest")
    async def manifest() -> Any:
        """The web app manifest: the page installs as an app."""
        return FileResponse(
            STATIC_DIR / "manifest.webmanifest",
            media_type="application/manifest+json",
            headers=SECURITY_HEADERS,
        )

    app.router.routes.extend(router.routes)
    app.mount("/static", _PageFiles(directory=STATIC_DIR), name="static")
