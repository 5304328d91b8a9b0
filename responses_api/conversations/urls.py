from django.urls import path

from . import views

urlpatterns = [
    path("conversations", views.ConversationsView.as_view()),
    path("conversations/<str:conversation_id>", views.ConversationDetailView.as_view()),
    path("conversations/<str:conversation_id>/items", views.ConversationItemsView.as_view()),
    path("conversations/<str:conversation_id>/items/<str:item_id>", views.ConversationItemView.as_view()),
]
