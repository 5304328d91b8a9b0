from django.urls import path

from . import views

urlpatterns = [
    path("conversations", views.conversations),
    path("conversations/<str:conversation_id>", views.conversation_detail),
    path("conversations/<str:conversation_id>/items", views.conversation_items),
    path("conversations/<str:conversation_id>/items/<str:item_id>", views.conversation_item),
]
