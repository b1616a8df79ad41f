"""The one error type the JSON API answers with: ``{"code": …, "detail": …}``."""


class ApiError(Exception):
    def __init__(self, status: int, code: str, detail: str, *, retry_after: int | None = None):
        super().__init__(detail)
        self.status = status
        self.code = code
        self.detail = detail
        self.retry_after = retry_after

    def headers(self) -> dict[str, str]:
        return {"Retry-After": str(self.retry_after)} if self.retry_after is not None else {}
