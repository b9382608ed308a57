// The saga dashboard: the instance list and one instance's timeline, drawn
// from the admin endpoint's commands (the same JSON as `saga --json`).
"use strict";

const STATUSES = ["queued", "running", "waiting", "paused", "rolling-back", "blocked",
  "complete", "errored", "terminated", "compensated"];
const PAGE = 50;
const view = document.getElementById("view");
const tokenInput = document.getElementById("token");
tokenInput.value = sessionStorage.getItem("saga-token") || "";
// Every request sends the token (reads need it too): a new one redraws.
tokenInput.addEventListener("change", () => { sessionStorage.setItem("saga-token", tokenInput.value); render(); });


async function run(args) {
  const headers = { "Content-Type": "application/json" };
  if (tokenInput.value) headers["Authorization"] = "Bearer " + tokenInput.value;
  const response = await fetch("/v1/command", { method: "POST", headers, body: JSON.stringify({ args }) });
  const answer = await response.json();
  if (response.status === 401) throw new Error(answer.error + " (type it in the header: admin token)");
  if (answer.code !== 0) throw new Error(answer.error || "the command failed");
  return answer.output;
}

async function json(args) {
  return JSON.parse(await run(args.concat(["--json"])));
}

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (key === "class") node.className = value;
    // Through the CSSOM: the page's content security policy refuses
    // inline style attributes.
    else if (key === "style") for (const rule of value.split(";")) {
      const [name, setting] = rule.split(":");
      if (name && setting) node.style.setProperty(name.trim(), setting.trim());
    }
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else if (value !== undefined && value !== null) node.setAttribute(key, value);
  }
  // Children may come in nested arrays (a list of [link, " "] pairs):
  // flatten every level, or an array would be printed as its text.
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function pill(status) {
  const label = String(status || "unknown");
  return el("span", { class: "pill s-" + label.replace(/ /g, "-"), "data-status": label }, label);
}

function when(time) {
  if (!time) return "–";
  const d = new Date(time);
  return d.toLocaleString(undefined, { dateStyle: "medium", timeStyle: "medium" });
}

function toast(message) {
  const box = document.getElementById("toast");
  box.textContent = message;
  box.classList.add("show");
  setTimeout(() => box.classList.remove("show"), 3500);
}

function payload(view) {
  if (!view) return null;
  if ("value" in view) return el("pre", {}, JSON.stringify(view.value, null, 2));
  return el("pre", {}, "<" + (view.unavailable || "unavailable") + ">");
}

// ---- The instance list ----

const filters = { status: "", workflow: "", prefix: "", after: null, pages: [] };

async function showList() {
  const args = ["list", "--limit", String(PAGE)];
  if (filters.status) args.push("--status", filters.status);
  if (filters.workflow) args.push("--workflow", filters.workflow);
  if (filters.prefix) args.push("--id-prefix", filters.prefix);
  if (filters.after) args.push("--after", filters.after);
  const listed = await json(args);
  const status = el("select", { id: "status-filter", onchange: e => { filters.status = e.target.value; filters.after = null; filters.pages = []; render(); } },
    el("option", { value: "" }, "every status"),
    STATUSES.map(s => el("option", s === filters.status ? { value: s, selected: "" } : { value: s }, s)));
  const workflow = el("input", { id: "workflow-filter", placeholder: "workflow", value: filters.workflow,
    onchange: e => { filters.workflow = e.target.value.trim(); filters.after = null; filters.pages = []; render(); } });
  const prefix = el("input", { id: "id-filter", placeholder: "id starts with", value: filters.prefix,
    onchange: e => { filters.prefix = e.target.value.trim(); filters.after = null; filters.pages = []; render(); } });
  const rows = listed.instances.map(i => el("tr", { class: "row", "data-id": i.id, onclick: () => { location.hash = "#/instance/" + encodeURIComponent(i.id); } },
    el("td", { class: "mono" }, el("a", { href: "#/instance/" + encodeURIComponent(i.id) }, i.id)),
    el("td", {}, i.workflow),
    el("td", {}, pill(i.status)),
    el("td", { class: "muted" }, when(i.created_at)),
    el("td", { class: "muted" }, when(i.updated_at)),
    el("td", { class: "mono muted" }, i.at ? i.at.kind + " " + i.at.name : ""),
    el("td", { class: "error" }, i.error || "")));
  const table = rows.length
    ? el("table", { id: "instances" }, el("thead", {}, el("tr", {}, ["ID", "WORKFLOW", "STATUS", "STARTED", "UPDATED", "AT", "ERROR"].map(h => el("th", {}, h)))), el("tbody", {}, rows))
    : el("div", { class: "empty" }, "No instances match.");
  const pager = el("div", { class: "pager" },
    filters.pages.length ? el("button", { onclick: () => { filters.after = filters.pages.pop() || null; render(); } }, "← newer") : null,
    listed.next ? el("button", { id: "older", onclick: () => { filters.pages.push(filters.after); filters.after = listed.next; render(); } }, "older →") : null);
  const [queues, schedules] = await Promise.all([queueDepths(), json(["schedules"]).catch(() => null)]);
  return [el("h1", {}, "Instances"), el("div", { class: "filters" }, status, workflow, prefix), el("div", { class: "card" }, table, pager),
    queuePanel(queues), schedulePanel(schedules)];
}

