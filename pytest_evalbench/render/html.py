"""Self-contained HTML report: one file, no external URLs, data embedded as JSON.

Python prepares a small view model (rates with Wilson intervals, demographic-variant groups,
conversations joined with their judgments) and embeds it in `<script type="application/json">`;
inline JS renders it into the DOM with stable `data-testid`s (rate-<target>-<metric>, pos-rate-
<target>, neg-rate-<target>, change-<target>-<metric>, variant-<target>-<scenario id>, turn-<i>,
verdict-<metric>, justification-<metric>) so a headless browser test can check the numbers.
A conversation can be preselected with `#conv=<index>` in the URL.
"""

from __future__ import annotations

import html
import json
import re
from typing import Any

from ..gate.compare import metric_counts
from ..gate.stats import RateEstimate

VARIANT_ID = re.compile(r"^(?P<base>.+)_v\d+$")
DISAGREE_SPREAD = 0.5
"""Variants of a base scenario "disagree" when, for some target, their pass rates differ by at
least this much (with one sample per variant: any pass/fail difference)."""


def embed_json(data: Any) -> str:
    """JSON safe inside a <script> element: `<`, `>` and `&` become \\u escapes, so neither `</script>`
    nor `<!--` can end or confuse the element; JSON.parse restores them."""
    text = json.dumps(data, ensure_ascii=False, sort_keys=True, default=str)
    return (text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
            .replace("\u2028", "\\u2028").replace("\u2029", "\\u2029"))


