"""Drill 5's clock skew, for one host's Python processes only: with this directory on
PYTHONPATH and ``SECKILL_DRILL_CLOCK_OFFSET`` seconds set, the wall clock that Python code
reads (``time.time``, ``time.time_ns``, ``datetime.now``, ``utcnow``, ``today``) runs that
far ahead; the monotonic clock, sleeps and timed waits are untouched, as they are on a host
whose NTP is off. (libfaketime, the other way, hangs Python 3.11's timed thread waits.)"""

import datetime as _datetime_module
import os
import time as _time

_offset = float(os.environ.get("SECKILL_DRILL_CLOCK_OFFSET") or 0)

if _offset:
    _real_time, _real_time_ns, _real = _time.time, _time.time_ns, _datetime_module.datetime

    def _time_ahead() -> float:
        return _real_time() + _offset

    def _time_ns_ahead() -> int:
        return _real_time_ns() + int(_offset * 1e9)

    _time.time, _time.time_ns = _time_ahead, _time_ns_ahead

    class _AnyDatetime(type):
        def __instancecheck__(cls, obj):
            return isinstance(obj, _real)

        def __subclasscheck__(cls, sub):
            return issubclass(sub, _real)

    class datetime(_real, metaclass=_AnyDatetime):  # type: ignore[valid-type,misc]
        @classmethod
        def now(cls, tz=None):
            return _real.fromtimestamp(_time_ahead(), tz)

        @classmethod
        def utcnow(cls):
            return _real.fromtimestamp(_time_ahead(), _datetime_module.UTC).replace(tzinfo=None)

        @classmethod
        def today(cls):
            return _real.fromtimestamp(_time_ahead())

    datetime.__module__ = "datetime"
    _datetime_module.datetime = datetime  # type: ignore[misc]