// `saga queues` counts the whole store (it walks the index), so the list's
// 2-second refresh asks for it at most every 30 seconds.
const QUEUES_EVERY_MS = 30000;
let depths = { at: 0, listed: null };
async function queueDepths() {
  if (Date.now() - depths.at >= QUEUES_EVERY_MS) {
    depths = { at: Date.now(), listed: await json(["queues"]).catch(() => null) };
  }
  return depths.listed;
}

// A queue's declared limits in a few words, as `saga queues` gives them.
function limitsText(l) {
  if (!l) return "?";
  const parts = [];
  if (l.concurrency !== null) parts.push(`concurrency ${l.concurrency}`);
  if (l.per_key !== null) parts.push(`per key ${l.per_key}`);
  if (l.per_worker !== null) parts.push(`per worker ${l.per_worker}`);
  if (l.rate) parts.push(`${l.rate.starts} per ${l.rate.per_ms} ms`);
  if (l.release_while_waiting) parts.push("released while waiting");
  return parts.length ? parts.join(", ") : "none";
}

// The queues' depth and limits (`saga queues`), when there are queues.
function queuePanel(listed) {
  if (!listed || !listed.queues.length) return null;
  return [el("h2", {}, "Queues"), el("div", { class: "card" }, el("table", { id: "queues" },
    el("thead", {}, el("tr", {}, ["QUEUE", "WAITING", "STARTED", "OLDEST WAITING", "LIMITS"]
      .map(h => el("th", {}, h)))),
    el("tbody", {}, listed.queues.map(q => el("tr", { "data-queue": q.queue },
      el("td", { class: "mono" }, q.queue),
      el("td", {}, String(q.waiting)), el("td", {}, String(q.started)),
      el("td", {}, q.oldest_waiting || "-"), el("td", {}, limitsText(q.limits)))))))];
}

// The stored schedules (`saga schedules`), each with its controls.
function schedulePanel(listed) {
  if (!listed || !listed.schedules.length) return null;
  const act = (action, name) => el("button", { "data-control": action, onclick: async () => {
    if (!confirm(`${action} schedule ${name}?`)) return;
    try { toast((await run(["schedules", action, name])).trim()); } catch (e) { toast(e.message); }
    render();
  } }, action);
  return [el("h2", {}, "Schedules"), el("div", { class: "card" }, el("table", { id: "schedules" },
    el("thead", {}, el("tr", {}, ["NAME", "WORKFLOW", "TIMING", "STATE", "NEXT TICK", "LAST TICK", ""].map(h => el("th", {}, h)))),
    el("tbody", {}, listed.schedules.map(s => el("tr", { "data-schedule": s.name },
      el("td", { class: "mono" }, s.name), el("td", {}, s.workflow), el("td", { class: "mono" }, s.timing),
      el("td", {}, pill(s.paused ? "paused" : "active")),
      el("td", { class: "muted" }, when(s.next_ticks[0])), el("td", { class: "muted" }, when(s.last_tick)),
      el("td", { class: "row-controls" }, s.paused ? act("resume", s.name) : act("pause", s.name), act("trigger", s.name)))))))];
}

// ---- One instance ----

const COLORS = { completed: "#1f9d55", failed: "#d64545", running: "#2f6fde", cancelled: "#d9822b",
  slept: "#8891a5", sleeping: "#2f6fde", received: "#1f9d55", waiting: "#2f6fde", timed_out: "#d9822b",
  compensation: "#7a5af5", compensation_failed: "#d64545" };

function slotState(slot) {
  if (slot.kind === "sleep") return slot.done ? "slept" : "sleeping";
  if (slot.kind === "child") return slot.state === "running" ? "running" : slot.state === "complete" ? "completed" : "failed";
  return slot.state;
}

