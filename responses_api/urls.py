from django.urls import include, path, re_path

from .api import docs, messages_views, passthrough_views, views

urlpatterns = [
    path("responses", views.ResponsesView.as_view()),
    path("responses/compact", views.ResponseCompactView.as_view()),
    path("responses/input_tokens", views.ResponseInputTokensView.as_view()),
    path("responses/<str:response_id>", views.ResponseDetailView.as_view()),
    path("responses/<str:response_id>/cancel", views.ResponseCancelView.as_view()),
    path("responses/<str:response_id>/input_items", views.ResponseInputItemsView.as_view()),
    path("chat/completions", passthrough_views.ChatCompletionsView.as_view()),
    path("embeddings", passthrough_views.EmbeddingsView.as_view()),
    path("messages", messages_views.MessagesView.as_view()),
    path("messages/count_tokens", messages_views.CountTokensView.as_view()),
    path("models", views.ModelsView.as_view()),
    path("models/<path:model>", views.ModelDetailView.as_view()),
    path("", include("responses_api.conversations.urls")),
    path("", include("responses_api.history.urls")),
    path("", include("responses_api.files.urls")),
    path("", include("responses_api.vector_stores.urls")),
    path("openapi.json", docs.OpenApiDocumentView.as_view(), name="openapi"),
    path("docs", docs.DocsPageView.as_view(), name="docs"),
    path("docs/redoc.standalone.js", docs.RedocBundleView.as_view(), name="redoc-js"),
    re_path(r"^.*$", views.not_found),
]
