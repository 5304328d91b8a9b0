"""Routes of the history API and the API documentation (included by responses_api.urls under /v1)."""

from django.urls import path

from ..views import api_endpoint
from . import docs, views

app_name = "history"

urlpatterns = [
    path("responses/<str:response_id>/thread", api_endpoint({"GET": views.response_thread}), name="thread"),
    path("usage", api_endpoint({"GET": views.usage}), name="usage"),
    path("openapi.json", docs.openapi_document, name="openapi"),
    path("docs", docs.docs_page, name="docs"),
    path("docs/redoc.standalone.js", docs.redoc_js, name="redoc-js"),
]
