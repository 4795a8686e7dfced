// The keras-gpu tab: TensorBoard loads this ES module in an iframe and calls render().
//
// Every number comes from the plugin's routes: `report` is what `keras-gpu report --json` prints, `view` holds the
// charts' points and the sentences saying what is missing (keras_gpu/tensorboard/tab_data.py). This module only
// lays them out: tables, and charts drawn as inline SVG. Nothing is fetched from anywhere but the plugin's routes.

const SVG = "http://www.w3.org/2000/svg";
const PARTS = ["input", "compute", "communication", "transfer", "other"];
const EPOCH_PARTS = [
  ["steady training", (t) => t.train_sec - t.first_step_sec],
  ["first executions", (t) => t.first_step_sec],
  ["validation", (t) => t.validation_sec],
  ["other", (t) => t.other_sec],
];
const WIDTH = 760;
const POLL_MS = 30000;

// ------------------------------------------------------------------ formatting

const finite = (v) => typeof v === "number" && Number.isFinite(v);
const fmt = (v, digits = 1) => {
  if (!finite(v)) return "-";
  const shown = Number(v.toFixed(digits)) || 0; // no "-0.0" for a small negative number
  return shown.toLocaleString("en-US", { minimumFractionDigits: digits, maximumFractionDigits: digits });
};
function ms(sec) {
  if (!finite(sec)) return "-";
  const v = 1e3 * sec;
  return `${Math.abs(v) >= 100 ? Math.round(v).toLocaleString("en-US") : String(+v.toPrecision(3))} ms`;
}
const pct = (v) => (finite(v) ? `${(100 * v).toFixed(1)}%` : "-");
// Signed: a worker under the others' median is negative (the others never wait for it).
const signedPct = (v) => (finite(v) ? `${v > 0 ? "+" : ""}${(100 * v).toFixed(1)}%` : "-");

function bytes(n) {
  if (!finite(n)) return "-";
  let value = n;
  for (const unit of ["B", "KiB", "MiB", "GiB"]) {
    if (Math.abs(value) < 1024) return unit === "B" ? `${value.toFixed(0)} B` : `${value.toFixed(1)} ${unit}`;
    value /= 1024;
  }
  return `${value.toFixed(1)} TiB`;
}

// ------------------------------------------------------------------ DOM helpers

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null) continue;
    if (k === "text") node.textContent = v;
    else if (k === "class") node.className = v;
    else node.setAttribute(k, v);
  }
  for (const child of children) if (child) node.append(child);
  return node;
}

function svg(tag, attrs = {}, ...children) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) if (v !== undefined && v !== null) node.setAttribute(k, v);
  for (const child of children) if (child) node.append(child);
  return node;
}

const tip = (text) => svg("title", {}, document.createTextNode(text));

function notesList(lines, cls = "notes") {
  if (!lines || !lines.length) return null;
  const ul = el("ul", { class: cls });
  for (const line of lines) ul.append(el("li", { text: line }));
  return ul;
}

function section(title, id, notes) {
  const box = el("section", { class: "part", "data-part": id });
  box.append(el("h3", { text: title }));
  const list = notesList(notes);
  if (list) box.append(list);
  return box;
}

// ------------------------------------------------------------------ charts

function axisScale(max) {
  if (!(max > 0)) return { max: 1, ticks: [0, 1] };
  const raw = max / 4;
  const mag = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 2.5, 5, 10].map((m) => m * mag).find((s) => s >= raw);
  const top = Math.ceil(max / step) * step;
  const ticks = [];
  for (let t = 0; t <= top + step / 2; t += step) ticks.push(t);
  return { max: top, ticks };
}

function legend(items) {
  const box = el("div", { class: "legend" });
  for (const [name, cls, dashed] of items) {
    const swatch = el("span", { class: `swatch ${cls}${dashed ? " dashed" : ""}` });
    box.append(el("span", { class: "item" }, swatch, document.createTextNode(name)));
  }
  return box;
}

