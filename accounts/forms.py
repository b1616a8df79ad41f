"""The account forms: sign-up with an e-mail address, and Django's password reset with
its mail handed to a Celery task."""

from django import forms
from django.contrib.auth import get_user_model
from django.contrib.auth.forms import PasswordResetForm, UserCreationForm
from django.template import loader
from django.utils.translation import gettext_lazy as _

from .tasks import mail_send_task

EMAIL_TAKEN = _("An account with this e-mail address exists already.")


def email_taken(email: str, *, other_than: int | None = None) -> bool:
    """Whether an active account other than ``other_than`` has ``email``, whatever its case:
    the rule the database holds too (accounts migration 0002)."""
    holders = get_user_model().objects.filter(email__iexact=email, is_active=True)
    return (holders.exclude(pk=other_than) if other_than is not None else holders).exists()


class SignupForm(UserCreationForm):
    """A username, an e-mail address (required, one active account each, whatever its
    case) and the password twice."""

    email = forms.EmailField(label=_("E-mail address"), max_length=254, required=True)

    class Meta(UserCreationForm.Meta):
        model = get_user_model()
        fields = ("username", "email")

    def clean_email(self) -> str:
        email = get_user_model().objects.normalize_email(self.cleaned_data["email"]).strip()
        if email_taken(email):
            raise forms.ValidationError(EMAIL_TAKEN, code="duplicate_email")
        return email


class QueuedPasswordResetForm(PasswordResetForm):
    """Django's password reset; its mail is rendered here (the request's language) and
    sent by a Celery task, so the answer takes as long whether the address is known or not."""

    def send_mail(
        self, subject_template_name, email_template_name, context, from_email, to_email, html_email_template_name=None
    ) -> None:
        subject = " ".join(loader.render_to_string(subject_template_name, context).split())
        body = loader.render_to_string(email_template_name, context)
        mail_send_task.delay(subject, body, to_email)