def _variants(scores: list[dict[str, Any]], conversations: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Base scenarios with >= 2 demographic variants: each variant's demographic and per-target k/n."""
    demographic = {c["id"]: c.get("demographic") or {} for c in conversations if "id" in c}
    counts: dict[str, dict[str, list[int]]] = {}
    for row in scores:
        if row.get("passed") is None:
            continue
        k_n = counts.setdefault(row["id"], {}).setdefault(row["target_model"], [0, 0])
        k_n[0] += bool(row["passed"])
        k_n[1] += 1
    groups: dict[str, list[str]] = {}
    for sid in sorted(set(counts) | set(demographic)):
        match = VARIANT_ID.match(sid)
        if match:
            groups.setdefault(match["base"], []).append(sid)
    out = []
    for base, ids in sorted(groups.items()):
        if len(ids) < 2:
            continue
        variants = [{"id": sid, "demographic": demographic.get(sid, {}),
                     "rates": {t: {"k": k, "n": n, "rate": k / n} for t, (k, n) in sorted(counts.get(sid, {}).items())}}
                    for sid in ids]
        targets = sorted({t for v in variants for t in v["rates"]})
        spread = {t: [v["rates"][t]["rate"] for v in variants if t in v["rates"]] for t in targets}
        flagged = any(len(r) > 1 and max(r) - min(r) >= DISAGREE_SPREAD for r in spread.values())
        out.append({"base": base, "metric_id": base.split("_")[0], "flagged": flagged, "variants": variants})
    return out


def _conversations(scores: list[dict[str, Any]], conversations: list[dict[str, Any]]) -> list[dict[str, Any]]:
    judgments: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for row in scores:
        judgments.setdefault((row["conv_id"], row.get("sample") or 0), []).append(
            {key: row.get(key) for key in ("metric_id", "metric_name", "metric_type", "present", "passed",
                                            "justification")})
    out = []
    for conv in sorted(conversations, key=lambda c: (c.get("target", {}).get("id", ""), c.get("conv_id", ""),
                                                    c.get("sample") or 0)):
        sample = conv.get("sample") or 0
        out.append({"conv_id": conv.get("conv_id"), "scenario_id": conv.get("id"), "sample": sample,
                    "target": (conv.get("target") or {}).get("id"), "metric_id": conv.get("metric_id"),
                    "persona": conv.get("persona"), "user_goal": conv.get("user_goal"),
                    "demographic": conv.get("demographic") or {}, "transcript": conv.get("transcript") or [],
                    "judgments": judgments.get((conv.get("conv_id"), sample), [])})
    return out


def build_view(results: list[dict[str, Any]], scores: list[dict[str, Any]], conversations: list[dict[str, Any]],
               comparison: Any, title: str) -> dict[str, Any]:
    """The embedded data: everything the page shows, already computed."""
    if comparison is not None and hasattr(comparison, "to_dict"):
        comparison = comparison.to_dict()
    counts = metric_counts(results, scores)
    targets = sorted(set(counts) | {s["target_model"] for s in results})
    names: dict[str, dict[str, Any]] = {}
    for target_counts in counts.values():
        for mid, entry in target_counts.items():
            names.setdefault(mid, {"id": mid, "name": entry.get("metric_name"), "type": entry.get("metric_type")})
    rates = {t: {m: RateEstimate.of(e["n_passed"], e["n_total"]).to_dict() for m, e in counts.get(t, {}).items()}
             for t in targets}
    changes: dict[str, dict[str, Any]] = {}
    for entry in (comparison or {}).get("entries", []):
        paired = entry.get("paired") or {}
        changes.setdefault(entry["target"], {})[entry["metric_id"]] = {
            "baseline": (entry.get("baseline") or {}).get("rate"), "change": entry.get("change"),
            "low": paired.get("low", entry.get("change_low")), "high": paired.get("high", entry.get("change_high")),
            "significant_drop": entry.get("significant_drop", False), "b": paired.get("b"), "c": paired.get("c")}
    summary = [{key: s.get(key) for key in ("target_model", "positive_pass_rate", "negative_pass_rate",
                                            "n_positive", "n_negative", "n_total")}
               for s in sorted(results, key=lambda s: s["target_model"])]
    return {"title": title, "targets": targets, "metrics": [names[m] for m in sorted(names)], "summary": summary,
            "rates": rates, "changes": changes if comparison is not None else None,
            "meta_warnings": (comparison or {}).get("meta_warnings", []),
            "variants": _variants(scores, conversations), "conversations": _conversations(scores, conversations),
            "disagree_spread": DISAGREE_SPREAD}


def render_html(results: list[dict[str, Any]], scores: list[dict[str, Any]], conversations: list[dict[str, Any]],
                comparison: Any, title: str) -> str:
    """The report page. `comparison` is a gating.Comparison, its to_dict(), or None."""
    view = build_view(results, scores, conversations, comparison, title)
    parts = {"TITLE": html.escape(title), "CSS": _CSS, "JS": _JS, "DATA": embed_json(view)}
    return re.sub(r"__(TITLE|CSS|JS|DATA)__", lambda m: parts[m[1]], _PAGE)  # one pass: no re-substitution


_PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>__TITLE__</title><style>__CSS__</style></head>
<body><header><h1 id="title">__TITLE__</h1><p class="muted">pytest-evalbench report. Intervals are 95% Wilson
score intervals; a change is current minus baseline.</p></header>
<main>
<section><h2>Targets</h2><table id="summary"></table><ul id="warnings" class="warn"></ul></section>
<section><h2>Pass rate by metric</h2><table id="metrics"></table></section>
<section><h2>Demographic variants</h2>
<label><input type="checkbox" id="only-flagged"> only base scenarios whose variants disagree</label>
<div id="variants"></div></section>
<section><h2>Transcripts</h2><select id="conv-select" aria-label="conversation"></select>
<div id="conv-view"></div></section>
</main>
<noscript>This report needs JavaScript to render its data.</noscript>
<script type="application/json" id="evalbench-data">__DATA__</script>
<script>__JS__</script>
</body></html>
"""

_CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0;color:#1d2330;background:#f5f6f8}
header{background:#1d2330;color:#fff;padding:16px 28px}header h1{margin:0 0 4px;font-size:22px}
header .muted{color:#b8c0cc}main{padding:8px 28px 40px;max-width:1200px}
section{background:#fff;border:1px solid #e1e4ea;border-radius:8px;padding:12px 18px;margin:16px 0}
h2{font-size:16px;margin:4px 0 10px}.muted{color:#6b7280;font-size:12px}
table{border-collapse:collapse;width:100%}th,td{text-align:left;padding:6px 8px;border-bottom:1px solid #eef0f3;
vertical-align:top}th{font-size:12px;color:#4b5563;font-weight:600}
.bar{position:relative;height:10px;background:#eef0f3;border-radius:5px;margin:3px 0;min-width:120px}
.fill{position:absolute;left:0;top:0;bottom:0;border-radius:5px;background:#3b82f6}
.fill.neg{background:#8b5cf6}.ci{position:absolute;top:4px;height:2px;background:#111827;opacity:.55}
.num{font-weight:600;font-variant-numeric:tabular-nums}.down{color:#b91c1c;font-weight:600}.up{color:#047857}
.flag{display:inline-block;background:#fde68a;color:#78350f;border-radius:4px;padding:0 6px;font-size:12px;margin-left:6px}
.group{border-top:1px solid #eef0f3;padding:8px 0}.group[data-flagged="true"] h3{color:#92400e}
h3{font-size:14px;margin:4px 0}.turn{border-radius:8px;padding:8px 12px;margin:6px 0;white-space:pre-wrap;max-width:860px}
.turn.user{background:#eef2ff}.turn.assistant{background:#f0fdf4;margin-left:40px}.role{font-size:11px;color:#6b7280;
text-transform:uppercase}.pass{color:#047857;font-weight:600}.fail{color:#b91c1c;font-weight:600}
.unscored{color:#6b7280;font-weight:600}.judgment{border-left:3px solid #d1d5db;padding:4px 10px;margin:8px 0}
select{font:inherit;padding:4px;max-width:100%}.warn{color:#92400e}
"""

_JS = r"""
(function () {
  const D = JSON.parse(document.getElementById('evalbench-data').textContent);
  const el = (tag, attrs, text) => {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) { if (v !== null && v !== undefined) e.setAttribute(k, v); }
    if (text !== undefined && text !== null) e.textContent = text;
    return e;
  };
  const fmt = (v, d) => (v === null || v === undefined) ? '-' : Number(v).toFixed(d === undefined ? 2 : d);
  const sgn = v => (v === null || v === undefined) ? '-' : (v > 0 ? '+' : '') + Number(v).toFixed(2);
  const row = (cells, tag) => { const tr = el('tr'); cells.forEach(c => tr.appendChild(
    c instanceof Node ? c : el(tag || 'td', {}, c))); return tr; };

  // Targets summary
  const summary = document.getElementById('summary');
  summary.appendChild(row(['target', 'positive pass rate', 'negative pass rate', 'rows'], 'th'));
  for (const s of D.summary) {
    summary.appendChild(row([s.target_model,
      el('td', {'data-testid': 'pos-rate-' + s.target_model, 'class': 'num'}, fmt(s.positive_pass_rate)),
      el('td', {'data-testid': 'neg-rate-' + s.target_model, 'class': 'num'}, fmt(s.negative_pass_rate)),
      `${s.n_total} (${s.n_positive} positive, ${s.n_negative} negative)`]));
  }
  const warnings = document.getElementById('warnings');
  for (const w of D.meta_warnings || []) warnings.appendChild(el('li', {}, w));

  // Pass rate by metric: one bar per target with its Wilson interval as a whisker
  const metrics = document.getElementById('metrics');
  metrics.appendChild(row(['metric'].concat(D.targets), 'th'));
  for (const m of D.metrics) {
    const tr = el('tr', {'data-metric': m.id});
    const name = el('td'); name.appendChild(el('div', {'class': 'num'}, m.id));
    name.appendChild(el('div', {'class': 'muted'}, (m.name || '') + (m.type ? ' (' + m.type + ')' : '')));
    tr.appendChild(name);
    for (const t of D.targets) {
      const td = el('td'); const r = (D.rates[t] || {})[m.id];
      if (!r || r.rate === null) { td.appendChild(el('span', {'class': 'muted'}, 'no data')); tr.appendChild(td); continue; }
      const bar = el('div', {'class': 'bar', 'title': `${r.k}/${r.n} passed`});
      bar.appendChild(el('div', {'class': 'fill' + (m.type === 'negative' ? ' neg' : ''), 'style': `width:${r.rate * 100}%`}));
      bar.appendChild(el('div', {'class': 'ci', 'style': `left:${r.low * 100}%;width:${(r.high - r.low) * 100}%`}));
      td.appendChild(bar);
      td.appendChild(el('span', {'class': 'num', 'data-testid': `rate-${t}-${m.id}`, 'data-value': r.rate}, fmt(r.rate)));
      td.appendChild(el('span', {'class': 'muted', 'data-testid': `ci-${t}-${m.id}`},
        ` ${r.k}/${r.n}, 95% CI [${fmt(r.low)}, ${fmt(r.high)}]`));
      const c = D.changes && (D.changes[t] || {})[m.id];
      if (c && c.change !== null && c.change !== undefined) {
        const cls = c.significant_drop ? 'down' : (c.change > 0 ? 'up' : 'muted');
        const flips = (c.b === null || c.b === undefined) ? '' : `, ${c.b} pass->fail, ${c.c} fail->pass`;
        td.appendChild(el('div', {'class': cls, 'data-testid': `change-${t}-${m.id}`, 'data-value': c.change},
          `vs baseline ${fmt(c.baseline)}: ${sgn(c.change)} [${sgn(c.low)}, ${sgn(c.high)}]${flips}` +
          (c.significant_drop ? ' - significant drop' : '')));
      }
      tr.appendChild(td);
    }
    metrics.appendChild(tr);
  }

  // Demographic variants, side by side per base scenario
  const variants = document.getElementById('variants');
  if (!D.variants.length) variants.appendChild(el('p', {'class': 'muted'}, 'No base scenario has more than one demographic variant in this run.'));
  for (const g of D.variants) {
    const box = el('div', {'class': 'group', 'data-base': g.base, 'data-flagged': String(g.flagged)});
    const h = el('h3', {}, g.base);
    if (g.flagged) h.appendChild(el('span', {'class': 'flag', 'data-testid': 'flag-' + g.base}, 'variants disagree'));
    box.appendChild(h);
    const targets = D.targets.filter(t => g.variants.some(v => v.rates[t]));
    const table = el('table');
    table.appendChild(row(['variant', 'demographic'].concat(targets), 'th'));
    for (const v of g.variants) {
      const demo = Object.entries(v.demographic).map(([k, val]) => `${k}: ${val}`).join('; ') || '-';
      const tr = row([v.id, demo]);
      for (const t of targets) {
        const r = v.rates[t];
        const cls = r ? (r.rate >= 0.5 ? 'num pass' : 'num fail') : 'num muted';
        tr.appendChild(el('td', {'class': cls, 'data-testid': `variant-${t}-${v.id}`, 'data-value': r ? r.rate : null},
          r ? `${fmt(r.rate)} (${r.k}/${r.n})` : '-'));
      }
      table.appendChild(tr);
    }
    box.appendChild(table);
    variants.appendChild(box);
  }
  document.getElementById('only-flagged').addEventListener('change', e => {
    for (const g of variants.querySelectorAll('.group'))
      g.style.display = (e.target.checked && g.dataset.flagged !== 'true') ? 'none' : '';
  });

  // Transcript viewer
  const select = document.getElementById('conv-select');
  const view = document.getElementById('conv-view');
  const verdict = j => j.passed === null || j.passed === undefined ? 'unscored' : (j.passed ? 'pass' : 'fail');
  D.conversations.forEach((c, i) => {
    const marks = c.judgments.map(verdict).join(',') || 'not judged';
    select.appendChild(el('option', {'value': String(i)}, `${c.target} | ${c.scenario_id} | sample ${c.sample} | ${marks}`));
  });
  function show(i) {
    view.replaceChildren();
    const c = D.conversations[i];
    if (!c) { view.appendChild(el('p', {'class': 'muted'}, 'No conversations in this run.')); return; }
    view.setAttribute('data-conv-id', c.conv_id);
    const demo = Object.entries(c.demographic).map(([k, v]) => `${k}: ${v}`).join('; ');
    view.appendChild(el('p', {'class': 'muted', 'data-testid': 'conv-meta'},
      `${c.conv_id} (sample ${c.sample}) - persona: ${c.persona || '-'} - goal: ${c.user_goal || '-'}` + (demo ? ' - ' + demo : '')));
    c.transcript.forEach((t, n) => {
      const d = el('div', {'class': 'turn ' + t.role, 'data-testid': 'turn-' + n, 'data-role': t.role});
      d.appendChild(el('div', {'class': 'role'}, t.role)); d.appendChild(el('div', {}, t.content));
      view.appendChild(d);
    });
    if (!c.judgments.length) view.appendChild(el('p', {'class': 'muted'}, 'Not judged.'));
    for (const j of c.judgments) {
      const box = el('div', {'class': 'judgment'});
      const head = el('div', {}, `${j.metric_id} ${j.metric_name || ''} (${j.metric_type || '?'}): `);
      head.appendChild(el('span', {'class': verdict(j), 'data-testid': 'verdict-' + j.metric_id}, verdict(j)));
      head.appendChild(el('span', {'class': 'muted'}, ` - behaviour present: ${j.present === null ? 'unknown' : j.present}`));
      box.appendChild(head);
      box.appendChild(el('div', {'data-testid': 'justification-' + j.metric_id}, j.justification || ''));
      view.appendChild(box);
    }
  }
  select.addEventListener('change', () => show(Number(select.value)));
  const m = /conv=(\d+)/.exec(location.hash);
  const start = m && Number(m[1]) < D.conversations.length ? Number(m[1]) : 0;
  select.value = String(start);
  show(start);
})();
"""
