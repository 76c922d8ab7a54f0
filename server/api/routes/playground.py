"""GET / and /playground/{file}: the browser playground, static files shipped in the package.

The page is public (it holds no secret: the API key is typed into it and kept in the
browser), so the middleware lets these paths through without a key; every API call the page
makes carries the key like any other client. The Content-Security-Policy allows this origin
only, so the page can reach nothing else. ``--no-playground`` turns it off: then these paths
answer 404 in the OpenAI error envelope.
"""
from __future__ import annotations

from importlib import resources

from fastapi import APIRouter, Request
from fastapi.responses import Response

from server.errors import APIError

__all__ = ["router", "PAGE_PATHS", "SECURITY_HEADERS"]

router = APIRouter()

_JS = "text/javascript; charset=utf-8"
#: file name -> media type; nothing else under /playground/ is served. app.js is loaded as an ES
#: module and imports the other modules by relative path (plain files: no build step).
_FILES = {"index.html": "text/html; charset=utf-8", "style.css": "text/css; charset=utf-8",
          "app.js": _JS, "api.js": _JS, "chat.js": _JS, "dom.js": _JS, "examples.js": _JS, "report.js": _JS,
          "sse.js": _JS, "validator.js": _JS}
#: The paths the page consists of (the middleware serves them without an API key).
PAGE_PATHS = ("/",) + tuple(f"/playground/{name}" for name in _FILES if name != "index.html")
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
                               "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'none'; "
                               "frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


def _serve(request: Request, name: str) -> Response:
    if not request.app.state.gs.settings.playground:
        raise APIError(f"Not found: {request.url.path} (the playground is turned off on this server: it runs "
                       "with --no-playground).", code="not_found")
    if name not in _FILES:
        raise APIError(f"Not found: {request.url.path}.", code="not_found")
    body = resources.files("server.api").joinpath("playground", name).read_bytes()
    return Response(body, media_type=_FILES[name], headers=SECURITY_HEADERS)


@router.get("/", include_in_schema=False)
@router.head("/", include_in_schema=False)
async def page(request: Request) -> Response:
    return _serve(request, "index.html")


@router.get("/playground/{name}", include_in_schema=False)
@router.head("/playground/{name}", include_in_schema=False)
async def static_file(name: str, request: Request) -> Response:
    return _serve(request, name)
