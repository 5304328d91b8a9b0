from django.urls import include, path, re_path

from . import passthrough_views, views

urlpatterns = [
    path("responses", views.responses),
    path("responses/compact", views.response_compact),
    path("responses/input_tokens", views.response_input_tokens),
    path("responses/<str:response_id>", views.response_detail),
    path("responses/<str:response_id>/cancel", views.response_cancel),
    path("responses/<str:response_id>/input_items", views.response_input_items),
    path("chat/completions", passthrough_views.chat_completions_endpoint),
    path("embeddings", passthrough_views.embeddings_endpoint),
    path("models", views.models),
    path("models/<path:model>", views.model_detail),
    path("", include("responses_api.conversations.urls")),
    path("", include("responses_api.history.urls")),
    re_path(r"^.*$", views.not_found),
]
