// nanobert's page: every panel posts its form to the JSON API (serve/app.py) and draws the answer.
// Plain DOM, canvas and SVG; nothing is fetched from outside the server.
"use strict";

const $ = (id) => document.getElementById(id);
const el = (tag, attrs = {}, ...children) => {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") node.className = v;
    else if (k === "text") node.textContent = v;
    else node.setAttribute(k, v);
  }
  for (const child of children) node.append(child);
  return node;
};
const pct = (p) => (100 * p).toFixed(1) + "%";
const POLL_MS = window.NANOBERT_POLL_MS || 3000;  // how often a training run is looked at again (tests: less)
const TITLES = {
  "fill-mask": "Fill mask", nsp: "Next sentence", generate: "Generate", classify: "Label",
  similarity: "Similarity", attention: "Attention", explain: "Explain", run: "Run", answer: "Answer",
  score: "Which sounds right?",
};

async function api(route, body) {
  const response = await fetch("/api/" + route, body === undefined ? {} : {
    method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body),
  });
  let data = null;
  try { data = await response.json(); } catch { /* not JSON: a proxy's or server's plain error page */ }
  if (!response.ok || data === null) throw new Error((data && data.error) || `HTTP ${response.status} ${response.statusText}`);
  return data;
}

function formBody(form) {
  const body = {};
  for (const input of form.querySelectorAll("input, textarea")) {
    if (input.hidden && !input.value) continue;
    if (input.type === "number") {
      if (input.value !== "") body[input.name] = Number(input.value);
    } else body[input.name] = input.value;
  }
  return body;
}

// ------------------------------------------------------------------------------------------------------
// Renderers: one per route, each fills the panel's result box

function bars(rows) {  // rows: [label, probability]
  return rows.map(([label, p]) => el("div", { class: "bar" },
    el("span", { class: "token", text: label }),
    el("span", {}, el("div", { class: "fill", style: `width:${Math.max(0.5, 100 * p)}%` })),
    el("span", { class: "p", text: pct(p) })));
}

const render = {
  "fill-mask"(data, box) {
    data.masks.forEach((mask, i) => {
      box.append(el("div", { class: "mask", "data-position": mask.position },
        el("h3", { text: `[MASK] ${i + 1} of ${data.masks.length} (token position ${mask.position})` }),
        ...bars(mask.candidates.map((c) => [c.token, c.probability]))));
    });
    box.append(el("p", { class: "filled" }, "top guesses together: ", el("b", { id: "fill-filled", text: data.filled })));
  },
  nsp(data, box) {
    box.append(el("p", {}, el("span", { class: "big", id: "nsp-isnext", text: pct(data.IsNext) }), " IsNext   ",
      el("span", { class: "big", id: "nsp-notnext", text: pct(data.NotNext) }), " NotNext"));
  },
  score(data, box) {
    const worst = Math.max(...data.sentences.flatMap((s) => s.logprobs.map((lp) => -lp)), 1e-9);
    data.sentences.forEach((s, i) => {
      const name = data.sentences.length > 1 ? "AB"[i] + ": " : "";
      box.append(el("div", { class: "mask score-sentence", id: `score-sentence-${i}` },
        el("h3", { text: `${name}${s.text}` }),
        el("p", {}, "log-likelihood ", el("span", { class: "big", text: s.total.toFixed(2) }), ` over ${s.tokens.length} pieces`),
        ...s.tokens.map((token, j) => el("div", { class: "bar" },
          el("span", { class: "token", text: token }),
          el("span", {}, el("div", { class: "fill surprise", style: `width:${Math.max(0.5, 100 * -s.logprobs[j] / worst)}%` })),
          el("span", { class: "p", text: s.logprobs[j].toFixed(2) })))));
    });
    if (data.preferred !== undefined) {
      const verdict = data.preferred === "tie" ? "a tie: the model scores both alike"
        : `the model prefers ${data.preferred} by ${data.margin.toFixed(2)} nats (${Math.exp(Math.min(data.margin, 700)).toPrecision(3)}x more likely)`;
      box.append(el("p", { class: "big", id: "score-verdict", text: verdict }));
    }
    box.append(el("p", { class: "hint", text: `rule: ${data.rule_description}` }));
  },
  similarity(data, box) {
    box.append(el("p", {}, "cosine similarity ", el("span", { class: "big", text: data.cosine_similarity.toFixed(4) })));
  },
  generate(data, box) {
    box.append(el("p", { class: "generated" }, data.prompt + " ", el("span", { class: "new", id: "generated", text: data.continuation })));
    box.append(el("p", { class: "hint", text: `${data.tokens.length} new pieces; stopped: ${data.stop_reason}` }));
  },
  classify(data, box) {
    if (data.score !== undefined) box.append(el("p", {}, "score ", el("span", { class: "big", text: data.score.toFixed(4) })));
    else {
      box.append(el("p", {}, "label ", el("span", { class: "big", id: "classify-label", text: data.label })));
      box.append(...bars(Object.entries(data.probabilities)));
    }
  },
  attention(data, box) {
    attention.data = data;
    const [L, nh] = [data.attentions.length, data.attentions[0].length];
    fillSelect($("attention-layer"), [...Array(L).keys()].map(String));
    fillSelect($("attention-head"), ["all", ...[...Array(nh).keys()].map(String)], "0");
    drawAttention();
  },
  explain(data, box) { box.append(renderTrace(data)); },
  answer(data, box) {
    if (!data.text) { box.append(el("p", { class: "big", id: "answer-text", text: "(no answer)" })); return; }
    const context = document.getElementById("answer-context").value;
    box.append(el("p", { class: "big", id: "answer-text", text: data.text }));
    box.append(el("p", { class: "hint", text: `probability ${pct(data.probability)}, characters ${data.start}-${data.end}` }));
    box.append(el("p", {}, context.slice(0, data.start), el("mark", { text: context.slice(data.start, data.end) }), context.slice(data.end)));
  },
};