// Stacked bars: one per entry {label, run, parts: {name: value}}; values in `unit` ("ms" from seconds, or "s").
function stackedBars(id, entries, parts, { unit = "ms", height = 200 } = {}) {
  const scale = unit === "ms" ? 1e3 : 1;
  const totals = entries.map((e) => parts.reduce((s, p) => s + (finite(e.parts[p]) ? e.parts[p] : 0), 0) * scale);
  const { max, ticks } = axisScale(Math.max(0, ...totals));
  const left = 48, bottom = 24, top = 18, plotH = height - top - bottom;
  const plotW = WIDTH - left - 8;
  const slot = plotW / Math.max(1, entries.length);
  const barW = Math.max(1, Math.min(48, slot * 0.7));
  const root = svg("svg", { class: "chart", "data-chart": id, "data-bars": entries.length, width: WIDTH, height,
    viewBox: `0 0 ${WIDTH} ${height}` });
  for (const t of ticks) {
    const y = top + plotH - (t / max) * plotH;
    root.append(svg("line", { class: "grid", x1: left, x2: WIDTH - 8, y1: y, y2: y }));
    root.append(svg("text", { class: "tick", x: left - 4, y: y + 3, "text-anchor": "end" }, document.createTextNode(`${+t.toPrecision(3)}`)));
  }
  root.append(svg("text", { class: "unit", x: 4, y: 10 }, document.createTextNode(unit === "ms" ? "ms/step" : "seconds")));
  entries.forEach((e, i) => {
    let y = top + plotH;
    const x = left + i * slot + (slot - barW) / 2;
    const g = svg("g", { "data-run": e.run, "data-label": e.label });
    for (const p of parts) {
      const v = e.parts[p];
      if (!finite(v) || v <= 0) continue;
      const h = ((v * scale) / max) * plotH;
      y -= h;
      g.append(svg("rect", { class: `part-${p.replace(/ /g, "-")}`, x, y, width: barW, height: Math.max(h, 0.5),
        "data-part": p, "data-value": v }, tip(`${e.label}: ${p} ${unit === "ms" ? ms(v) : `${fmt(v, 2)} s`}`)));
    }
    root.append(g);
    if (entries.length <= 24) {
      root.append(svg("text", { class: "label", x: x + barW / 2, y: top + plotH + 14, "text-anchor": "middle" },
        document.createTextNode(e.label)));
    }
  });
  return root;
}

// Lines: [{name, points: [[x, y], ...], dashed}], y formatted by `format`.
function lineChart(id, lines, { format = (v) => `${v}`, height = 220, yLabel = "", xLabel = "step", marks = [] } = {}) {
  const xs = lines.flatMap((l) => l.points.map((p) => p[0]));
  const ys = lines.flatMap((l) => l.points.map((p) => p[1])).filter(finite);
  const { max, ticks } = axisScale(Math.max(0, ...ys, ...marks.map((m) => m.y)));
  const x0 = Math.min(...xs), x1 = Math.max(...xs);
  const left = 64, bottom = 24, top = 18, plotH = height - top - bottom, plotW = WIDTH - left - 12;
  const px = (x) => left + (x1 > x0 ? ((x - x0) / (x1 - x0)) * plotW : plotW / 2);
  const py = (y) => top + plotH - (y / max) * plotH;
  const root = svg("svg", { class: "chart", "data-chart": id, "data-lines": lines.length, width: WIDTH, height,
    viewBox: `0 0 ${WIDTH} ${height}` });
  for (const t of ticks) {
    root.append(svg("line", { class: "grid", x1: left, x2: WIDTH - 12, y1: py(t), y2: py(t) }));
    root.append(svg("text", { class: "tick", x: left - 4, y: py(t) + 3, "text-anchor": "end" }, document.createTextNode(format(t))));
  }
  root.append(svg("text", { class: "tick", x: left, y: height - 8 }, document.createTextNode(`${xLabel} ${x0}`)));
  root.append(svg("text", { class: "tick", x: WIDTH - 12, y: height - 8, "text-anchor": "end" }, document.createTextNode(`${x1}`)));
  if (yLabel) root.append(svg("text", { class: "unit", x: 4, y: 10 }, document.createTextNode(yLabel)));
  for (const m of marks) {
    root.append(svg("line", { class: "mark", x1: left, x2: WIDTH - 12, y1: py(m.y), y2: py(m.y) }, tip(m.name)));
  }
  lines.forEach((line, i) => {
    const pts = line.points.filter((p) => finite(p[1]));
    if (!pts.length) return;
    const d = pts.map((p, j) => `${j ? "L" : "M"}${px(p[0]).toFixed(1)},${py(p[1]).toFixed(1)}`).join("");
    root.append(svg("path", { class: `line c${i % 8}${line.dashed ? " dashed" : ""}`, d, "data-name": line.name,
      "data-points": pts.length }, tip(line.name)));
    if (pts.length === 1) root.append(svg("circle", { class: `dot c${i % 8}`, cx: px(pts[0][0]), cy: py(pts[0][1]), r: 3 }));
  });
  return root;
}

// ------------------------------------------------------------------ headline

function cell(key, value, text) {
  return el("td", { "data-key": key, "data-value": finite(value) ? value : "", text });
}

function peakAllocator(r) {
  const peaks = Object.entries(r.memory.allocator_peak_bytes || {});
  if (!peaks.length) return [null, null];
  return peaks.reduce((a, b) => (b[1] > a[1] ? b : a));
}

function mfuText(t) {
  const wall = t.mfu ? pct(t.mfu.mean) : null;
  if (!t.steady_mfu) return wall === null ? "-" : `wall-clock ${wall}`;
  return `steady ${pct(t.steady_mfu.mean)}${wall === null ? "" : ` (wall-clock ${wall})`}`;
}

