from django.apps import AppConfig


class ResponsesApiConfig(AppConfig):
    name = "responses_api"
    verbose_name = "Responses API"
    default_auto_field = "django.db.models.BigAutoField"