function fillSelect(select, values, chosen) {
  const keep = values.includes(select.value) ? select.value : (chosen ?? values[0]);
  select.replaceChildren(...values.map((v) => el("option", { value: v, text: v })));
  select.value = keep;
}

// ------------------------------------------------------------------------------------------------------
// Attention: a heatmap with the word pieces on both axes (rows attend to columns)

const attention = { data: null };
const VIRIDIS = [[68, 1, 84], [59, 82, 139], [33, 145, 140], [94, 201, 98], [253, 231, 37]];

function viridis(v) {  // 0..1 -> the viridis colour map, interpolated between five of its stops
  const x = Math.min(Math.max(v, 0), 1) * (VIRIDIS.length - 1);
  const i = Math.min(Math.floor(x), VIRIDIS.length - 2), f = x - i;
  const [a, b] = [VIRIDIS[i], VIRIDIS[i + 1]];
  return `rgb(${a.map((c, k) => Math.round(c + f * (b[k] - c))).join(",")})`;
}

function drawAttention() {
  const box = $("attention-result");
  const data = attention.data;
  if (!data) return;
  const layer = Number($("attention-layer").value);
  const headValue = $("attention-head").value;
  const heads = headValue === "all" ? [...data.attentions[layer].keys()] : [Number(headValue)];
  const tokens = data.tokens, T = tokens.length;
  const cell = Math.max(10, Math.min(30, Math.floor((heads.length > 1 ? 420 : 640) / T)));
  const margin = 8 + 7 * Math.max(...tokens.map((t) => t.length));
  box.replaceChildren();
  for (const head of heads) {
    const canvas = el("canvas", { width: margin + cell * T + 4, height: margin + cell * T + 22, "data-layer": layer, "data-head": head,
      "data-cell": cell, "data-margin": margin });
    canvas.className = "heatmap";
    const matrix = data.attentions[layer][head];
    paint(canvas, matrix, tokens, cell, margin, null, `layer ${layer} head ${head}`);
    canvas.addEventListener("mousemove", (event) => {
      const rect = canvas.getBoundingClientRect();
      const row = Math.floor((event.clientY - rect.top - margin) / cell);
      if (row < 0 || row >= T) return;
      paint(canvas, matrix, tokens, cell, margin, row, `layer ${layer} head ${head}`);
      const top = matrix[row].map((p, j) => [p, j]).sort((a, b) => b[0] - a[0]).slice(0, 3);
      $("attention-hover").textContent = `${tokens[row]} (position ${row}) attends to ` +
        top.map(([p, j]) => `${tokens[j]} ${pct(p)}`).join(", ");
    });
    canvas.addEventListener("mouseleave", () => paint(canvas, matrix, tokens, cell, margin, null, `layer ${layer} head ${head}`));
    box.append(canvas);
  }
}

