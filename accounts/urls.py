"""The account routes: sign-up and the password reset ahead of django.contrib.auth's
own (login, logout and the rest of the reset keep Django's views and names)."""

from django.urls import path

from . import views

urlpatterns = [
    path("signup/", views.signup, name="signup"),
    path("password_reset/", views.password_reset, name="password_reset"),
]
