"""Django's user admin, with the address rule of sign-up: one active account per e-mail
address, whatever its case (the database's index, accounts migration 0002), said as a
form error rather than a failed save."""

from django import forms
from django.contrib import admin
from django.contrib.auth import get_user_model
from django.contrib.auth.admin import UserAdmin
from django.contrib.auth.forms import UserChangeForm

from .forms import EMAIL_TAKEN, email_taken


class AccountChangeForm(UserChangeForm):
    def clean(self):
        cleaned = super().clean() or {}
        email = cleaned.get("email") or ""
        if email and cleaned.get("is_active") and email_taken(email, other_than=self.instance.pk):
            self.add_error("email", forms.ValidationError(EMAIL_TAKEN, code="duplicate_email"))
        return cleaned


admin.site.unregister(get_user_model())


@admin.register(get_user_model())
class AccountAdmin(UserAdmin):
    form = AccountChangeForm
