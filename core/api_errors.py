"""Every API error as ``{"code": "<snake_case>", "detail": "<sentence>"}``."""

from django.http import Http404
from rest_framework import exceptions
from rest_framework.response import Response

from core.errors import ApiError, api_error_of

_CODES = {
    exceptions.NotAuthenticated: "not_authenticated",
    exceptions.AuthenticationFailed: "authentication_failed",
    exceptions.PermissionDenied: "permission_denied",
    exceptions.NotFound: "not_found",
    exceptions.MethodNotAllowed: "method_not_allowed",
    exceptions.NotAcceptable: "not_acceptable",
    exceptions.UnsupportedMediaType: "unsupported_media_type",
    exceptions.ParseError: "invalid_request",
    exceptions.ValidationError: "invalid_request",
    exceptions.Throttled: "rate_limited",
}


def error_response(exc: ApiError) -> Response:
    return Response({"code": exc.code, "detail": exc.detail}, status=exc.status, headers=exc.headers())


def exception_handler(exc, context):
    known = api_error_of(exc)
    if known is not None:
        return error_response(known)
    if isinstance(exc, Http404):
        exc = exceptions.NotFound()
    if not isinstance(exc, exceptions.APIException):
        return None  # a real bug: let Django log it and answer 500
    code = next((c for cls, c in _CODES.items() if isinstance(exc, cls)), "error")
    detail = exc.detail
    if isinstance(exc, exceptions.PermissionDenied) and "CSRF" in str(detail):
        code = "csrf_failed"
    if isinstance(detail, (list, dict)):
        body = {"code": code, "detail": "The request is invalid.", "errors": detail}
    else:
        body = {"code": code, "detail": str(detail)}
    headers = {}
    if getattr(exc, "auth_header", None):
        headers["WWW-Authenticate"] = exc.auth_header
    if getattr(exc, "wait", None) is not None:
        headers["Retry-After"] = str(int(exc.wait))
    return Response(body, status=exc.status_code, headers=headers)
