"""``dspark-json report DIR -o FILE``: a run as one self-contained HTML page.

The page is drawn from option ``metrics``'s records (:func:`dspark_json.metrics.read_records`:
latency p50/p95, in-flight limits, tokens, cost, rows by status, per model) and the progress
records beside them (:mod:`dspark_json.progress`: each task's samples, every few seconds, for
rows/s, in-flight limit and held time over time). It needs no network: the figures are
embedded as JSON, and a small script written here draws them as inline SVG. When it has drawn
every plot it sets ``data-rendered`` on ``<body>`` (the number of plots); a script error sets
``data-errors`` (the test opens the page in headless Chromium and reads both).
"""

from __future__ import annotations

import html
import json
from collections import Counter
from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from dspark_json.errors import mask_uris
from dspark_json.metrics import read_records
from dspark_json.progress import snapshot, task_records
from dspark_json.storage import ENVIRONMENT_ONLY, StorageSettings

__all__ = ["render_html", "report_data", "write_report"]

#: Points at most in a plot's time axis.
POINTS = 120


def over_time(tasks: Sequence[Mapping[str, Any]]) -> dict[str, list[list[float]]]:
    """The tasks' samples summed over time: rows/s, in-flight limit of the running tasks, and
    the seconds held by the pool so far, at up to :data:`POINTS` times from the first start."""
    points = []
    for task in tasks:
        started = task.get("started") or 0.0
        points.append([(started + s[0], s) for s in task.get("samples") or []])
    if not any(points):
        return {"rows_per_second": [], "inflight": [], "held_seconds": []}
    begin = min(t["started"] for t in tasks if t.get("samples"))
    end = max(at for each in points for at, _ in each)
    step = max((end - begin) / POINTS, 0.5)
    grid = [begin + step * i for i in range(int((end - begin) / step) + 2)]

    def at(samples: list[tuple[float, list[float]]], t: float, field: int, live: bool) -> float:
        value = 0.0
        for when, sample in samples:
            if when > t:
                break
            value = sample[field]
        if live and samples and (t < samples[0][0] - 0.01 or t > samples[-1][0]):
            return 0.0  # the in-flight limit counts while the task runs
        return value

    done = [sum(at(s, t, 1, False) for s in points) for t in grid]
    rate = [
        [round(grid[i] - begin, 1), round((done[i] - done[i - 1]) / step, 2)]
        for i in range(1, len(grid))
    ]
    return {
        "rows_per_second": rate,
        "inflight": [[round(t - begin, 1), sum(at(s, t, 4, True) for s in points)] for t in grid],
        "held_seconds": [
            [round(t - begin, 1), round(sum(at(s, t, 3, False) for s in points), 2)] for t in grid
        ],
    }


def report_data(metrics: str, *, storage: StorageSettings = ENVIRONMENT_ONLY) -> dict[str, Any]:
    """Everything the page shows, as JSON-ready figures."""
    records = read_records(metrics, storage=storage)
    shot = snapshot(metrics, storage=storage)
    first = shot.get("first_batch")
    if first is not None:
        records = [r for r in records if r.get("batch") is None or r["batch"] >= first]
    tasks = task_records(metrics, storage=storage)
    latency = []
    for record in sorted(records, key=lambda r: r.get("at") or ""):
        figures = record.get("latency_ms") or {}
        if figures.get("p50") is None:
            continue
        try:
            when = datetime.fromisoformat(record["at"]).timestamp()
        except (KeyError, ValueError):
            continue
        latency.append([when, figures["p50"], figures.get("p95")])
    if latency:
        zero = min(t.get("started") or latency[0][0] for t in tasks) if tasks else latency[0][0]
        latency = [[round(t - zero, 1), p50, p95] for t, p50, p95 in latency]
    rows: Counter[str] = Counter()
    for record in records:
        rows.update(record.get("rows") or {})
    if not records:  # a run in progress: its tasks' figures
        rows.update({"ok": shot["ok"], **shot["errors"]})
    limits = [r.get("inflight_limit") or {} for r in records]
    return {
        "title": f"dspark-json run: {mask_uris(metrics)}",  # a SAS token's sig= not shown
        "summary": shot,
        "series": over_time(tasks),
        "latency": latency,
        "rows": dict(rows.most_common()),
        "http_status": shot["http_status"],
        "inflight_limit": {
            "lowest": min((x.get("lowest") or 0 for x in limits), default=None),
            "peak": max((x.get("peak") or 0 for x in limits), default=None),
        },
        "partitions": len(records),
    }


