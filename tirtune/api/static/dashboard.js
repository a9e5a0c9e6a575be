// tirtune dashboard: polls the JSON API and draws with the vendored Chart.js (no network beyond
// this server). Text from the server is only ever set with textContent, never parsed as HTML.
"use strict";

const POLL_MS = Number(new URLSearchParams(location.search).get("poll")) || 2000;
const OUTCOME_COLORS = {
  OK: "#2e9d57", INVALID: "#9aa0a6", COMPILE_ERROR: "#e8710a", LAUNCH_ERROR: "#d93025",
  TIMEOUT: "#8e44ad", WRONG_RESULT: "#b0196e",
};
const STATE_COLORS = { QUEUED: "#9aa0a6", RUNNING: "#1a73e8", DONE: "#2e9d57", FAILED: "#d93025", CANCELLED: "#656d76" };
const BEST_COLOR = "#1a73e8";
const CUBLAS_COLOR = "#1f2328";

const state = { choice: null, userChose: false, charts: {}, sliceCharts: {} };

// --- small helpers --------------------------------------------------------------------------

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") node.className = v;
    else if (k === "style") node.style.cssText = v;
    else node.setAttribute(k, v);
  }
  for (const c of children) node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return node;
}

const fmt = (x, digits = 1) => (x === null || x === undefined ? "–" : Number(x).toFixed(digits));
const ratio = (x) => (x === null || x === undefined ? "–" : `${Number(x).toFixed(3)}×`);
const spread = (lo, hi) => (lo === null || lo === undefined || hi === null || hi === undefined
  ? "–" : `${Number(lo).toFixed(3)}–${Number(hi).toFixed(3)}`);
const badge = (text, color) => el("span", { class: "badge", style: `background:${color}` }, text);
// A problem is its shape, dtype and fused epilogue ("none" for a plain GEMM): a fused problem's
// figures are its own, so every label that names a problem names its epilogue when there is one.
const problemText = (shape, dtype, epilogue) => `${shape} ${dtype}${epilogue && epilogue !== "none" ? ` + ${epilogue}` : ""}`;
// "+" in a query string reads as a space: the epilogue is always percent-encoded.
const epilogueQuery = (epilogue) => `epilogue=${encodeURIComponent(epilogue || "none")}`;

async function getJson(path) {
  const response = await fetch(path, { headers: { Accept: "application/json" } });
  const body = await response.json();
  if (!response.ok) {
    const error = new Error(body?.error?.message || `${response.status} on ${path}`);
    error.status = response.status;
    throw error;
  }
  return body;
}

function setStatus(text, isError = false) {
  const node = document.getElementById("status");
  node.textContent = text;
  node.classList.toggle("error", isError);
}

// --- jobs and the selection ---------------------------------------------------------------------

function renderJobs(jobs) {
  const body = document.querySelector("#jobs tbody");
  body.replaceChildren(...jobs.map(jobRow));
  document.getElementById("jobs-empty").hidden = jobs.length > 0;
}

// A job's best is named by its re-measured figures once it has them (tirtune.db.best), else by its trial's.
function jobBest(job) {
  const again = job.best?.remeasured;
  if (again && again.outcome === "OK") return { tflops: again.tflops, ratio: again.ratio, how: "re-measured" };
  return job.best ? { tflops: job.best.tflops, ratio: job.best.ratio, how: "trial" } : null;
}

function jobRow(job) {
  const pct = Math.round(job.progress * 100);
  const bar = el("div", { class: "progress" }, el("div", { style: `width:${pct}%` }));
  const best = jobBest(job);
  const source = job.best?.provenance?.source === "replay" ? " (replayed)" : "";
  const row = el("tr", { "data-job-id": job.id, "data-state": job.state },
    el("td", {}, `#${job.id}`),
    el("td", {}, job.shape),
    el("td", {}, job.problem.dtype),
    el("td", { "data-epilogue": job.problem.epilogue }, job.problem.epilogue),
    el("td", {}, badge(job.state, STATE_COLORS[job.state] || "#656d76")),
    el("td", {}, bar, el("span", { class: "progress-label" }, `${job.trials_done}/${job.max_trials} trials`)),
    el("td", { class: "num", "data-best-ratio": best?.ratio ?? "" }, best ? `${ratio(best.ratio)} ${best.how}`
      : job.state === "FAILED" && job.message ? el("span", { class: "why", title: job.message }, job.message) : "–"),
    el("td", { class: "num" }, fmt(best?.tflops)),
    el("td", {}, (job.best?.provenance?.gpu_name || "") + source),
    el("td", {}, new Date(job.created_at).toLocaleString()));
  if (state.choice === `job:${job.id}`) row.classList.add("selected");
  row.addEventListener("click", () => choose(`job:${job.id}`));
  return row;
}

