"""The account pages: sign-up, and Django's password-reset views with the shop's
templates and the queued mail."""

from django.contrib.auth import login
from django.contrib.auth import views as auth_views
from django.shortcuts import redirect, render
from django.urls import reverse_lazy
from django.utils.http import url_has_allowed_host_and_scheme

from .forms import QueuedPasswordResetForm, SignupForm
from .throttles import signup_throttle


@signup_throttle
def signup(request):
    form = SignupForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        user = form.save()
        # Several auth backends (django-axes first): name the one that knows the new user.
        # The login keeps the page's language for the shopper's mails (accounts.signals).
        login(request, user, backend="django.contrib.auth.backends.ModelBackend")
        next_url = request.GET.get("next", "")
        safe = url_has_allowed_host_and_scheme(next_url, allowed_hosts={request.get_host()})
        return redirect(next_url if safe else "home")
    return render(request, "registration/signup.html", {"form": form})


password_reset = auth_views.PasswordResetView.as_view(
    form_class=QueuedPasswordResetForm,
    email_template_name="emails/password_reset.txt",
    subject_template_name="emails/password_reset_subject.txt",
    success_url=reverse_lazy("password_reset_done"),
)
