"""Routes of the history API and the API documentation (included by responses_api.urls under /v1)."""

from django.urls import path

from . import docs, views

app_name = "history"

urlpatterns = [
    path("responses/<str:response_id>/thread", views.ResponseThreadView.as_view(), name="thread"),
    path("usage", views.UsageView.as_view(), name="usage"),
    path("openapi.json", docs.openapi_document, name="openapi"),
    path("docs", docs.docs_page, name="docs"),
    path("docs/redoc.standalone.js", docs.redoc_js, name="redoc-js"),
]