function renderChoices(jobs, studies) {
  const select = document.getElementById("study-select");
  const options = [
    ...jobs.map((j) => [`job:${j.id}`, `job #${j.id} · ${problemText(j.shape, j.problem.dtype, j.problem.epilogue)}`]),
    ...studies.map((s) => [`problem:${s.shape}:${s.dtype}:${s.epilogue}`,
      `all jobs · ${problemText(s.shape, s.dtype, s.epilogue)}`]),
  ];
  if (!state.userChose || !options.some(([value]) => value === state.choice)) {
    state.choice = options.length ? options[0][0] : null;
  }
  select.replaceChildren(...options.map(([value, label]) => el("option", { value }, label)));
  if (state.choice) select.value = state.choice;
}

function choose(value) {
  state.choice = value;
  state.userChose = true;
  refresh();
}

function summaryPath(choice, jobs) {
  const [kind, a, b, c] = choice.split(":");
  if (kind === "problem") return `/studies/${a}/${b}/summary?${epilogueQuery(c)}`;
  const job = jobs.find((j) => String(j.id) === a);
  return job ? `/studies/${job.shape}/${job.problem.dtype}/summary?${epilogueQuery(job.problem.epilogue)}&job_id=${job.id}`
    : null;
}

// --- the study ------------------------------------------------------------------------------------

function renderStudy(summary, title) {
  document.getElementById("study-title").textContent = title;
  const trials = summary ? summary.trials : [];
  document.body.dataset.trials = String(trials.length);
  document.getElementById("study-empty").hidden = trials.length > 0;
  renderCards(summary);
  drawTrials(summary);
  drawImportance(summary);
  drawSlices(summary);
  renderTop(summary);
  renderFailures(summary);
}

// The best is the summary's `best`: the answer GET /best gives for these rows (same ranking, same figures).
// Its ratio, TFLOP/s and cuBLAS TFLOP/s come from one run (its re-measurement when confirmed, else its
// trial), so on the cards TFLOP/s / cuBLAS TFLOP/s is the ratio. The chart's cuBLAS line is another
// figure, the median over the trials' runs, and says so.
function renderCards(summary) {
  const cards = document.getElementById("cards");
  const note = document.getElementById("best-note");
  if (!summary) {
    note.textContent = "";
    return cards.replaceChildren();
  }
  const ok = summary.trials.filter((t) => t.outcome === "OK");
  const best = summary.best;
  const card = (figure, k, v) => el("div", { class: "card", "data-figure": figure },
    el("div", { class: "v" }, v), el("div", { class: "k" }, k));
  const how = best ? (best.confirmed ? "re-measured" : "trial figures, not re-measured") : "";
  cards.replaceChildren(
    card("trials", "trials", String(summary.trials.length)),
    card("ok", "OK", String(ok.length)),
    card("invalid", "refused by rules", String(summary.invalid)),
    card("ratio", `best vs cuBLAS (${how || "same run"})`, ratio(best?.ratio)),
    card("spread", "p10–p90 of that ratio", spread(best?.ratio_p10, best?.ratio_p90)),
    card("tflops", "best TFLOP/s", fmt(best?.tflops)),
    card("cublas-tflops", "cuBLAS TFLOP/s (the best's run)", fmt(best?.cublas_tflops)),
    card("config", best?.source === "replay" ? "best config (replayed)" : "best config",
      best ? best.config_label : "–"));
  note.textContent = best ? best.note : "";
  document.body.dataset.bestConfig = best ? best.config_label : "";
}

// Labels the cuBLAS line at its right end, so the screenshot says what the dashed line is.
const lineLabels = {
  id: "lineLabels",
  afterDatasetsDraw(chart) {
    chart.data.datasets.forEach((ds, i) => {
      const points = chart.getDatasetMeta(i).data;
      if (!ds.endLabel || !points.length || !chart.isDatasetVisible(i)) return;
      const last = points[points.length - 1];
      const ctx = chart.ctx;
      ctx.save();
      ctx.font = "12px system-ui, sans-serif";
      ctx.fillStyle = ds.borderColor;
      ctx.textAlign = "right";
      ctx.fillText(ds.endLabel, last.x - 4, last.y - 6);
      ctx.restore();
    });
  },
};