function timeline(instance) {
  const t = x => (x ? Date.parse(x) : null);
  const start = t(instance.created_at);
  const now = Date.now();
  const end = Math.max(t(instance.finished_at) || t(instance.updated_at) || start,
    ...instance.slots.map(s => t(s.ended_at) || t(s.started_at) || start),
    ...instance.compensations.map(c => t(c.ended_at) || t(c.started_at) || start));
  const span = Math.max(end - start, 1);
  const left = 190, width = 690, right = 90, row = 30, top = 26;
  const x = ms => left + ((ms - start) / span) * width;
  const rows = instance.slots.length;
  const svg = document.createElementNS("http://www.w3.org/2000/svg", "svg");
  svg.setAttribute("class", "timeline");
  svg.setAttribute("id", "timeline");
  svg.setAttribute("viewBox", `0 0 ${left + width + right} ${top + rows * row + 16}`);
  const add = (tag, attrs, text) => {
    const node = document.createElementNS("http://www.w3.org/2000/svg", tag);
    for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
    if (text !== undefined) node.textContent = text;
    svg.append(node);
    return node;
  };
  for (let i = 0; i <= 4; i++) {
    const at = start + (span * i) / 4;
    add("line", { class: "axis", x1: x(at), x2: x(at), y1: 16, y2: top + rows * row });
    add("text", { class: "tick", x: x(at), y: 12, "text-anchor": "middle" }, "+" + formatMs(at - start));
  }
  instance.slots.forEach((slot, i) => {
    const y = top + i * row;
    const label = (slot.kind === "step" ? "" : slot.kind + " ") + slot.name + (slot.occurrence ? " #" + slot.occurrence : "");
    add("text", { x: 8, y: y + 18 }, label.length > 26 ? label.slice(0, 25) + "…" : label);
    const from = t(slot.started_at) || start;
    const to = t(slot.ended_at) || (instance.finished_at ? t(instance.finished_at) : now);
    const state = slotState(slot);
    const bar = add("rect", { x: x(from), y: y + 6, width: Math.max(x(Math.min(to, end)) - x(from), 3), height: 16, rx: 3,
      fill: COLORS[state] || "#8891a5", "data-slot": slot.name, "data-state": state });
    bar.append(document.createElementNS("http://www.w3.org/2000/svg", "title"));
    bar.lastChild.textContent = `${label}: ${state}` + (slot.attempts > 1 ? ` after ${slot.attempts} attempts` : "");
    if (slot.attempts > 1) add("text", { x: x(Math.min(to, end)) + 6, y: y + 18, class: "tick" }, `↻ ${slot.attempts} tries`);
    // The compensation that undid it, on its row, beside it.
    const comp = instance.compensations.find(c => c.step === slot.name && c.occurrence === slot.occurrence);
    if (comp) {
      const cFrom = t(comp.started_at) || end, cTo = t(comp.ended_at) || end;
      const cBar = add("rect", { x: x(cFrom), y: y + 9, width: Math.max(x(cTo) - x(cFrom), 3), height: 10, rx: 2,
        fill: comp.state === "failed" ? COLORS.compensation_failed : COLORS.compensation, "data-compensates": slot.name });
      cBar.append(document.createElementNS("http://www.w3.org/2000/svg", "title"));
      cBar.lastChild.textContent = `compensation of ${slot.name}: ${comp.state}`;
      const order = instance.compensations.indexOf(comp) + 1;
      add("text", { x: x(cTo) + 6, y: y + 18, class: "tick" }, `undone #${order}`);
    }
  });
  return el("div", { class: "card" }, svg, el("div", { class: "legend" },
    [["completed", COLORS.completed], ["failed", COLORS.failed], ["running or waiting", COLORS.running],
      ["cancelled", COLORS.cancelled], ["compensation", COLORS.compensation]].map(([name, color]) =>
      el("span", {}, el("i", { style: "background:" + color }), name))));
}

function formatMs(ms) {
  if (ms < 1000) return Math.round(ms) + "ms";
  if (ms < 60000) return (ms / 1000).toFixed(1) + "s";
  if (ms < 3600000) return (ms / 60000).toFixed(1) + "m";
  if (ms < 86400000) return (ms / 3600000).toFixed(1) + "h";
  return (ms / 86400000).toFixed(1) + "d";
}

const TERMINAL = ["complete", "errored", "terminated", "compensated"];

