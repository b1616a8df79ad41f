"""The account pages: sign-up, Django's password-reset views with the shop's templates
and the queued mail, and the language switch that the shopper's mails follow."""

from django.conf import settings
from django.contrib.auth import login
from django.contrib.auth import views as auth_views
from django.db import IntegrityError, transaction
from django.shortcuts import redirect, render
from django.urls import reverse_lazy
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.i18n import set_language

from .forms import QueuedPasswordResetForm, SignupForm
from .mail import language_remember
from .throttles import signup_throttle


@signup_throttle
def signup(request):
    form = SignupForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            with transaction.atomic():
                user = form.save()
        except IntegrityError:
            # A concurrent sign-up took the address or the name after this form's check:
            # the database refused (accounts migration 0002). Checked again, the form
            # now sees the other account and says so.
            form = SignupForm(request.POST)
            if form.is_valid():
                raise
            return render(request, "registration/signup.html", {"form": form})
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


def language_switch(request):
    """Django's set_language (the switch on every page); a signed-in shopper's choice is
    also the language of their mails from now on, not only from their next login."""
    response = set_language(request)
    chosen = response.cookies.get(settings.LANGUAGE_COOKIE_NAME)
    if chosen is not None and request.user.is_authenticated:
        language_remember(user=request.user, language=chosen.value)
    return response