function trialDatasets(summary) {
  const trials = summary ? summary.trials : [];
  const outcomes = [...new Set(trials.map((t) => t.outcome))].sort((a, b) => (a === "OK" ? -1 : b === "OK" ? 1 : a < b ? -1 : 1));
  const sets = outcomes.map((outcome) => ({
    type: "scatter", label: outcome === "OK" ? "OK (TFLOP/s)" : `${outcome} (failed, shown at 0)`,
    data: trials.filter((t) => t.outcome === outcome).map((t) => ({
      x: t.trial, y: t.tflops ?? 0, label: `${t.config_label}${t.ratio ? ` ${ratio(t.ratio)} cuBLAS` : ""}` })),
    backgroundColor: OUTCOME_COLORS[outcome], borderColor: OUTCOME_COLORS[outcome],
    pointStyle: outcome === "OK" ? "circle" : "crossRot", pointRadius: outcome === "OK" ? 4 : 6, order: 2,
  }));
  sets.push({
    type: "line", label: "best so far (highest same-run ratio; its TFLOP/s)",
    data: trials.map((t) => ({ x: t.trial, y: t.best_so_far_tflops, label: `${ratio(t.best_so_far_ratio)} cuBLAS` })),
    borderColor: BEST_COLOR, backgroundColor: BEST_COLOR, stepped: "after", pointStyle: "line", pointRadius: 0, borderWidth: 2, order: 1,
  });
  if (summary && summary.cublas_tflops && trials.length) {
    const label = `cuBLAS (median of the trials' same-run figures): ${fmt(summary.cublas_tflops)} TFLOP/s`;
    sets.push({
      type: "line", label, endLabel: label, borderColor: CUBLAS_COLOR, backgroundColor: CUBLAS_COLOR,
      borderDash: [6, 4], pointStyle: "line", pointRadius: 0, borderWidth: 1.5, order: 0,
      data: [{ x: 1, y: summary.cublas_tflops }, { x: Math.max(trials.length, 2), y: summary.cublas_tflops }],
    });
  }
  return sets;
}

function drawTrials(summary) {
  const datasets = trialDatasets(summary);
  const chart = state.charts.trials;
  if (chart) {
    chart.data.datasets = datasets;
    return chart.update("none");
  }
  state.charts.trials = new Chart(document.getElementById("trials-chart"), {
    type: "scatter", data: { datasets }, plugins: [lineLabels],
    options: {
      animation: false, maintainAspectRatio: false,
      scales: {
        x: { type: "linear", title: { display: true, text: "trial (recording order)" }, ticks: { precision: 0 } },
        y: { beginAtZero: true, grace: "8%", title: { display: true, text: "TFLOP/s" } },
      },
      plugins: {
        legend: { position: "bottom", labels: { usePointStyle: true } },
        tooltip: { callbacks: { label: (c) => `${c.dataset.label}: ${fmt(c.parsed.y)} TFLOP/s ${c.raw.label || ""}` } },
      },
    },
  });
}

function drawImportance(summary) {
  const rows = summary ? summary.importance : [];
  const data = { labels: rows.map((r) => r.knob), datasets: [{ label: "η²", data: rows.map((r) => r.eta_squared), backgroundColor: BEST_COLOR }] };
  const chart = state.charts.importance;
  if (chart) {
    chart.data = data;
    return chart.update("none");
  }
  state.charts.importance = new Chart(document.getElementById("importance-chart"), {
    type: "bar", data,
    options: {
      indexAxis: "y", animation: false, maintainAspectRatio: false,
      scales: { x: { min: 0, max: 1, title: { display: true, text: "η² (0 – 1)" } } },
      plugins: { legend: { display: false } },
    },
  });
}

