from django.apps import AppConfig

from .engine import tracing


class ResponsesApiConfig(AppConfig):
    name = "responses_api"
    verbose_name = "Responses API"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        tracing.configure()  # only with OTEL_EXPORTER_OTLP_ENDPOINT set: else nothing is imported
        from .store import files  # noqa: F401 - connects the receiver that deletes a deleted file's bytes
