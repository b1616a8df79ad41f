from django.apps import AppConfig


class RehearsalConfig(AppConfig):
    """Only its management commands: the rehearsal keeps no tables of its own (its data is
    tagged by name, rehearsal.data)."""

    name = "rehearsal"
    verbose_name = "Sale rehearsals"