function drawSlices(summary) {
  const box = document.getElementById("slices");
  const knobs = summary ? summary.knobs : [];
  const ok = summary ? summary.trials.filter((t) => t.outcome === "OK") : [];
  for (const knob of knobs) {
    const values = [...new Set(ok.map((t) => t.config[knob]))].sort((a, b) => Number(a) - Number(b));
    const data = ok.map((t, i) => ({ x: values.indexOf(t.config[knob]) + ((i % 7) - 3) * 0.03, y: t.tflops, label: t.config_label }));
    const chart = state.sliceCharts[knob] || newSlice(box, knob);
    chart.data.datasets[0].data = data;
    chart.$values = values;
    chart.options.scales.x.max = Math.max(values.length - 0.5, 0.5);
    chart.update("none");
  }
}

function newSlice(box, knob) {
  const canvas = el("canvas", { "data-knob": knob });
  box.append(el("div", { class: "canvas-box" }, canvas));
  const chart = new Chart(canvas, {
    type: "scatter",
    data: { datasets: [{ label: knob, data: [], backgroundColor: OUTCOME_COLORS.OK, pointRadius: 3 }] },
    options: {
      animation: false, maintainAspectRatio: false,
      scales: {
        x: {
          min: -0.5, title: { display: true, text: knob },
          // One tick per distinct value, labelled with the value (the points are jittered around it).
          afterBuildTicks: (axis) => { axis.ticks = (axis.chart.$values || []).map((_, i) => ({ value: i })); },
          ticks: { callback(v) { return String(this.chart.$values?.[v] ?? ""); } },
        },
        y: { beginAtZero: true, title: { display: true, text: "TFLOP/s" } },
      },
      plugins: { legend: { display: false }, tooltip: { callbacks: { label: (c) => `${c.raw.label}: ${fmt(c.parsed.y)} TFLOP/s` } } },
    },
  });
  state.sliceCharts[knob] = chart;
  return chart;
}

function renderTop(summary) {
  const rows = (summary ? summary.top : []).map((t) => el("tr", {},
    el("td", {}, String(t.rank)),
    el("td", {}, el("code", {}, t.config_label)),
    el("td", { class: "num" }, ratio(t.ratio)),
    el("td", { class: "num" }, spread(t.ratio_p10, t.ratio_p90)),
    el("td", {}, t.confirmed ? "re-measured" : `trial`),
    el("td", { class: "num" }, fmt(t.tflops)),
    el("td", { class: "num" }, fmt(t.cublas_tflops)),
    el("td", { class: "num" }, fmt(t.time_ms, 4)),
    el("td", {}, t.source === "replay" ? "replayed" : "GPU"),
    el("td", {}, t.job_id ? `#${t.job_id}` : "")));
  document.querySelector("#top tbody").replaceChildren(...rows);
}

function renderFailures(summary) {
  const failures = summary ? summary.failures : [];
  const most = Math.max(1, ...failures.map((f) => f.count));
  const rows = failures.map((f) => el("tr", {},
    el("td", {}, badge(f.outcome, OUTCOME_COLORS[f.outcome] || "#656d76")),
    el("td", {}, f.reason),
    el("td", { class: "num" },
      el("span", { class: "bar", style: `width:${Math.round((60 * f.count) / most)}px;background:${OUTCOME_COLORS[f.outcome]}` }),
      String(f.count))));
  document.querySelector("#failures tbody").replaceChildren(...rows);
}

// --- the poll loop ----------------------------------------------------------------------------------

async function loadSummary(path) {
  try {
    return await getJson(path);
  } catch (error) {
    if (error.status === 404) return null; // nothing measured yet: an empty study, not an error
    throw error;
  }
}

async function refresh() {
  try {
    const [jobs, studies] = await Promise.all([getJson("/jobs?limit=50"), getJson("/studies?limit=100")]);
    renderChoices(jobs.items, studies.items);
    renderJobs(jobs.items);
    const path = state.choice ? summaryPath(state.choice, jobs.items) : null;
    const summary = path ? await loadSummary(path) : null;
    const title = document.getElementById("study-select").selectedOptions[0]?.textContent || "Study";
    renderStudy(summary, `Study: ${title}`);
    setStatus(`updated ${new Date().toLocaleTimeString()} · refreshes every ${POLL_MS / 1000} s`);
  } catch (error) {
    setStatus(`cannot reach the API: ${error.message}`, true);
  }
}

async function loop() {
  await refresh();
  setTimeout(loop, POLL_MS);
}

document.getElementById("study-select").addEventListener("change", (e) => choose(e.target.value));
loop();
