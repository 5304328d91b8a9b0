"""The OpenAPI document and its reference page, served without any CDN (Redoc from drf-spectacular-sidecar)."""

from __future__ import annotations

import functools
from pathlib import Path

from django.http import HttpRequest, HttpResponse
from django.template.loader import render_to_string

from ..api.exception_handlers import json_response
from .openapi import build_document


@functools.cache
def _document() -> dict:
    # The URLconf does not change while a process runs: build the document once.
    return build_document()


async def openapi_document(request: HttpRequest) -> HttpResponse:
    """The OpenAPI 3.1 document of /v1."""
    return json_response(_document())


async def docs_page(request: HttpRequest) -> HttpResponse:
    """The API reference, rendered by Redoc."""
    return HttpResponse(render_to_string("responses_api/docs.html", request=request))


@functools.cache
def _redoc_bundle() -> bytes:
    import drf_spectacular_sidecar

    path = Path(drf_spectacular_sidecar.__file__).parent / "static/drf_spectacular_sidecar/redoc/bundles"
    bundle = (path / "redoc.standalone.js").read_bytes()
    # Redoc's only outside request is its attribution logo: an empty data URL makes the
    # image fail, and Redoc then drops it (the page must work with no internet at all).
    return bundle.replace(b"https://cdn.redoc.ly/redoc/logo-mini.svg", b"data:,")


async def redoc_js(request: HttpRequest) -> HttpResponse:
    response = HttpResponse(_redoc_bundle(), content_type="application/javascript; charset=utf-8")
    response["Cache-Control"] = "public, max-age=86400"
    return response


# The OpenAPI generator reads these method tables; the bundle is an asset, not an endpoint.
openapi_document.openapi_methods = {"GET": openapi_document}  # type: ignore[attr-defined]
docs_page.openapi_methods = {"GET": docs_page}  # type: ignore[attr-defined]
redoc_js.openapi_methods = {}  # type: ignore[attr-defined]
