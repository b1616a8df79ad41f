"""The rehearsal's report: charts (PNG, matplotlib) and one HTML page with them, the verdict
and its figures, in the rehearsal's output folder."""

from __future__ import annotations

import html
import json
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from rehearsal.verdict import Verdict, percentile

CHARTS = ("answers.png", "latency.png", "sold.png", "room.png")


def _figure(title: str, ylabel: str):
    fig, ax = plt.subplots(figsize=(9, 3.6), dpi=100)
    ax.set_title(title)
    ax.set_xlabel("seconds from the sale's start")
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    ax.axvline(0, color="black", linewidth=0.8, linestyle="--")
    return fig, ax


def _save(fig, path: Path) -> None:
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def answers_chart(lines: list[dict[str, Any]], start: float, path: Path) -> None:
    """Answers per second by request, HTTP status and JSON code (the ten most frequent)."""
    series: dict[str, Counter] = defaultdict(Counter)
    for line in lines:
        if line["n"].startswith("note:"):
            continue
        second = int(line["t"] - start)
        key = f"{line['n']} {line['s'] or 'no answer'} {line['c']}".strip()
        series[key][second] += 1
    fig, ax = _figure("Answers by code, per second", "answers per second")
    for key, counts in sorted(series.items(), key=lambda kv: -sum(kv[1].values()))[:10]:
        xs = sorted(counts)
        ax.plot(xs, [counts[x] for x in xs], label=key, linewidth=1.2)
    ax.legend(fontsize=7, loc="upper right")
    _save(fig, path)


def latency_chart(lines: list[dict[str, Any]], start: float, target_ms: float, path: Path) -> None:
    per_second: dict[int, list[float]] = defaultdict(list)
    for line in lines:
        if not line["n"].startswith("note:"):
            per_second[int(line["t"] - start)].append(line["ms"])
    xs = sorted(per_second)
    fig, ax = _figure("Answer time, per second (all requests)", "ms")
    ax.plot(xs, [percentile(per_second[x], 0.5) for x in xs], label="p50")
    ax.plot(xs, [percentile(per_second[x], 0.99) for x in xs], label="p99")
    ax.axhline(target_ms, color="red", linewidth=0.8, label=f"target p99 {target_ms:g} ms")
    ax.set_yscale("log")
    ax.legend(fontsize=8)
    _save(fig, path)


def sold_chart(samples: list[dict[str, Any]], lines: list[dict[str, Any]], start: float, path: Path) -> None:
    fig, ax = _figure("Units sold", "units")
    live = [(s["t"] - start, s["live"]["sold"]) for s in samples if s.get("live")]
    if live:
        ax.plot([x for x, _ in live], [y for _, y in live], label="sold (admin's live view)")
    left = [
        (s["t"] - start, s["flag"]["remaining"]) for s in samples if (s.get("flag") or {}).get("remaining") is not None
    ]
    if left:
        ax.plot([x for x, _ in left], [y for _, y in left], label="left (the flag)")
    wins = sorted(line["t"] - start for line in lines if line["n"] == "purchase" and line["s"] == 202)
    if wins:
        ax.step(wins, range(1, len(wins) + 1), where="post", label="202s answered (the shoppers)", linewidth=0.9)
    ax.legend(fontsize=8)
    _save(fig, path)


def room_chart(samples: list[dict[str, Any]], start: float, path: Path) -> bool:
    rooms = [(s["t"] - start, s["room"]) for s in samples if s.get("room")]
    if not rooms:
        return False
    fig, ax = _figure("The waiting room", "shoppers")
    for key, label in (("waiting", "waiting (queue length)"), ("now_serving", "let in (now serving)")):
        ax.plot([x for x, _ in rooms], [r.get(key) or 0 for _, r in rooms], label=label)
    ax.plot([x for x, _ in rooms], [r.get("admitted_active") or 0 for _, r in rooms], label="let in, not done")
    ax.legend(fontsize=8)
    _save(fig, path)
    return True


def write(
    directory: Path,
    *,
    verdict: Verdict,
    lines: list[dict[str, Any]],
    samples: list[dict[str, Any]],
    start: float,
    title: str,
    target_ms: float,
) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    answers_chart(lines, start, directory / "answers.png")
    latency_chart(lines, start, target_ms, directory / "latency.png")
    sold_chart(samples, lines, start, directory / "sold.png")
    charts = ["answers.png", "latency.png", "sold.png"]
    if room_chart(samples, start, directory / "room.png"):
        charts.append("room.png")
    (directory / "verdict.json").write_text(json.dumps(verdict.as_dict(), indent=2))
    colour = "#1a7f37" if verdict.green else "#cf222e"
    rows = "".join(
        f"<tr><td>{'green' if c.ok else '<b>RED</b>'}</td><td>{html.escape(c.name)}</td>"
        f"<td>{html.escape(c.detail)}</td></tr>"
        for c in verdict.checks
    )
    figures = {k: v for k, v in verdict.figures.items() if k != "slowest"}
    slowest = "".join(
        f"<tr><td>{s['what']}</td><td>{s['status']} {html.escape(str(s['code']))}</td><td>{s['ms']}</td></tr>"
        for s in verdict.figures.get("slowest", [])
    )
    page = f"""<!doctype html><html lang="en"><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>body{{font-family:sans-serif;max-width:960px;margin:2em auto}}td{{padding:2px 8px;vertical-align:top}}
img{{max-width:100%}}</style>
<h1>{html.escape(title)}</h1>
<p style="font-size:1.4em;color:{colour}">Verdict: {"green" if verdict.green else "RED"}</p>
<table>{rows}</table>
<h2>Figures</h2><pre>{html.escape(json.dumps(figures, indent=2))}</pre>
<h2>Slowest answers</h2><table>{slowest}</table>
<h2>Charts</h2>{"".join(f'<p><img src="{c}" alt="{c}"></p>' for c in charts)}
</html>"""
    path = directory / "report.html"
    path.write_text(page)
    return path