// Which control calls an instance in `status` takes (the engine's own
// rule, journal/command.rs), and why not when it does not: a refused
// call would only say so after the confirmation.
function allowed(shown) {
  const status = shown.status, ended = TERMINAL.includes(status);
  const live = ["queued", "running", "waiting"].includes(status);
  const not = what => `not for an instance that is ${status}: ${what}`;
  return {
    "pause": live || not("only a queued, running or waiting one pauses"),
    "resume": status === "paused" || not("only a paused one resumes"),
    "terminate": (!ended && status !== "rolling back") || not("it ended, or its rollback is under way"),
    "terminate with rollback": (!ended && status !== "rolling back") || not("it ended, or its rollback is under way"),
    "restart": true,
    "retry rollback": (ended && !!shown.rollback_error) || not("only an ended one whose rollback gave up retries it"),
    "send event": !ended || not("an ended instance takes no events"),
  };
}

function control(id, label, args, { danger, allow = true } = {}) {
  const refused = allow === true ? null : allow;
  return el("button", { class: danger ? "danger" : "", "data-control": label, disabled: refused ? "" : null, title: refused, onclick: async () => {
    if (!confirm(`${label} ${id}?`)) return;
    try {
      const output = await run(args.concat([id]));
      toast(output.trim() || label + ": done");
    } catch (e) {
      toast(e.message);
    }
    render();
  } }, label);
}

