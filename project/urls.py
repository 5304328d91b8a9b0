"""URL configuration: a landing page, the /v1 API, health checks and the admin."""

from django.contrib import admin
from django.urls import include, path

from responses_api.api import docs, health

urlpatterns = [
    path("", docs.landing),
    path("v1/", include("responses_api.urls")),
    path("healthz", health.healthz),
    path("readyz", health.readyz),
    path("metrics", health.metrics),
    path("admin/", admin.site.urls),
]
