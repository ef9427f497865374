// The triage page: plots of the last 24 hours, the conversations worth a look, and one conversation
// with its signals where they fired. Plain DOM and inline SVG: no build step, no CDN. Every value
// from the API is inserted as text, never as HTML.
"use strict";

const QUALITIES = ["severe", "poor", "neutral", "good", "excellent"];
const QUALITY_COLOURS = { severe: "#b42318", poor: "#dc6803", neutral: "#98a2b3", good: "#12b76a", excellent: "#027a48" };
const CATEGORY_COLOURS = ["#3451b2", "#b42318", "#dc6803", "#7a5af8", "#12b76a", "#0e9384", "#c11574", "#667085", "#344054"];
const TOKEN_KEY = "otelsignals-token";
const SVG = "http://www.w3.org/2000/svg";

let traceUrl = "";
let cursor = null;

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    // Styles through the CSSOM: the page's Content-Security-Policy refuses style attributes.
    if (key === "class") node.className = value;
    else if (key === "style") node.style.cssText = value;
    else node.setAttribute(key, value);
  }
  for (const child of children) node.append(child instanceof Node ? child : String(child));
  return node;
}

function svgEl(tag, attrs) {
  const node = document.createElementNS(SVG, tag);
  for (const [key, value] of Object.entries(attrs)) node.setAttribute(key, String(value));
  return node;
}

async function api(path) {
  const headers = {};
  const token = sessionStorage.getItem(TOKEN_KEY);
  if (token) headers.Authorization = `Bearer ${token}`;
  const answer = await fetch(path, { headers });
  if (answer.status === 401) {
    document.getElementById("token-form").hidden = false;
    throw new Error("the admin API wants a token");
  }
  const body = await answer.json();
  if (!answer.ok) throw new Error(body.error || `HTTP ${answer.status}`);
  return body;
}

function time(seconds) {
  return new Date(seconds * 1000).toISOString().replace("T", " ").slice(0, 19);
}

function legend(target, entries) {
  target.replaceChildren(...entries.map(([name, colour]) => el("span", {}, el("i", { style: `background:${colour}` }), name)));
}

function drawQuality(timeline) {
  const svg = document.getElementById("quality-plot");
  svg.replaceChildren();
  const buckets = timeline.buckets;
  const width = 600, height = 160, gap = 2;
  svg.setAttribute("viewBox", `0 0 ${width} ${height}`);
  const most = Math.max(1, ...buckets.map((b) => b.conversations));
  const barWidth = width / buckets.length - gap;
  buckets.forEach((bucket, i) => {
    let y = height;
    for (const quality of QUALITIES) {
      const n = bucket.qualities[quality] || 0;
      if (!n) continue;
      const h = (n / most) * (height - 10);
      y -= h;
      const bar = svgEl("rect", { x: i * (barWidth + gap), y, width: barWidth, height: h, fill: QUALITY_COLOURS[quality], class: "bar" });
      bar.append(svgEl("title", {}));
      bar.firstChild.textContent = `${time(bucket.start)}: ${n} ${quality}`;
      svg.append(bar);
    }
  });
  legend(document.getElementById("quality-legend"), QUALITIES.map((q) => [q, QUALITY_COLOURS[q]]));
}

function drawSignals(timeline) {
  const svg = document.getElementById("signal-plot");
  svg.replaceChildren();
  const buckets = timeline.buckets;
  const width = 600, height = 160;
  svg.setAttribute("viewBox", `0 0 ${width} ${height}`);
  const categories = [...new Set(buckets.flatMap((b) => Object.keys(b.categories)))].sort();
  const step = width / Math.max(1, buckets.length - 1);
  categories.forEach((category, c) => {
    // A rate exists only where there were conversations: empty buckets are skipped, not zero.
    const colour = CATEGORY_COLOURS[c % CATEGORY_COLOURS.length];
    const points = buckets.flatMap((b, i) => b.conversations
      ? [[i * step, height - 5 - ((b.categories[category] || 0) / b.conversations) * (height - 10)]] : []);
    svg.append(svgEl("polyline", { points: points.map(([x, y]) => `${x.toFixed(1)},${y.toFixed(1)}`).join(" "), fill: "none", stroke: colour, "stroke-width": 2, class: "rate", "data-category": category }));
    for (const [x, y] of points) svg.append(svgEl("circle", { cx: x.toFixed(1), cy: y.toFixed(1), r: 3, fill: colour }));
  });
  legend(document.getElementById("signal-legend"), categories.map((c, i) => [c, CATEGORY_COLOURS[i % CATEGORY_COLOURS.length]]));
}