function headlineRow(r) {
  const t = r.throughput || {};
  const [device, peak] = peakAllocator(r);
  const mean = (k) => (t[k] ? t[k].mean : null);
  const mfu = t.steady_mfu ? t.steady_mfu.mean : mean("mfu");
  const row = el("tr", { "data-run": r.run },
    el("td", { text: r.label }),
    cell("throughput.samples_per_sec.mean", mean("samples_per_sec"), fmt(mean("samples_per_sec"))),
    cell("throughput.steady_samples_per_sec.mean", mean("steady_samples_per_sec"), fmt(mean("steady_samples_per_sec"))),
    cell("throughput.tflops_per_sec.mean", mean("tflops_per_sec"), fmt(mean("tflops_per_sec"), 3)),
    cell(t.steady_mfu ? "throughput.steady_mfu.mean" : "throughput.mfu.mean", mfu, mfuText(t)),
    cell(device ? `memory.allocator_peak_bytes.${device}` : "memory.allocator_peak_bytes", peak,
      peak === null ? "-" : `${bytes(peak)} (${device})`),
    cell("memory.host_rss_peak_bytes", r.memory.host_rss_peak_bytes, bytes(r.memory.host_rss_peak_bytes)),
    cell("steps", r.steps, `${r.steps}`));
  return row;
}

// The runs `keras-gpu report`'s tables list (view.shown_runs: every run up to 16, else the chief, the stragglers
// and the slowest workers), in the report's order; the others behind a toggle.
function headline(report, view, notes) {
  const box = section("Headline", "headline", notes);
  const head = el("tr", {}, ...["worker", "samples/s", "steady samples/s", "TFLOP/s", "MFU", "allocator peak",
    "host RSS peak", "last step"].map((h) => el("th", { text: h })));
  const table = el("table", { class: "numbers", "data-table": "headline" }, el("thead", {}, head));
  const body = el("tbody");
  const shown = new Set(view.shown_runs || report.runs.map((r) => r.run));
  report.runs.filter((r) => shown.has(r.run)).forEach((r) => body.append(headlineRow(r)));
  table.append(body);
  box.append(table);
  const rest = report.runs.filter((r) => !shown.has(r.run));
  if (rest.length) {
    const more = el("details", { class: "more" }, el("summary", { text: `the other ${rest.length.toLocaleString("en-US")} `
      + "runs (listed above: the chief, the stragglers and the slowest workers, as keras-gpu report lists them)" }));
    more.addEventListener("toggle", () => {
      if (!more.open || more.dataset.drawn) return;
      more.dataset.drawn = "1";
      const t = el("table", { class: "numbers", "data-table": "headline-rest" }, el("thead", {}, head.cloneNode(true)));
      const b = el("tbody");
      rest.forEach((r) => b.append(headlineRow(r)));
      t.append(b);
      more.append(t);
    });
    box.append(more);
  }
  return box;
}

// ------------------------------------------------------------------ where the time goes

function timeSection(report, view, notes, kernelNotes) {
  const box = section("Where the time goes", "time", notes);
  const withSteps = report.runs.filter((r) => r.step_time);
  if (withSteps.length) {
    box.append(el("h4", { text: "the step's parts per worker, over the fit's traces (ms per step)" }));
    const entries = withSteps.map((r) => ({ label: r.label, run: r.run,
      parts: Object.fromEntries(PARTS.map((p) => [p, r.step_time[`${p}_sec`]])) }));
    box.append(legend(PARTS.map((p) => [p, `part-${p}`])));
    box.append(stackedBars("time-per-worker", entries, PARTS));
  }
  const withEpochs = report.runs.filter((r) => r.time);
  if (withEpochs.length) {
    box.append(el("h4", { text: "the epochs' time per worker (seconds, all epochs)" }));
    const names = EPOCH_PARTS.map(([n]) => n);
    const entries = withEpochs.map((r) => ({ label: r.label, run: r.run,
      parts: Object.fromEntries(EPOCH_PARTS.map(([n, f]) => [n, f(r.time)])) }));
    box.append(legend(names.map((n) => [n, `part-${n.replace(/ /g, "-")}`])));
    box.append(stackedBars("epoch-time", entries, names, { unit: "s", height: 180 }));
  }
  const runs = report.runs.filter((r) => view.series.runs[r.run] && view.series.runs[r.run].steps);
  if (runs.length) {
    box.append(el("h4", { text: "each logged breakdown of one worker (ms per step, by step)" }));
    const pick = runPicker(runs, (run) => {
      const s = view.series.runs[run].steps;
      const entries = s.steps.map((step, i) => ({ label: `${step}`, run,
        parts: Object.fromEntries(PARTS.map((p) => [p, s.parts[p][i]])) }));
      return stackedBars("time-per-breakdown", entries, PARTS, { height: 180 });
    });
    box.append(pick);
  }
  const kbox = section("Kernel classes", "kernels", kernelNotes);
  for (const r of report.runs) {
    const classes = r.step_time ? Object.entries(r.step_time.kernel_classes || {}) : [];
    if (!classes.length) continue;
    kbox.append(el("h4", { text: `${r.label}: kernel time per step by class` }));
    kbox.append(kernelBars(r, classes));
  }
  return [box, kbox];
}

