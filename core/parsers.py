"""The JSON parser of the API: DRF's, made safe against absurdly nested documents."""

from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser


class SafeJSONParser(JSONParser):
    def parse(self, stream, media_type=None, parser_context=None):
        try:
            return super().parse(stream, media_type, parser_context)
        except RecursionError as exc:
            # json raises RecursionError (not ValueError) on deep nesting: a 400, not a 500.
            raise ParseError("JSON parse error - the document is nested too deeply.") from exc