def write_report(metrics: str, output: str, *, storage: StorageSettings = ENVIRONMENT_ONLY) -> bool:
    """Write the page of the run under ``metrics`` to ``output`` (a local file); ``False``
    where there is nothing to show."""
    data = report_data(metrics, storage=storage)
    if not data["partitions"] and data["summary"]["state"] == "waiting":
        return False
    try:
        Path(output).write_text(render_html(data), encoding="utf-8")
    except OSError as exc:
        raise OSError(f"cannot write the page to {output} ({exc.strerror or exc})") from exc
    return True


def render_html(data: Mapping[str, Any]) -> str:
    """The page: the figures as JSON in the page, drawn by :data:`_SCRIPT`."""
    shot = data["summary"]
    tokens = shot["tokens"]
    cost = shot["cost_usd"]
    cards = [
        ("prompts", f"{shot['prompts']['done']} of {shot['prompts']['total'] or '?'}"),
        ("rows/s", str(shot["rows_per_second"] or "-")),
        ("elapsed", f"{shot['elapsed_seconds']} s"),
        ("requests", f"{shot['requests']} ({shot['retries']} retries)"),
        ("tokens", f"{tokens['input']} in ({tokens['cached']} cached) / {tokens['output']} out"),
        ("cost", "-" if cost is None else f"${cost:.4f}"),
        ("held by the pool", f"{shot['held_seconds']} s"),
        (
            "in-flight limit",
            f"{data['inflight_limit']['lowest']}-{data['inflight_limit']['peak']}",
        ),
    ]
    models = "".join(
        f"<tr><td>{html.escape(m)}</td><td>{f['done']}</td><td>{f['requests']}</td>"
        f"<td>{f['tokens']['input']}</td><td>{f['tokens']['output']}</td>"
        f"<td>{_usd(f.get('cost_usd'))}</td></tr>"
        for m, f in sorted(shot["models"].items())
    )
    embedded = _in_script(json.dumps(data, sort_keys=True))
    return _PAGE.format(
        title=html.escape(data["title"]),
        cards="".join(
            f'<div class="card"><div class="k">{html.escape(k)}</div>'
            f'<div class="v">{html.escape(v)}</div></div>'
            for k, v in cards
        ),
        models=models or '<tr><td colspan="6">one model, figures above</td></tr>',
        data=embedded,
        script=_SCRIPT,
    )


def _in_script(text: str) -> str:
    """JSON text safe inside a ``<script>`` element: ``</script>`` would end it, and
    ``<!--`` then ``<script`` would make the parser swallow the rest of the page into it (a
    model's name or an error's text may hold either). ``<``, ``>`` and ``&`` written as
    ``\\u`` escapes: the same JSON, and no markup in it."""
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _usd(value: float | None) -> str:
    return "-" if value is None else f"${value:.4f}"


_PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<style>
body{{font-family:system-ui,sans-serif;margin:24px;color:#222;background:#fafafa}}
h1{{font-size:20px}} h2{{font-size:15px;margin:18px 0 6px}}
.cards{{display:flex;flex-wrap:wrap;gap:10px}}
.card{{background:#fff;border:1px solid #ddd;border-radius:6px;padding:8px 12px;min-width:140px}}
.k{{font-size:11px;color:#666;text-transform:uppercase}} .v{{font-size:16px}}
.plots{{display:grid;grid-template-columns:repeat(auto-fit,minmax(420px,1fr));gap:14px}}
.plot{{background:#fff;border:1px solid #ddd;border-radius:6px;padding:8px}}
table{{border-collapse:collapse;background:#fff}} td,th{{border:1px solid #ddd;padding:4px 8px}}
svg text{{font-size:10px;fill:#555}}
</style></head>
<body>
<h1>{title}</h1>
<div class="cards">{cards}</div>
<div class="plots">
<div class="plot"><h2>rows/s over time</h2><svg id="rate" width="440" height="200"></svg></div>
<div class="plot"><h2>latency p50 / p95 (ms), by partition</h2>
<svg id="latency" width="440" height="200"></svg></div>
<div class="plot"><h2>in-flight limit, and seconds held by the pool</h2>
<svg id="inflight" width="440" height="200"></svg></div>
<div class="plot"><h2>tokens</h2><svg id="tokens" width="440" height="200"></svg></div>
<div class="plot"><h2>rows by status</h2><svg id="rows" width="440" height="200"></svg></div>
<div class="plot"><h2>HTTP attempts by code or error</h2>
<svg id="http" width="440" height="200"></svg></div>
</div>
<h2>per model</h2>
<table><tr><th>model</th><th>prompts</th><th>requests</th><th>tokens in</th><th>tokens out</th>
<th>cost</th></tr>{models}</table>
<script type="application/json" id="data">{data}</script>
<script>{script}</script>
</body></html>
"""

#: The page's script: line and bar plots as SVG, no library.
_SCRIPT = r"""
window.__errors = [];
window.onerror = function (message) {
  window.__errors.push(String(message));
  document.body.setAttribute('data-errors', window.__errors.join(' | '));
};
(function () {
  var NS = 'http://www.w3.org/2000/svg';
  var COLORS = ['#1f77b4', '#d62728', '#2ca02c', '#ff7f0e', '#9467bd', '#8c564b'];
  var data = JSON.parse(document.getElementById('data').textContent);
  function el(name, attrs, parent) {
    var node = document.createElementNS(NS, name);
    for (var k in attrs) node.setAttribute(k, attrs[k]);
    if (parent) parent.appendChild(node);
    return node;
  }
  function text(svg, x, y, s, anchor) {
    var t = el('text', {x: x, y: y, 'text-anchor': anchor || 'start'}, svg);
    t.textContent = s;
  }
  function frame(svg) {
    var w = +svg.getAttribute('width'), h = +svg.getAttribute('height');
    return {svg: svg, x0: 44, y0: h - 22, w: w - 54, h: h - 34};
  }
  function empty(f, why) { text(f.svg, f.x0 + f.w / 2, f.y0 - f.h / 2, why, 'middle'); }
  function lines(id, series, names) {
    var f = frame(document.getElementById(id));
    var all = [].concat.apply([], series);
    if (!all.length) { empty(f, 'no samples'); return; }
    var xmax = Math.max.apply(null, all.map(function (p) { return p[0]; })) || 1;
    var ymax = Math.max.apply(null, all.map(function (p) { return p[1]; })) || 1;
    el('line', {x1: f.x0, y1: f.y0, x2: f.x0 + f.w, y2: f.y0, stroke: '#999'}, f.svg);
    el('line', {x1: f.x0, y1: f.y0, x2: f.x0, y2: f.y0 - f.h, stroke: '#999'}, f.svg);
    text(f.svg, f.x0 - 4, f.y0 - f.h + 8, ymax.toPrecision(3), 'end');
    text(f.svg, f.x0 - 4, f.y0, '0', 'end');
    text(f.svg, f.x0 + f.w, f.y0 + 14, xmax.toFixed(0) + ' s', 'end');
    series.forEach(function (points, i) {
      if (!points.length) return;
      var d = points.map(function (p, j) {
        return (j ? 'L' : 'M') + (f.x0 + p[0] / xmax * f.w).toFixed(1) + ' ' +
               (f.y0 - p[1] / ymax * f.h).toFixed(1);
      }).join(' ');
      el('path', {d: d, fill: 'none', stroke: COLORS[i % COLORS.length], 'stroke-width': 1.5,
                  'class': 'series'}, f.svg);
      text(f.svg, f.x0 + 6 + i * 110, f.y0 - f.h + 8, names[i]);
    });
  }
  function bars(id, items) {
    var f = frame(document.getElementById(id));
    var keys = Object.keys(items);
    if (!keys.length) { empty(f, 'none'); return; }
    var ymax = Math.max.apply(null, keys.map(function (k) { return items[k]; })) || 1;
    var bw = f.w / keys.length;
    keys.forEach(function (k, i) {
      var h = items[k] / ymax * f.h;
      el('rect', {x: f.x0 + i * bw + 4, y: f.y0 - h, width: Math.max(bw - 8, 2), height: h,
                  fill: COLORS[i % COLORS.length], 'class': 'bar'}, f.svg);
      text(f.svg, f.x0 + i * bw + bw / 2, f.y0 + 14, k, 'middle');
      text(f.svg, f.x0 + i * bw + bw / 2, f.y0 - h - 3, String(items[k]), 'middle');
    });
  }
  var s = data.series;
  lines('rate', [s.rows_per_second], ['rows/s']);
  lines('latency', [data.latency.map(function (p) { return [p[0], p[1]]; }),
                    data.latency.map(function (p) { return [p[0], p[2] || 0]; })],
        ['p50', 'p95']);
  lines('inflight', [s.inflight, s.held_seconds], ['in-flight limit', 'held s']);
  bars('tokens', data.summary.tokens);
  bars('rows', data.rows);
  bars('http', data.http_status);
  document.body.setAttribute('data-rendered', String(document.querySelectorAll('svg').length));
})();
"""