function paint(canvas, matrix, tokens, cell, margin, highlight, title) {
  const ctx = canvas.getContext("2d");
  const T = tokens.length;
  ctx.fillStyle = "white";
  ctx.fillRect(0, 0, canvas.width, canvas.height);
  for (let i = 0; i < T; i++) {
    for (let j = 0; j < T; j++) {
      ctx.fillStyle = viridis(matrix[i][j]);  // as the PNG maps of `nanobert attention`: 0 dark, 1 yellow
      ctx.fillRect(margin + j * cell, margin + i * cell, cell, cell);
    }
  }
  ctx.font = "11px ui-monospace, monospace";
  ctx.textBaseline = "middle";
  for (let i = 0; i < T; i++) {
    ctx.fillStyle = tokens[i] === "[CLS]" ? "#b3261e" : "#1d2430";  // [CLS]'s row, easy to find
    ctx.textAlign = "right";
    ctx.fillText(tokens[i], margin - 4, margin + i * cell + cell / 2);
    ctx.save();
    ctx.translate(margin + i * cell + cell / 2, margin - 4);
    ctx.rotate(-Math.PI / 2);
    ctx.textAlign = "left";
    ctx.fillText(tokens[i], 0, 0);
    ctx.restore();
  }
  if (highlight !== null) {
    ctx.strokeStyle = "#e8590c";
    ctx.lineWidth = 2;
    ctx.strokeRect(margin, margin + highlight * cell, cell * T, cell);
  }
  ctx.fillStyle = "#5f6b7a";
  ctx.textAlign = "left";
  ctx.fillText(title, margin, margin + T * cell + 12);
}

// ------------------------------------------------------------------------------------------------------
// The explain trace, as sections

function renderTrace(t) {
  const root = el("div", { class: "trace" });
  const m = t.model;
  root.append(el("p", { text: `${m.layers} layers, hidden size ${m.hidden_size}, ${m.heads} heads of size ${m.head_size}, ` +
    `feed-forward ${m.intermediate_size}, vocabulary ${m.vocab_size}, ${m.layer_norm}, ${m.attention} attention` }));
  const tokens = el("table", {}, el("tr", {}, el("th", { text: "pos" }), el("th", { text: "token" }), el("th", { text: "id" }), el("th", { text: "segment" })));
  t.tokens.forEach((tok, i) => tokens.append(el("tr", {}, el("td", { text: i }), el("td", {}, el("code", { text: tok })),
    el("td", { text: t.input_ids[i] }), el("td", { text: "AB"[t.token_type_ids[i]] }))));
  root.append(section(`1. Tokens: ${t.tokens.length} word pieces`, tokens, true));
  root.append(section("2. Embeddings: token + position + segment, then LayerNorm", ...t.embeddings.map((v) => view(v, t.tokens))));
  t.layers.forEach((layer) => {
    const shapes = el("table", {}, ...[
      ["input", layer.input.shape], ["q, k, v (per head)", layer.q_k_v_shape], ["attention weights", layer.attention_shape],
      ["attention output", layer.attention_output.shape], ["feed-forward hidden", layer.feed_forward_hidden_shape],
      ["output", layer.output.shape],
    ].map(([name, shape]) => el("tr", {}, el("td", { text: name }), el("td", {}, el("code", { text: `(${shape.join(", ")})` })))));
    const causal = m.attention === "causal";
    const rows = causal ? layer.last_attention : layer.cls_attention;
    const who = causal ? "the last token" : "[CLS]";
    const attn = el("table", {}, el("tr", {}, el("th", { text: "head" }), ...t.tokens.map((tok) => el("th", {}, el("code", { text: tok })))),
      ...rows.map((row, h) => el("tr", {}, el("td", { text: h }), ...row.map((p) => el("td", { text: p.toFixed(3) })))));
    const n = layer.residual_norms;
    root.append(section(`3.${layer.index} Layer ${layer.index}`, shapes,
      causal ? el("p", { text: `causal mask: every weight above the diagonal is zero (largest: ${layer.above_diagonal.toFixed(3)}); each token sees only itself and the tokens before it` }) : "",
      el("p", { text: `${who} attends to:` }), attn,
      el("p", { text: `residual stream, mean |x| per token: in ${n.input.toFixed(2)}, attention adds ${n["attention update"].toFixed(2)}, ` +
        `feed-forward adds ${n["feed-forward update"].toFixed(2)}, out ${n.output.toFixed(2)}` })));
  });
  if (t.next_sentence) {
    root.append(section("4. The [CLS] vector and the next-sentence head", view(t.cls_vector, t.tokens), view(t.pooled, t.tokens),
      el("p", { text: `IsNext ${pct(t.next_sentence.IsNext)}  NotNext ${pct(t.next_sentence.NotNext)}` }), true));
    const masked = t.masked.length ? t.masked.map((mk) => el("p", { text: `position ${mk.position}: ` + mk.top.map(([tok, p]) => `${tok} ${pct(p)}`).join(", ") }))
      : [el("p", { text: "no [MASK] in the text" })];
    root.append(section("5. Masked positions", ...masked, true));
  } else {
    root.append(section("4. Next-token guesses, from the tokens up to each position", el("table", {},
      ...t.next_tokens.map((nt) => el("tr", {}, el("td", { text: nt.position }), el("td", {}, el("code", { text: t.tokens[nt.position] })),
        el("td", { text: nt.actual === null ? "(end)" : `next: ${nt.actual}` }),
        el("td", { text: nt.top.map(([tok, p]) => `${tok} ${pct(p)}`).join(", ") })))), true));
  }
  return root;
}