function kernelBars(r, classes) {
  const rowH = 20, left = 120, height = classes.length * rowH + 8;
  const max = Math.max(...classes.map(([, k]) => k.sec_per_step));
  const root = svg("svg", { class: "chart", "data-chart": "kernel-classes", "data-run": r.run, width: WIDTH, height,
    viewBox: `0 0 ${WIDTH} ${height}` });
  classes.forEach(([name, k], i) => {
    const w = max > 0 ? (k.sec_per_step / max) * (WIDTH - left - 160) : 0;
    const y = 4 + i * rowH;
    root.append(svg("text", { class: "label", x: left - 6, y: y + 13, "text-anchor": "end" }, document.createTextNode(name)));
    root.append(svg("rect", { class: "kernel", x: left, y: y + 2, width: Math.max(w, 0.5), height: rowH - 6,
      "data-class": name, "data-value": k.sec_per_step }, tip(`${name}: ${ms(k.sec_per_step)}`)));
    root.append(svg("text", { class: "tick", x: left + w + 6, y: y + 13 },
      document.createTextNode(`${ms(k.sec_per_step)} (${(100 * k.share).toFixed(0)}%)`)));
  });
  return root;
}

function runPicker(runs, draw) {
  const box = el("div", { class: "picker" });
  const select = el("select", { "aria-label": "worker" });
  for (const r of runs) select.append(el("option", { value: r.run, text: r.label }));
  const holder = el("div");
  const show = () => holder.replaceChildren(draw(select.value));
  select.addEventListener("change", show);
  if (runs.length > 1) box.append(el("label", { text: "worker " }, select));
  box.append(holder);
  show();
  return box;
}

// ------------------------------------------------------------------ the cluster
// The one place that reads the report's cluster part and the chief's gathers: what the job-wide view shows.

const PART_PHRASE = { compute: "compute", input: "input wait", host: "host time between steps" };

function workerList(ks) {
  if (!ks.length) return "none";
  if (ks.length === 1) return `worker ${ks[0]}`;
  return `workers ${ks.slice(0, -1).join(", ")} and ${ks[ks.length - 1]}`;
}

// A part of a sentence carrying one field of the report's `cluster`: its key, and its value as JSON.
const said = (key, value, text) => el("span", { class: "fact", "data-key": key, "data-json": JSON.stringify(value ?? null), text });
const spreads = (v) => (finite(v) ? fmt(v, 2) : "-");

function clusterSection(report, view, notes) {
  const box = section("The cluster", "cluster", notes);
  const verdict = report.cluster;
  const gathers = view.series.cluster;
  if (!verdict && !gathers) return box;
  if (verdict) {
    box.append(el("p", { class: `verdict${verdict.straggler === null ? "" : " straggler"}`, "data-verdict": verdict.sentence,
      text: `${verdict.sentence} (from ${verdict.gathers} gather(s))` }));
    box.append(verdictFacts(verdict, gathers ? gathers.slowdown_named : null));
    if (verdict.slowest_workers.length) box.append(...slowestTable(verdict));
  }
  if (!gathers) return box;
  const scoreLines = [{ name: "the slowest worker's score", points: gathers.steps.map((s, i) => [s, gathers.slowest_score[i]]) }];
  const st = gathers.standing;
  if (st) { // the worker the report ranks first over the fit (the straggler, where one is named)
    const first = st.workers[0];
    const who = verdict && first === verdict.straggler ? "the straggler" : "the first of the slowest workers";
    scoreLines.push({ name: `worker ${first}'s score (${who})`, points: st.gathers.map((g, i) => [g, st.score[0][i]]) });
  }
  scoreLines.push({ name: "threshold", points: gathers.steps.map((s, i) => [s, gathers.threshold[i]]), dashed: true });
  const drawn = scoreLines.filter((l) => l.points.some((p) => finite(p[1])));
  if (drawn.length > 1 || (drawn.length && !drawn[0].dashed)) {
    box.append(el("h4", { text: "scores at each gather against the rule's threshold (spreads: the excess over the others' "
      + "median, in their spread)" }));
    box.append(legend(drawn.map((l, i) => [l.name, `c${i % 8}`, l.dashed])));
    box.append(lineChart("cluster-score", drawn, { format: (v) => `${+v.toPrecision(3)}`, yLabel: "spreads", height: 160 }));
  }
  if (gathers.standing) box.append(...standingGrid(gathers.standing, verdict));
  const m = gathers.matrix;
  if (m) {
    const what = m.shown === "all" ? `all ${m.workers} workers`
      : `the ${m.rows.length} workers the report names or ranks slowest, of ${m.workers.toLocaleString("en-US")}`;
    box.append(el("h4", { text: `busy time per step, workers x gathers: ${what}` }));
    box.append(el("p", { class: "note", text: "each cell: the worker's input, compute and host time per step (its waits for the "
      + "others left out), coloured against the gather's median: blue below, orange to red from 1.1x to 1.3x and above." }));
    box.append(heatmap(m));
    box.append(ownBest(m));
  } else {
    box.append(el("h4", { text: "busy time per step across the workers at each gather: min, median, max (ms)" }));
    const b = gathers.spreads.busy;
    const line = (stat) => ({ name: `busy ${stat}`, points: gathers.steps.map((s, i) => [s, finite(b[stat][i]) ? 1e3 * b[stat][i] : null]),
      dashed: stat !== "median" });
    const lines = ["min", "median", "max"].map(line);
    box.append(legend(lines.map((l, i) => [l.name, `c${i % 8}`, l.dashed])));
    box.append(lineChart("cluster-busy", lines, { format: (v) => `${+v.toPrecision(3)}`, yLabel: "ms/step", xLabel: "step",
      height: 180 }));
  }
  const slow = [
    { name: "the most slowed worker", points: gathers.steps.map((s, i) => [s, gathers.slowdown[i]]) },
    { name: "median over the workers (the cluster as a whole)", points: gathers.steps.map((s, i) => [s, gathers.slowdown_median[i]]), dashed: true },
  ].filter((l) => l.points.some((p) => finite(p[1])));
  if (slow.length) {
    box.append(el("h4", { text: "slowdown against the workers' own best window" }));
    box.append(legend(slow.map((l, i) => [l.name, `c${i % 8}`, l.dashed])));
    box.append(lineChart("cluster-slowdown", slow, { format: (v) => `${+v.toPrecision(3)}x`, height: 160,
      marks: [{ y: gathers.slowdown_named, name: `named from ${gathers.slowdown_named}x` }] }));
  }
  return box;
}

