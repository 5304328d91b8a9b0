from django.apps import AppConfig


class ToolRegistryConfig(AppConfig):
    name = "tool_registry"
    verbose_name = "Tool registry"
    default_auto_field = "django.db.models.BigAutoField"