async function loadOverview() {
  const timeline = await api("/v1/timeline?buckets=24");
  drawQuality(timeline);
  drawSignals(timeline);
}

let listFilters = "";  // the filters of the listing on show: "More" pages through it, not the edited form

function listQuery() {
  const query = new URLSearchParams(listFilters);
  if (cursor) query.set("cursor", cursor);
  return query;
}

function filtersFromForm() {
  const form = new FormData(document.getElementById("filters"));
  const query = new URLSearchParams({ sort: "-priority", limit: "50" });
  for (const [key, value] of form.entries()) if (String(value).trim()) query.set(key, String(value).trim());
  return query.toString();
}

function sessionRow(item) {
  const signals = el("td", {}, ...item.signal_types.map((t) => el("span", { class: "tag" }, t.split(".").slice(1).join("."))));
  const row = el("tr", { "data-session": item.session_id },
    el("td", {}, item.priority === null ? "–" : item.priority.toFixed(1)),
    el("td", {}, item.session_id),
    el("td", {}, item.agent_id),
    el("td", {}, el("span", { class: `q q-${item.quality}` }, item.quality)),
    el("td", {}, item.user_turns),
    signals,
    el("td", {}, time(item.last_seen)));
  row.addEventListener("click", () => { location.hash = `conversation=${encodeURIComponent(item.session_id)}`; });
  return row;
}

async function loadList(reset) {
  const body = document.querySelector("#sessions tbody");
  const status = document.getElementById("list-status");
  // A new list empties the table: the status says so until the answer comes (not the old count).
  if (reset) { cursor = null; listFilters = filtersFromForm(); body.replaceChildren(); status.textContent = "Loading…"; }
  try {
    const page = await api(`/v1/sessions?${listQuery()}`);
    body.append(...page.sessions.map(sessionRow));
    cursor = page.next_cursor;
    document.getElementById("more").hidden = !cursor;
    status.textContent = body.children.length ? `${body.children.length} shown, highest priority first` : "No conversation matches.";
  } catch (error) {
    status.textContent = String(error.message || error);
  }
}

function highlighted(text, snippets) {
  // The message text with each signal's snippet marked where it occurs (text nodes only).
  const node = el("span");
  let rest = text;
  for (const snippet of snippets) {
    const at = snippet ? rest.indexOf(snippet) : -1;
    if (at < 0) continue;
    node.append(rest.slice(0, at), el("mark", { class: "signal" }, snippet));
    rest = rest.slice(at + snippet.length);
  }
  node.append(rest);
  return node;
}

function renderMessages(data, byMessage) {
  const box = document.getElementById("messages");
  if (!data.messages) {
    box.replaceChildren(el("p", {}, "Message text is not kept for this conversation (index.content and signals.snippets)."));
    return;
  }
  const offset = data.message_offset || 0;
  // An open conversation with signals.snippets off: its messages without their text (roles, tool
  // calls, where signals fired), said so rather than shown as empty boxes.
  const withheld = data.messages.length && data.messages.every((message) => message.content == null)
    ? [el("p", { class: "withheld" }, "Message text is not shown (signals.snippets is off): roles, tool calls and where signals fired only.")]
    : [];
  box.replaceChildren(...withheld, ...data.messages.map((message, i) => {
    const index = message.index ?? offset + i;
    const fired = byMessage.get(index) || [];
    const text = message.content || (message.tool_calls ? message.tool_calls.map((c) => `→ ${c.name}`).join("\n") : "");
    const item = el("div", { class: `message ${message.role}${fired.length ? " signalled" : ""}`, "data-index": index },
      el("span", { class: "role" }, `${index} · ${message.role}`),
      highlighted(text, fired.map((s) => s.snippet)));
    if (fired.length) item.append(el("span", { class: "fired" }, ...fired.map((s) => el("span", { class: "tag" }, s.type))));
    return item;
  }));
}