// The verdict's facts, each as the report's `cluster` gives it.
function verdictFacts(c, named) {
  const rows = [];
  const row = (label, ...parts) => rows.push(el("tr", {}, el("th", { text: label }), el("td", {}, ...parts)));
  const t = (text) => document.createTextNode(text);
  if (c.straggler !== null) {
    row("straggler", said("straggler", c.straggler, `worker ${c.straggler}`), t(", standing out in "),
      said("clear_gathers", c.clear_gathers, `${c.clear_gathers}`), t(" of "), said("gathers", c.gathers, `${c.gathers}`), t(" gathers"));
    if (c.part !== null) {
      row("its part", said("part", c.part, PART_PHRASE[c.part] || c.part), t(": "), said("part_sec", c.part_sec, ms(c.part_sec)),
        t(" per step against the others' median of "), said("part_median_sec", c.part_median_sec, ms(c.part_median_sec)));
    }
    row("the others wait for it", said("imbalance", c.imbalance, pct(c.imbalance)), t(" of each step"));
  } else {
    row("straggler", said("straggler", null, "none named"), t(" (no worker stood out in more than half of the "),
      said("gathers", c.gathers, `${c.gathers}`), t(" gathers)"));
    row("imbalance", said("imbalance", c.imbalance, pct(c.imbalance)), t(" of each step (the gathers' slowest workers, median)"));
  }
  row("also standing out in most gathers", said("more_stragglers", c.more_stragglers, workerList(c.more_stragglers)));
  if (c.slowed_worker !== null) {
    row("slowed against its own best", said("slowed_worker", c.slowed_worker, `worker ${c.slowed_worker}`), t(", "),
      said("slowdown", c.slowdown, `${fmt(c.slowdown, 2)}x`), t(" its best window"));
  } else {
    row("slowed against its own best", said("slowed_worker", null, "no worker"),
      t(named ? ` (none reached ${named}x its own best in two gathers)` : ""));
  }
  row("the cluster as a whole", c.cluster_slowdown === null
    ? said("cluster_slowdown", null, named ? `not slowed (the workers' median ratio to their own best reached ${named}x in `
      + "fewer than two gathers)" : "not slowed")
    : said("cluster_slowdown", c.cluster_slowdown, `slowed ${fmt(c.cluster_slowdown, 2)}x against the workers' own best windows (median)`));
  const soFar = c.straggler_so_far === null ? "not logged" : c.straggler_so_far < 0 ? "none" : `worker ${c.straggler_so_far}`;
  row("at the last gather", t("the slowest worker's score "), said("slowest_score", c.slowest_score, spreads(c.slowest_score)),
    t(" against the threshold "), said("threshold", c.threshold, spreads(c.threshold)), t(" spreads; "),
    said("workers_out", c.workers_out, finite(c.workers_out) ? fmt(c.workers_out, 0) : "-"), t(" standing out of "),
    said("workers_reporting", c.workers_reporting, finite(c.workers_reporting) ? fmt(c.workers_reporting, 0) : "-"),
    t(" reporting; the straggler so far: "), said("straggler_so_far", c.straggler_so_far, soFar));
  return el("table", { class: "facts", "data-table": "verdict" }, el("tbody", {}, ...rows));
}

