"""Every API error as ``{"code": "<snake_case>", "detail": "<sentence>"}``."""

from django.http import Http404, JsonResponse
from rest_framework import exceptions, serializers
from rest_framework.response import Response

from core.errors import ApiError, api_error_of
from core.log_filters import expected_rejection_unlogged

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


# Answers that must never be stored by a browser or a cache (the flag, the result).
NO_STORE = {"Cache-Control": "no-store, max-age=0"}


class ErrorSerializer(serializers.Serializer):
    """Every error's body, for the OpenAPI schema."""

    code = serializers.CharField()
    detail = serializers.CharField()


def plain_json(body: dict, *, status: int) -> JsonResponse:
    """What a DRF Response would answer, without DRF."""
    response = JsonResponse(body, status=status)
    # As on a DRF Response (JsonResponse has no such attribute): the purchase metrics read the code from it.
    response.data = body  # type: ignore[attr-defined]
    return response


def error_json(exc: ApiError) -> JsonResponse:
    """The same body and headers as the DRF exception handler, without DRF."""
    response = plain_json({"code": exc.code, "detail": exc.detail}, status=exc.status)
    for name, value in exc.headers().items():
        response[name] = value
    return expected_rejection_unlogged(response)