function renderMetrics(data) {
  const session = document.querySelector("#session-metrics tbody");
  const metrics = data.session_metrics || [];
  session.replaceChildren(...(metrics.length ? metrics.map((m) => el("tr", {}, el("td", {}, m.name), el("td", {}, m.score === null ? "–" : m.score.toFixed(2)), el("td", {}, m.passed ? "pass" : "fail")))
    : [el("tr", {}, el("td", {}, "Shown once the session closes."))]));
  const traces = data.trace_metrics || data.trace_signals || [];
  const names = ["confidence", "loop_detection", "tool_correctness", "coherence"];
  document.querySelector("#trace-metrics thead").replaceChildren(el("tr", {}, el("th", {}, "trace"), ...names.map((n) => el("th", {}, n.replace("_", " ")))));
  document.querySelector("#trace-metrics tbody").replaceChildren(...traces.map((t) => el("tr", {},
    el("td", {}, t.trace_id.slice(0, 8)), ...names.map((n) => el("td", {}, t[n] === null || t[n] === undefined ? "–" : t[n].toFixed(2))))));
}

function renderTraceLinks(data) {
  const box = document.getElementById("trace-links");
  if (!traceUrl) { box.replaceChildren(); return; }
  box.replaceChildren(el("span", {}, "Traces: "), ...data.trace_ids.slice(-20).map((id) =>
    el("a", { href: traceUrl.replaceAll("{trace_id}", id), target: "_blank", rel: "noopener", class: "trace-link" }, id.slice(0, 12))));
}

async function openConversation(id) {
  const section = document.getElementById("conversation");
  const data = await api(`/v1/sessions/${encodeURIComponent(id)}`);
  const byMessage = new Map();
  for (const signal of data.signals) {
    if (!byMessage.has(signal.message_index)) byMessage.set(signal.message_index, []);
    byMessage.get(signal.message_index).push(signal);
  }
  document.getElementById("conversation-title").textContent = `Conversation ${data.session_id}`;
  document.getElementById("conversation-summary").textContent =
    `${data.agent_id || "unknown agent"} · quality ${data.quality} (${Number(data.quality_score).toFixed(2)}) · priority ${data.priority ?? "–"}` +
    `${data.closed ? " · closed" : ""}${(data.priority_reasons || []).length ? " · " + data.priority_reasons.join("; ") : ""}`;
  document.getElementById("signal-list").replaceChildren(...data.signals.map((s) =>
    el("li", {}, el("span", { class: "tag" }, s.type), ` message ${s.message_index}, confidence ${Number(s.confidence).toFixed(2)}`)));
  renderMessages(data, byMessage);
  renderMetrics(data);
  renderTraceLinks(data);
  section.hidden = false;
  section.scrollIntoView();
}

async function route() {
  const match = location.hash.match(/^#conversation=(.+)$/);
  if (match) {
    try { await openConversation(decodeURIComponent(match[1])); }
    catch (error) { document.getElementById("list-status").textContent = String(error.message || error); }
  } else {
    document.getElementById("conversation").hidden = true;
  }
}

async function start() {
  document.getElementById("token-form").addEventListener("submit", (event) => {
    event.preventDefault();
    sessionStorage.setItem(TOKEN_KEY, document.getElementById("token").value);
    location.reload();
  });
  document.getElementById("filters").addEventListener("submit", (event) => { event.preventDefault(); loadList(true); });
  document.getElementById("more").addEventListener("click", () => loadList(false));
  window.addEventListener("hashchange", route);
  try {
    traceUrl = (await api("/v1/ui")).trace_url;
    await Promise.all([loadOverview(), loadList(true)]);
    await route();
    document.body.dataset.ready = "true";
  } catch (error) {
    document.getElementById("list-status").textContent = String(error.message || error);
    document.body.dataset.ready = "error";
  }
}

start();