// The report's slowest workers over the fit's gathers, every field as `keras-gpu report --json` gives it.
function slowestTable(c) {
  const head = el("tr", {}, ...["worker", "stood out", "listed", "score (spreads)", "over median", "part"].map((h) => el("th", { text: h })));
  const body = el("tbody");
  for (const s of c.slowest_workers) {
    const jcell = (key, text) => el("td", { "data-key": key, "data-json": JSON.stringify(s[key] ?? null), text });
    body.append(el("tr", { "data-worker": s.worker, class: s.worker === c.straggler ? "straggler" : null },
      jcell("worker", `worker ${s.worker}${s.worker === c.straggler ? " (straggler)" : ""}`),
      jcell("clear_gathers", `${s.clear_gathers} of ${c.gathers}`),
      jcell("listed_gathers", `${s.listed_gathers} of ${c.gathers}`),
      jcell("score", finite(s.score) ? fmt(s.score, 1) : "-"),
      jcell("imbalance", signedPct(s.imbalance)),
      jcell("part", s.part || "-")));
  }
  return [
    el("h4", { text: `the slowest workers over the ${c.gathers} gathers: stood out (past the threshold, the others waiting for it `
      + "over 5% of each step), listed among a gather's highest scores" }),
    el("table", { class: "numbers", "data-table": "slowest-workers" }, el("thead", {}, head), body),
  ];
}

function standingColor(score, out, threshold) {
  if (out === null) return "#f2f2f2"; // not among the gather's highest scores
  if (out) return "#e65100";
  if (!finite(score) || score <= 0) return "#e3f2fd";
  const t = Math.min(1, score / (finite(threshold) && threshold > 0 ? threshold : 4));
  return `hsl(35, ${50 + 40 * t}%, ${94 - 26 * t}%)`;
}

// The report's slowest workers at each gather, from the chief's tables: a few rows at any number of workers.
function standingGrid(st, c) {
  const left = 110, top = 4, rowH = 18;
  const cellW = Math.max(1, (WIDTH - left - 8) / st.gathers.length);
  const height = top + st.workers.length * rowH + 22;
  const threshold = c && finite(c.threshold) ? c.threshold : null;
  const root = svg("svg", { class: "chart heatmap", "data-chart": "cluster-standing", "data-rows": st.workers.length,
    "data-gathers": st.gathers.length, width: WIDTH, height, viewBox: `0 0 ${WIDTH} ${height}` });
  st.workers.forEach((k, r) => {
    const y = top + r * rowH;
    root.append(svg("text", { class: "label", x: left - 6, y: y + rowH / 2 + 4, "text-anchor": "end" }, document.createTextNode(`worker ${k}`)));
    st.gathers.forEach((g, i) => {
      const score = st.score[r][i], out = st.out[r][i];
      const what = out === null ? "not among the gather's highest scores"
        : `score ${finite(score) ? fmt(score, 1) : "-"} spreads${out ? ", stands out" : ""}${st.part[r][i] ? `, ${st.part[r][i]}` : ""}`;
      root.append(svg("rect", { class: "cell", x: left + i * cellW, y, width: Math.max(cellW - 0.5, 0.5), height: rowH - 1,
        fill: standingColor(score, out, threshold), "data-worker": k, "data-gather": g, "data-out": out === null ? "" : `${out}`,
        "data-value": finite(score) ? score : "" }, tip(`worker ${k}, step ${g}: ${what}`)));
    });
  });
  root.append(svg("text", { class: "tick", x: left, y: height - 6 }, document.createTextNode(`step ${st.gathers[0]}`)));
  root.append(svg("text", { class: "tick", x: WIDTH - 8, y: height - 6, "text-anchor": "end" },
    document.createTextNode(`step ${st.gathers[st.gathers.length - 1]}`)));
  return [
    el("h4", { text: "the slowest workers at each gather, from the chief's tables" }),
    legend([["stood out", "st-out"], ["listed: the darker, the nearer the threshold", "st-listed"],
      ["listed, below the others' median", "st-below"], ["not listed", "st-none"]]),
    root,
  ];
}

function heatColor(ratio) {
  if (!finite(ratio)) return "#e0e0e0";
  const t = Math.max(-1, Math.min(1, (ratio - 1) / 0.3)); // 0.7x .. 1.3x of the gather's median
  if (t >= 0) return `hsl(${40 - 40 * t}, ${60 + 30 * t}%, ${92 - 42 * t}%)`;
  return `hsl(210, ${40 - 20 * t}%, ${92 + 18 * t}%)`;
}

