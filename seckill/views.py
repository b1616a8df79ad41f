"""Server-rendered shopper pages (minimal; the polished cacheable page is issue 3)."""

import json

from django.contrib.auth import login
from django.contrib.auth.forms import UserCreationForm
from django.core.serializers.json import DjangoJSONEncoder
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.cache import never_cache
from django.views.decorators.csrf import ensure_csrf_cookie

from .models import Activity
from .selectors import activity_snapshot, redis_remaining_many
from .services import activity_flag


def activity_list(request):
    activities = list(Activity.objects.select_related("product").order_by("start_at")[:100])
    remaining = redis_remaining_many([a.pk for a in activities])
    rows = [(a, remaining.get(a.pk)) for a in activities]
    return render(request, "seckill/activity_list.html", {"rows": rows})


@ensure_csrf_cookie  # the buy button posts with the CSRF double submit
def activity_page(request, activity_id: int):
    activity = Activity.objects.select_related("product").filter(pk=activity_id).first()
    if activity is None:
        raise Http404("No such activity.")
    return render(request, "seckill/activity_page.html", {"activity": activity})


@never_cache
def flag_js(request, activity_id: int):
    snapshot = activity_snapshot(activity_id)
    if snapshot is None:
        raise Http404("No such activity.")
    flag = activity_flag(activity=snapshot, now=timezone.now())
    body = f"window.seckillFlag = {json.dumps(flag, cls=DjangoJSONEncoder)};\n"
    response = HttpResponse(body, content_type="application/javascript; charset=utf-8")
    response["Cache-Control"] = "no-store, max-age=0"
    return response


def signup(request):
    form = UserCreationForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        user = form.save()
        # Several auth backends (django-axes first): name the one that knows the new user.
        login(request, user, backend="django.contrib.auth.backends.ModelBackend")
        return redirect("home")
    return render(request, "registration/signup.html", {"form": form})
