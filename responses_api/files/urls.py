from django.urls import path

from . import views

urlpatterns = [
    path("files", views.FilesView.as_view()),
    path("files/<str:file_id>", views.FileDetailView.as_view()),
    path("files/<str:file_id>/content", views.FileContentView.as_view()),
]
