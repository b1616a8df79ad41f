from django.http import JsonResponse


def ping(request):
    """What the project's bare view answers (server/ping.py): ``{"ok": true}``."""
    return JsonResponse({"ok": True})
