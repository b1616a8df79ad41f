"""The charts of the admin report page, drawn by pygal as SVG images (data: URIs): an image's own
styles need no inline style in the page, which its Content Security Policy forbids."""

import base64

import pygal
from pygal.style import CleanStyle


def _chart(title: str, series: dict[str, list[tuple]]) -> str:
    chart = pygal.DateTimeLine(
        title=title,
        style=CleanStyle,
        height=320,
        width=900,
        x_label_rotation=25,
        show_dots=False,
        truncate_label=-1,
        truncate_legend=-1,
        x_value_formatter=lambda t: t.strftime("%H:%M:%S"),
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
            "Units over time (cumulative)",
            {"ordered": data["ordered"], "paid": data["paid"], "cancelled": data["cancelled"]},
        ),
        "remaining": _chart(
            "Remaining (per reconciliation run)",
            {"Redis remaining": data["remaining"], "database available": data["db_available"]},
        ),
        "drift": _chart(
            "Drift in units (per reconciliation run; 0 is healthy)",
            {"Redis": data["redis_drift"], "database": data["db_drift"]},
        ),
    }
