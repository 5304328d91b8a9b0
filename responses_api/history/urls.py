"""Routes of the history API (included by responses_api.urls under /v1)."""

from django.urls import path

from . import views

app_name = "history"

urlpatterns = [
    path("responses/<str:response_id>/thread", views.ResponseThreadView.as_view(), name="thread"),
    path("usage", views.UsageView.as_view(), name="usage"),
]