function heatmap(m) {
  const left = 90, top = 4, rowH = Math.max(8, Math.min(22, 360 / m.rows.length));
  const cellW = Math.max(1, (WIDTH - left - 8) / m.gathers.length);
  const height = top + m.rows.length * rowH + 22;
  const root = svg("svg", { class: "chart heatmap", "data-chart": "cluster-heatmap", "data-rows": m.rows.length,
    "data-gathers": m.gathers.length, width: WIDTH, height, viewBox: `0 0 ${WIDTH} ${height}` });
  m.rows.forEach((row, r) => {
    const y = top + r * rowH;
    root.append(svg("text", { class: "label", x: left - 6, y: y + rowH / 2 + 4, "text-anchor": "end" }, document.createTextNode(row.label)));
    row.busy.forEach((v, g) => {
      root.append(svg("rect", { class: "cell", x: left + g * cellW, y, width: Math.max(cellW - 0.5, 0.5), height: rowH - 1,
        fill: heatColor(row.ratio[g]), "data-worker": row.worker, "data-gather": m.gathers[g], "data-value": finite(v) ? v : "" },
      tip(`${row.label}, step ${m.gathers[g]}: ${finite(v) ? ms(v) : "not measured"}${finite(row.ratio[g]) ? `, ${row.ratio[g].toFixed(2)}x the median` : ""}`)));
    });
  });
  root.append(svg("text", { class: "tick", x: left, y: height - 6 }, document.createTextNode(`step ${m.gathers[0]}`)));
  root.append(svg("text", { class: "tick", x: WIDTH - 8, y: height - 6, "text-anchor": "end" },
    document.createTextNode(`step ${m.gathers[m.gathers.length - 1]}`)));
  return root;
}

function ownBest(m) {
  const head = el("tr", {}, ...["worker", "best busy", "last busy", "largest slowdown vs its best", "median vs the others"]
    .map((h) => el("th", { text: h })));
  const body = el("tbody");
  for (const row of m.rows) {
    body.append(el("tr", { "data-worker": row.worker },
      el("td", { text: row.label }),
      cell("best_sec", row.best_sec, ms(row.best_sec)),
      cell("last_sec", row.last_sec, ms(row.last_sec)),
      cell("slowdown", row.slowdown, `${fmt(row.slowdown, 2)}x`),
      cell("score", row.score, finite(row.score) ? `${fmt(row.score, 2)}x` : "-")));
  }
  return el("table", { class: "numbers", "data-table": "own-best" }, el("thead", {}, head), body);
}

// ------------------------------------------------------------------ memory, hints, scale, tune

function memorySection(report, view, notes) {
  const box = section("Memory per device over time", "memory", notes);
  const runs = report.runs.filter((r) => (view.series.runs[r.run] || {}).memory && view.series.runs[r.run].memory.length);
  if (!runs.length) return box;
  box.append(runPicker(runs, (run) => {
    const all = view.series.runs[run].memory;
    const wrap = el("div");
    const groups = [...new Set(all.map((l) => l.group))].filter((g) => g !== "host");
    const draw = (group) => {
      // Many devices: one device at a time (with the host's RSS), so that each line stays readable.
      const lines = groups.length > 2 && group ? all.filter((l) => l.group === group || l.group === "host") : all;
      return [legend(lines.map((l, i) => [l.name, `c${i % 8}`, l.dashed])), lineChart("memory", lines, { format: bytes })];
    };
    if (groups.length > 2) {
      const select = el("select", { "aria-label": "device" });
      for (const g of groups) select.append(el("option", { value: g, text: g }));
      const holder = el("div");
      const show = () => holder.replaceChildren(...draw(select.value));
      select.addEventListener("change", show);
      wrap.append(el("label", { class: "device", text: `${groups.length} devices: ` }, select), holder);
      show();
    } else {
      wrap.append(...draw(null));
    }
    return wrap;
  }));
  return box;
}

function hintsSection(report, notes) {
  const box = section("Hints", "hints", notes);
  const ul = el("ul", { class: "hints" });
  for (const h of report.hints || []) ul.append(el("li", { text: h }));
  if (ul.childElementCount) box.append(ul);
  return box;
}

function scaleSection(report, notes) {
  const box = section("Scaling (keras-gpu scale)", "scale", notes);
  const rows = report.scale;
  if (!rows || !rows.length) return box;
  const total = (r) => r.workers * r.replicas;
  const x0 = total(rows[0]);
  const pts = rows.filter((r) => finite(r.speedup)).map((r) => [total(r), r.speedup]);
  const ideal = rows.map((r) => [total(r), total(r) / x0]);
  box.append(legend([["measured speed-up", "c0"], ["linear", "c1", true]]));
  box.append(lineChart("scale-speedup", [{ name: "measured speed-up", points: pts }, { name: "linear", points: ideal, dashed: true }],
    { format: (v) => `${+v.toPrecision(3)}x`, xLabel: "replicas" }));
  const head = el("tr", {}, ...["devices", "samples/s", "speed-up", "efficiency", "cause"].map((h) => el("th", { text: h })));
  const body = el("tbody");
  for (const r of rows) {
    body.append(el("tr", {}, el("td", { text: r.devices || `${r.workers} x ${r.replicas}` }),
      cell("samples_per_sec", r.samples_per_sec, fmt(r.samples_per_sec, 0)), cell("speedup", r.speedup, `${fmt(r.speedup, 2)}x`),
      cell("efficiency", r.efficiency, fmt(r.efficiency, 2)), el("td", { class: "cause", text: r.cause || "" })));
  }
  box.append(el("table", { class: "numbers", "data-table": "scale" }, el("thead", {}, head), body));
  return box;
}