async function showInstance(id) {
  const shown = (await json(["show", id])).instance;
  const children = shown.slots.filter(s => s.kind === "child");
  const meta = el("dl", { class: "meta" },
    el("dt", {}, "workflow"), el("dd", {}, shown.workflow),
    el("dt", {}, "started"), el("dd", {}, when(shown.created_at)),
    el("dt", {}, shown.finished_at ? "finished" : "updated"), el("dd", {}, when(shown.finished_at || shown.updated_at)),
    shown.generation ? [el("dt", {}, "generation"), el("dd", {}, String(shown.generation))] : null,
    shown.parent ? [el("dt", {}, "parent"), el("dd", { class: "mono" }, el("a", { href: "#/instance/" + encodeURIComponent(shown.parent) }, shown.parent))] : null,
    children.length ? [el("dt", {}, "children"), el("dd", { class: "mono" }, children.map(c => [el("a", { href: "#/instance/" + encodeURIComponent(c.child) }, c.child), " "]))] : null,
    shown.owner ? [el("dt", {}, "owner"), el("dd", {}, shown.owner.worker)] : null,
    el("dt", {}, "input"), el("dd", {}, payload(shown.input)),
    shown.output ? [el("dt", {}, "output"), el("dd", {}, payload(shown.output))] : null);
  const allows = allowed(shown);
  const sendRefused = allows["send event"] === true ? null : allows["send event"];
  const controls = el("div", { class: "controls" },
    control(id, "pause", ["pause"], { allow: allows["pause"] }),
    control(id, "resume", ["resume"], { allow: allows["resume"] }),
    control(id, "terminate", ["terminate"], { danger: true, allow: allows["terminate"] }),
    control(id, "terminate with rollback", ["terminate", "--rollback"], { danger: true, allow: allows["terminate with rollback"] }),
    control(id, "restart", ["restart"]),
    control(id, "retry rollback", ["retry-rollback"], { allow: allows["retry rollback"] }),
    el("button", { "data-control": "send event", disabled: sendRefused ? "" : null, title: sendRefused, onclick: async () => {
      const type = window.prompt("Event type");
      if (!type) return;
      const body = window.prompt("Payload (JSON)", "{}");
      if (body === null || !confirm(`send ${type} to ${id}?`)) return;
      try { toast((await run(["send-event", id, type, "--json", body])).trim()); } catch (e) { toast(e.message); }
      render();
    } }, "send event"));
  const steps = el("table", { id: "steps" }, el("thead", {}, el("tr", {}, ["#", "CALL", "STATE", "TRIES", "STARTED", "DETAIL"].map(h => el("th", {}, h)))),
    el("tbody", {}, shown.slots.map((s, i) => el("tr", { "data-slot": s.name },
      el("td", { class: "muted" }, String(i + 1)),
      el("td", { class: "mono" }, (s.kind === "step" ? "" : s.kind + " ") + s.name),
      el("td", {}, slotState(s)),
      el("td", {}, s.attempts ? String(s.attempts) : "–"),
      el("td", { class: "muted" }, when(s.started_at)),
      el("td", {}, s.key ? el("div", { class: "mono muted" }, "key " + s.key) : null,
        s.child ? el("a", { class: "mono", href: "#/instance/" + encodeURIComponent(s.child) }, s.child) : null,
        s.error ? el("div", { class: "error" }, s.error) : null,
        (s.input || s.output || s.payload) ? el("details", {}, el("summary", {}, "values"),
          s.input ? [el("div", { class: "muted" }, "input"), payload(s.input)] : null,
          s.output ? [el("div", { class: "muted" }, "output"), payload(s.output)] : null,
          s.payload ? [el("div", { class: "muted" }, "event"), payload(s.payload)] : null) : null)))));
  const rollback = shown.compensations.length
    ? el("table", { id: "rollback" }, el("thead", {}, el("tr", {}, ["#", "COMPENSATES", "STATE", "TRIES", "KEY"].map(h => el("th", {}, h)))),
      el("tbody", {}, shown.compensations.map((c, i) => el("tr", { "data-compensates": c.step },
        el("td", { class: "muted" }, String(i + 1)),
        el("td", { class: "mono" }, c.step),
        el("td", {}, c.state, c.error ? el("div", { class: "error" }, c.error) : null),
        el("td", {}, String(c.attempts ?? "–")),
        el("td", { class: "mono muted" }, c.child ? el("a", { href: "#/instance/" + encodeURIComponent(c.child) }, "child " + c.child) : c.key)))))
    : el("div", { class: "empty" }, "No rollback ran.");
  const pending = shown.pending_events.length
    ? el("div", { class: "card" }, shown.pending_events.map(e => el("div", {}, el("span", { class: "mono" }, e.event_type), " sent ", when(e.sent_at), payload(e.payload))))
    : null;
  const published = (shown.published || []).length
    ? el("div", { class: "card", id: "published" }, shown.published.map(p => el("div", { "data-published": p.name },
      el("span", { class: "mono" }, p.name), " ", when(p.published_at), payload(p.value))))
    : null;
  const rejected = (shown.rejected_events || []).length
    ? el("div", { class: "card", id: "rejected" }, shown.rejected_events.map(e => el("div", { class: "rejected" },
      el("span", { class: "mono" }, e.event_type), " set aside by wait ", el("span", { class: "mono" }, e.wait), " ", when(e.rejected_at),
      el("div", { class: "error" }, e.error))))
    : null;
  const outcome = el("div", { class: "outcome", id: "outcome" },
    el("div", { class: "card" }, el("h3", {}, "error"), shown.error ? el("div", { class: "error" }, shown.error, payload(shown.error_value)) : el("span", { class: "muted" }, shown.status === "complete" ? "none" : "none so far")),
    el("div", { class: "card" }, el("h3", {}, "rollback"),
      shown.rollback_error ? el("div", { class: "error" }, "gave up: " + shown.rollback_error)
        : shown.rollback_cause ? el("div", {}, `${shown.compensations.filter(c => c.state === "completed").length} compensations completed`, el("div", { class: "muted" }, "because: " + shown.rollback_cause))
          : el("span", { class: "muted" }, "none")));
  return [
    el("div", { class: "muted" }, el("a", { href: "#/" }, "← instances")),
    el("h1", { id: "instance-title" }, el("span", { class: "mono" }, shown.id), pill(shown.status)),
    el("div", { class: "card" }, meta, controls),
    el("h2", {}, "Timeline"), shown.slots.length ? timeline(shown) : el("div", { class: "empty" }, "No calls yet."),
    el("h2", {}, "Calls"), el("div", { class: "card" }, steps),
    el("h2", {}, "Rollback, in the order it ran"), el("div", { class: "card" }, rollback),
    published ? [el("h2", {}, "Published"), published] : null,
    pending ? [el("h2", {}, "Events not taken yet"), pending] : null,
    rejected ? [el("h2", {}, "Events set aside (they do not decode)"), rejected] : null,
    el("h2", {}, "Outcome"), outcome,
  ];
}

// ---- Routing and live updates ----

let rendering = false;
async function render() {
  if (rendering) return;
  rendering = true;
  try {
    const hash = location.hash || "#/";
    const match = hash.match(/^#\/instance\/(.+)$/);
    const nodes = match ? await showInstance(decodeURIComponent(match[1])) : await showList();
    const focus = document.activeElement && document.activeElement.id;
    view.replaceChildren(...nodes.flat().filter(Boolean));
    if (focus && document.getElementById(focus)) document.getElementById(focus).focus();
    document.body.dataset.ready = "true";
  } catch (e) {
    view.replaceChildren(el("div", { class: "card error", id: "failure" }, e.message));
  } finally {
    rendering = false;
  }
}

window.addEventListener("hashchange", render);
render();
setInterval(() => { if (document.visibilityState === "visible" && document.activeElement.tagName !== "INPUT" && document.activeElement.tagName !== "SELECT") render(); }, 2000);
