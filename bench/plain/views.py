from django.http import JsonResponse


def ping(request):
    """What the project's bare view answers (config/ping.py): ``{"ok": true}``."""
    return JsonResponse({"ok": True})