function section(title, ...children) {
  const open = children.length && children[children.length - 1] === true;
  if (open) children.pop();
  const details = el("details", {}, el("summary", { text: title }), ...children);
  details.open = open || title.startsWith("3.0");
  return details;
}

function view(v, tokens) {  // a TensorView: its name, shape, and the first numbers of each row
  const rows = v.shape.length === 3 ? v.preview : [v.preview];
  const names = v.shape.length === 3 ? tokens : [""];
  return el("div", {}, el("p", {}, el("b", { text: v.name }), ` (${v.shape.join(", ")}) `, el("span", { class: "hint", text: v.note })),
    el("table", {}, ...rows.map((row, i) => el("tr", {}, el("td", {}, el("code", { text: names[i] })),
      el("td", {}, el("code", { text: row.map((x) => x.toFixed(3)).join(" ") + (row.length < v.shape[v.shape.length - 1] ? " …" : "") }))))));
}

// ------------------------------------------------------------------------------------------------------
// The run view: loss and accuracy curves from metrics.jsonl, refreshed while the run trains

function chart(title, series, yMax) {
  const W = 480, H = 260, pad = 40;
  const points = series.flatMap((s) => s.points);
  if (!points.length) return el("div");
  const xMax = Math.max(...points.map((p) => p[0]), 1);
  const top = yMax ?? Math.max(...points.map((p) => p[1])) * 1.05;
  const x = (v) => pad + (W - pad - 10) * v / xMax, y = (v) => H - pad - (H - pad - 20) * v / top;
  const ns = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("width", W); svg.setAttribute("height", H); svg.setAttribute("class", "chart");
  const add = (tag, attrs, text) => {
    const node = document.createElementNS(ns, tag);
    for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
    if (text !== undefined) node.textContent = text;
    svg.append(node);
    return node;
  };
  add("text", { x: pad, y: 14, "font-size": 13, "font-weight": 600 }, title);
  add("line", { x1: pad, y1: H - pad, x2: W - 10, y2: H - pad, stroke: "#8893a0" });
  add("line", { x1: pad, y1: 20, x2: pad, y2: H - pad, stroke: "#8893a0" });
  add("text", { x: W - 10, y: H - pad + 16, "font-size": 11, "text-anchor": "end" }, `step ${xMax}`);
  add("text", { x: pad - 4, y: 26, "font-size": 11, "text-anchor": "end" }, top.toFixed(2));
  const colors = ["#2f6fde", "#e8590c", "#2b8a3e", "#ae3ec9", "#5f6b7a"];
  series.forEach((s, i) => {
    if (!s.points.length) return;
    add("path", { d: s.points.map((p, k) => `${k ? "L" : "M"}${x(p[0]).toFixed(1)},${y(p[1]).toFixed(1)}`).join(" "),
      fill: "none", stroke: colors[i % colors.length], "stroke-width": 1.6, "data-series": s.name, "data-points": s.points.length });
    add("text", { x: W - 12, y: 30 + 14 * i, "font-size": 11, "text-anchor": "end", fill: colors[i % colors.length] }, s.name);
  });
  return svg;
}