function tuneSection(report, notes) {
  const box = section("Fixes measured (keras-gpu tune)", "tune", notes);
  const study = report.tune;
  if (!study) return box;
  const head = el("tr", {}, ...["change", "samples/s", "speed-up", "moved (ms/step)", "peak memory", "losses"].map((h) => el("th", { text: h })));
  const body = el("tbody");
  for (const r of study.rows) {
    const failed = r.status === "failed";
    body.append(el("tr", { class: r.helps === 1 ? "helps" : r.helps === -1 ? "hurts" : "" },
      el("td", { text: r.change }),
      cell("samples_per_sec", r.samples_per_sec, failed ? "failed" : fmt(r.samples_per_sec, 0)),
      cell("speedup", r.speedup, finite(r.speedup) ? `${fmt(r.speedup, 2)}x` : "-"),
      el("td", { text: r.moved || "-" }),
      cell("peak_memory_bytes", r.peak_memory_bytes, bytes(r.peak_memory_bytes)),
      el("td", { text: r.losses || "-" })));
  }
  box.append(el("table", { class: "numbers", "data-table": "tune" }, el("thead", {}, head), body));
  for (const s of study.skipped || []) box.append(el("p", { class: "note", text: `skipped ${s}` }));
  box.append(el("p", { class: "verdict", text: study.verdict }));
  return box;
}

// ------------------------------------------------------------------ a log directory

async function getJson(path) {
  const resp = await fetch(path);
  if (!resp.ok) throw new Error(`${path}: ${resp.status} ${await resp.text()}`);
  return resp.json();
}

async function drawLogDir(box, name) {
  box.dataset.state = "loading";
  const q = `log_dir=${encodeURIComponent(name)}`;
  const [report, view] = await Promise.all([getJson(`report?${q}`), getJson(`view?${q}`)]);
  const body = el("div", { class: "body" });
  const n = view.notes;
  const runNotes = notesList(n.runs, "notes runs");
  if (runNotes) body.append(runNotes);
  if (report.runs && report.runs.length) {
    body.append(headline(report, view, n.headline));
    body.append(...timeSection(report, view, n.time, n.kernels));
    body.append(clusterSection(report, view, n.cluster));
    body.append(memorySection(report, view, n.memory));
    body.append(hintsSection(report, n.hints));
  } else if (!report.scale && !report.tune) {
    body.append(el("p", { class: "notes", text: `No keras-gpu data under ${name} yet.` }));
  }
  if (report.scale) body.append(scaleSection(report, []));
  if (report.tune) body.append(tuneSection(report, []));
  box.querySelector(".body")?.remove();
  box.append(body);
  box.dataset.version = view.version;
  box.dataset.runs = (report.runs || []).length;
  box.dataset.state = "drawn";
}

function logDirBox(entry, root, open) {
  const title = entry.name === "." ? root || "." : entry.name;
  const box = el("details", { class: "log-dir", "data-log-dir": entry.name });
  box.append(el("summary", {}, el("h2", { text: title })));
  box.open = open;
  const draw = () => drawLogDir(box, entry.name).catch((err) => {
    box.dataset.state = "error";
    box.append(el("p", { class: "error", text: `${err}` }));
  }).finally(settle);
  box.addEventListener("toggle", () => { if (box.open && !box.dataset.state) draw(); });
  box.draw = draw;
  return box;
}

function settle() {
  const boxes = [...document.querySelectorAll(".log-dir")];
  const busy = boxes.some((b) => b.open && b.dataset.state === "loading");
  if (!busy) {
    document.body.dataset.state = boxes.some((b) => b.dataset.state === "error") ? "error" : "drawn";
    window.kerasGpuDrawnAt = performance.now();
  }
}

async function poll(main) {
  let listing;
  try {
    listing = await getJson("log_dirs");
  } catch (err) {
    return;
  }
  for (const entry of listing.log_dirs) {
    const box = main.querySelector(`.log-dir[data-log-dir="${CSS.escape(entry.name)}"]`);
    if (!box) {
      const added = logDirBox(entry, listing.root, false);
      main.append(added);
    } else if (box.dataset.state === "drawn" && box.dataset.version !== entry.version) {
      box.draw();
    }
  }
}

export async function render() {
  document.head.append(el("link", { rel: "stylesheet", href: "style.css" }));
  document.body.dataset.state = "loading";
  const main = el("main", { class: "keras-gpu" });
  document.body.append(main);
  let listing;
  try {
    listing = await getJson("log_dirs");
  } catch (err) {
    main.append(el("p", { class: "error", text: `${err}` }));
    document.body.dataset.state = "error";
    return;
  }
  if (!listing.log_dirs.length) {
    main.append(el("p", { class: "notes", text: listing.why_none }));
    document.body.dataset.state = "drawn";
    return;
  }
  const open = listing.log_dirs.length <= 4;
  const boxes = listing.log_dirs.map((entry, i) => logDirBox(entry, listing.root, open || i === 0));
  main.append(...boxes);
  await Promise.all(boxes.filter((b) => b.open).map((b) => b.draw()));
  setInterval(() => poll(main), POLL_MS);
}
