"""The admin report pages: charts drawn by pygal as SVG images (data: URIs: an image's own
styles need no inline style in the page, which its Content Security Policy forbids), and a
stored stock check report in words and tables for a reviewer."""

import base64
from collections.abc import Iterable, Sequence
from datetime import UTC

import pygal
from django.utils.html import format_html, format_html_join
from pygal.style import CleanStyle

from core.clock import shop_time, shop_zone


def _chart(title: str, series: dict[str, list[tuple]]) -> str:
    chart = pygal.DateTimeLine(
        title=f"{title}; times in {shop_zone()}",
        style=CleanStyle,
        height=320,
        width=900,
        x_label_rotation=25,
        show_dots=False,
        truncate_label=-1,
        truncate_legend=-1,
        # pygal hands the formatter a naive UTC datetime (utcfromtimestamp).
        x_value_formatter=lambda t: shop_time(t.replace(tzinfo=UTC), date=False, label=False),
        js=[],  # no script from a CDN: admin pages load nothing from outside
        disable_xml_declaration=True,
        no_data_text="no data yet",
    )
    for name, points in series.items():
        chart.add(name, points)
    svg = chart.render(is_unicode=True).encode()
    return "data:image/svg+xml;base64," + base64.b64encode(svg).decode()


def activity_charts(data: dict) -> dict[str, str]:
    return {
        "sold": _chart(
            "Units over time (running total)",
            {"ordered": data["ordered"], "paid": data["paid"], "cancelled": data["cancelled"]},
        ),
        "remaining": _chart(
            "Units left (at each stock check)",
            {"live counter": data["remaining"], "shop's records": data["db_available"]},
        ),
        "drift": _chart(
            "Units not accounted for (at each stock check; 0 is right)",
            {"live counter": data["redis_drift"], "shop's records": data["db_drift"]},
        ),
    }


BUCKET_WORDS = {
    "reserved_not_ordered": "reservations without an order",
    "pending_past_deadline": "unpaid orders past their deadline",
    "cancelled_not_returned": "cancelled orders whose units were not back on the live counter",
    "not_deducted": "orders without a database deduction",
    "paid_not_deducted": "paid orders without a database deduction",
    "unexplained_drift": "units off with no known cause",
}
ACTION_WORDS = {
    "orders_created": "orders created from reservations",
    "reservations_released": "reservations given up (stock returned)",
    "orders_cancelled": "overdue orders cancelled",
    "orders_returned_to_redis": "cancelled orders' units put back on the live counter",
    "orders_deducted": "orders deducted from the database stock",
    "pending_claims_settled": "pending stock claims settled",
    "reserve_units_released": "outage reserve units handed to the live counter",
}


def _n(value) -> str:
    return "–" if value is None else str(value)


def _units_off(value) -> str:
    if value is None:
        return "not measured"
    return "none" if value == 0 else f"{value:+d}"


def identity_rows(report: dict) -> list[tuple[str, str, str]]:
    """The three sums a report checks, with their figures (seckill.sale.reconciliation's
    identities), in a person's words."""
    r = report.get
    return [
        (
            "Live counter: loaded = left + reserved + pending + paid",
            f"{_n(r('redis_loaded'))} loaded; {_n(r('redis_remaining'))} left, "
            f"{_n(r('reserved_not_ordered'))} reserved without an order, "
            f"{_n(r('units_pending'))} pending, {_n(r('units_paid'))} paid",
            _units_off(r("redis_drift")),
        ),
        (
            "Shop's records: total = available + pending + paid",
            f"{_n(r('db_total'))} total; {_n(r('db_available'))} available, "
            f"{_n(r('units_cancelled'))} cancelled (back in stock)",
            _units_off(r("db_drift")),
        ),
        (
            "Outage reserve: reserve = left + sold from it + handed over",
            f"{_n(r('db_reserve'))} reserve; {_n(r('db_reserve_left'))} left, "
            f"{_n(r('units_reserve_live'))} in open orders sold from the reserve, "
            f"{_n(r('db_reserve_released'))} handed to the live counter",
            _units_off(r("reserve_drift")),
        ),
    ]


def report_in_words(report: dict) -> str:
    """One or two sentences a reviewer reads first."""
    found = sum(report.get("buckets", {}).values())
    done = sum(report.get("actions", {}).values())
    opened = report.get("anomalies_opened", 0)
    if report.get("consistent") is False:  # a busy sale: the figures moved while they were read
        parts = ["Not measured: the sale kept moving while the figures were read; the next quiet check tells."]
    else:
        parts = ["Every unit is accounted for." if report.get("identity_ok") else "Some units are not accounted for."]
    parts.append(f"{found} item(s) found, {done} repaired, {opened} anomaly(ies) opened.")
    if report.get("final"):
        parts.append("This is the final check, made when the sale was closed.")
    return " ".join(parts)


def html_table(headers: Sequence[str], rows: Iterable[Sequence]) -> str:
    return format_html(
        '<table class="report-table"><thead><tr>{}</tr></thead><tbody>{}</tbody></table>',
        format_html_join("", "<th>{}</th>", ((h,) for h in headers)),
        format_html_join(
            "", "<tr>{}</tr>", ((format_html_join("", "<td>{}</td>", ((_n(c),) for c in row)),) for row in rows)
        ),
    )