function drawRun(data) {  // true once the run has finished (summary.json is written)
  const train = data.records.filter((r) => r.split === "train");
  const held = data.records.filter((r) => r.split !== "train");
  const keys = (rows, suffix) => [...new Set(rows.flatMap((r) => Object.keys(r)).filter((k) => k.endsWith(suffix)))];
  const series = (rows, key, name) => ({ name, points: rows.filter((r) => Number.isFinite(r[key])).map((r) => [r.step, r[key]]) });
  const losses = [series(train, "loss", "train loss"), ...keys(held, "_loss").map((k) => series(held, k, `${held[0].split} ${k}`))];
  const accuracies = keys(held, "_accuracy").concat(keys(held, "accuracy").filter((k) => k === "accuracy"))
    .map((k) => series(held, k, `${held[0].split} ${k}`));
  $("run-curves").replaceChildren(chart("losses", losses), chart("held-out accuracy", accuracies, 1));
  const last = data.records.length ? data.records[data.records.length - 1].step : 0;
  const n = data.damaged_lines;
  const damaged = n ? ` (${n} damaged line${n === 1 ? "" : "s"} of metrics.jsonl skipped)` : "";
  if (!data.summary) {
    $("run-state").textContent = `training: step ${last} so far (refreshing every ${POLL_MS / 1000} s)${damaged}`;
    return false;
  }
  const s = data.summary, number = (v) => (Number.isInteger(v) ? v : v.toFixed(4));
  $("run-state").textContent = `finished: ${s.stop_reason} at step ${s.steps}${damaged}`;
  const rows = Object.entries(s.final || {}).map(([k, v]) => [k, typeof v === "number" ? number(v) : String(v)]);
  if (typeof s.train_time_s === "number") rows.push(["train time", `${s.train_time_s} s`]);
  if (typeof s.tokens_per_s === "number") rows.push(["tokens/s", Math.round(s.tokens_per_s).toLocaleString()]);
  $("run-summary").replaceChildren(el("table", { class: "summary" },
    ...rows.map(([k, v]) => el("tr", { "data-key": k }, el("td", { text: k }), el("td", { text: v })))));
  return true;
}

async function refreshRun() {  // a failed look (the server restarting, a file being written) is tried again
  let finished = false;
  try { finished = drawRun(await api("run")); } catch (error) {
    $("run-state").textContent = `${error.message} (trying again every ${POLL_MS / 1000} s)`;
  }
  if (!finished) setTimeout(refreshRun, POLL_MS);
}

// ------------------------------------------------------------------------------------------------------
// Start: what was loaded decides the tabs; a run without a checkpoint yet is asked again until it has one

function show(name) {
  for (const panel of document.querySelectorAll(".panel")) panel.hidden = panel.id !== "panel-" + name;
  for (const tab of document.querySelectorAll("nav button")) tab.classList.toggle("active", tab.dataset.panel === name);
}

function applyInfo(info) {
  const what = info.kind ? `${info.kind.replace("_", " ")} checkpoint ${info.checkpoint}` : "no checkpoint yet";
  $("what").textContent = (info.panels.includes("run") ? `run ${info.path}; ` : "") + what + (info.error ? ` (${info.error})` : "");
  const shown = [...$("tabs").children].map((tab) => tab.dataset.panel);
  if (shown.join() !== info.panels.join()) {  // new panels: keep the one being looked at
    const current = document.querySelector("nav button.active")?.dataset.panel;
    $("tabs").replaceChildren(...info.panels.map((name) => {
      const tab = el("button", { text: TITLES[name] || name, "data-panel": name });
      tab.addEventListener("click", () => show(name));
      return tab;
    }));
    if (info.panels.length) show(info.panels.includes(current) ? current : info.panels[0]);
  }
  $("classify-pair").hidden = !info.text_pair;
}

async function watchInfo() {  // while only the run is shown: look for its first checkpoint
  let info = null;
  try { info = await api("info"); applyInfo(info); } catch (error) { $("what").textContent = error.message; }
  if (!info || info.panels.every((name) => name === "run")) setTimeout(watchInfo, POLL_MS);
}

async function start() {
  for (const form of document.querySelectorAll("form[data-route]")) {
    const route = form.dataset.route;
    // each form's panel ends with its error line and its result box, ROUTE-error and ROUTE-result
    form.closest(".panel").append(el("div", { class: "error", id: route + "-error" }), el("div", { id: route + "-result" }));
    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      const box = $(route + "-result");
      $(route + "-error").textContent = "";
      try {
        const data = await api(route, formBody(form));
        box.replaceChildren();
        render[route](data, box);
      } catch (error) {
        box.replaceChildren();
        $(route + "-error").textContent = error.message;
      }
    });
  }
  $("attention-layer").addEventListener("change", drawAttention);
  $("attention-head").addEventListener("change", drawAttention);
  const info = await api("info");
  applyInfo(info);
  if (info.panels.includes("run")) {
    refreshRun();
    if (info.panels.length === 1) setTimeout(watchInfo, POLL_MS);
  }
  document.body.dataset.ready = "true";
}

start().catch((error) => { $("what").textContent = error.message; });
