// pool.js fills in the pool's page (pool.html) from GET /v1/dashboard,
// every 2 seconds; until the first answer the page says it is loading.
// It writes text only through textContent: nothing the coordinator sends
// is ever parsed as HTML.
"use strict";

const REFRESH_MS = 2000;
// FINISHED_SHOWN is how many finished jobs (complete or cancelled, the
// newest) are shown, on one line each, with the jobs still running;
// older ones fold into one closed list, so that the devices are not
// below fifty job cards.
const FINISHED_SHOWN = 3;
const STATE_CLASS = { d: "t-d", f: "t-f", r: "t-r", l: "t-l", ".": "t-q" };

function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}

function short(id) {
  return id && id.length > 10 ? id.slice(0, 8) + "…" : id || "";
}

function plural(n, word) {
  return n + " " + word + (n === 1 ? "" : "s");
}

const jobViews = new Map(); // job id -> {root, counts, bar, grid, more}

function renderJob(j) {
  let v = jobViews.get(j.job);
  if (!v) {
    const root = el("article", "job");
    root.dataset.job = j.job;
    root.title = "job " + j.job; // a finished job's line hides its ID
    root.append(el("h3", "", j.name || "(unnamed job)"));
    // In a pool divided into shards each job says its shard.
    const shard = typeof j.shard === "number" ? " · shard " + j.shard : "";
    root.append(el("div", "id", "job " + j.job + " · owner " + short(j.owner) + shard));
    const counts = el("div", "counts");
    const bar = el("div", "bar");
    const grid = el("div", "grid");
    const more = el("div", "more");
    root.append(counts, bar, grid, more);
    v = { root, counts, bar, grid, more };
    jobViews.set(j.job, v);
  }
  let words = `${j.accepted} of ${j.tasks} tasks done`;
  if (j.failed) words += `, ${j.failed} failed`;
  if (j.leased) words += `, ${j.leased} computing`;
  if (j.waiting) words += `, ${j.waiting} waiting for agreement`;
  if (j.complete) words += " · complete";
  if (j.cancelled) words += " · cancelled";
  v.counts.textContent = words;
  v.root.dataset.accepted = String(j.accepted);
  v.root.dataset.complete = String(j.complete);
  // A finished job shows its counts only: its cells say nothing more.
  v.root.classList.toggle("finished", j.complete || j.cancelled);

  const parts = [["t-d", j.accepted], ["t-f", j.failed], ["t-r", j.waiting], ["t-l", j.leased]];
  v.bar.replaceChildren(...parts.filter(([, n]) => n > 0).map(([cls, n]) => {
    const s = el("span", cls);
    s.style.width = (100 * n / Math.max(1, j.tasks)) + "%";
    return s;
  }));

  const states = j.states || "";
  while (v.grid.children.length < states.length) v.grid.append(el("i"));
  while (v.grid.children.length > states.length) v.grid.lastChild.remove();
  for (let i = 0; i < states.length; i++) {
    const cls = STATE_CLASS[states[i]] || "t-q";
    const cell = v.grid.children[i];
    if (cell.className !== cls) {
      cell.className = cls;
      cell.title = `task ${i}`;
    }
  }
  v.more.textContent = states.length < j.tasks ? `the first ${states.length} of ${j.tasks} tasks are shown` : "";
  return v.root;
}

function row(cells) {
  const tr = el("tr");
  for (const c of cells) {
    const td = el("td", c.num ? "num" : "", c.text);
    if (c.title) td.title = c.title;
    tr.append(td);
  }
  return tr;
}

// deviceState says a device's state for people. A live offer's
// "computing" means the device may compute: it is "ready" while it holds
// no task, so that an idle pool does not look busy.
function deviceState(p) {
  // A silent device's offer may be stale (a closed tab): say so rather
  // than show it computing.
  if (p.silent) return "not heard from for over a minute" + (p.state ? " (last offer: " + p.state + ")" : "");
  if (!p.state) return "no offer";
  if (p.state === "computing") return p.leases > 0 ? "computing " + plural(p.leases, "task") : "ready, waiting for work";
  return p.state + (p.hold ? " (" + p.hold + ")" : "");
}

function render(d) {
  document.getElementById("pool-name").textContent = d.pool;
  document.title = d.pool + " · idlepool";

  const jobs = document.getElementById("jobs");
  const older = document.getElementById("older");
  const seen = new Set(d.jobs.map((j) => j.job));
  for (const id of jobViews.keys()) if (!seen.has(id)) jobViews.delete(id);
  // Newest first: every unfinished job and the newest finished ones;
  // the other finished jobs in the closed list below them.
  const shown = [], folded = [];
  let finished = 0;
  for (const j of d.jobs) {
    if (!(j.complete || j.cancelled) || finished++ < FINISHED_SHOWN) shown.push(j);
    else folded.push(j);
  }
  // A shard that did not answer (d.unanswered) may hold jobs: "yet" would
  // say there are none.
  const partial = d.unanswered && d.unanswered.length > 0;
  if (shown.length === 0) jobs.replaceChildren(el("p", "empty", partial ? "No jobs on the shards that answered." : "No jobs yet."));
  else jobs.replaceChildren(...shown.map(renderJob));
  document.getElementById("older-jobs").replaceChildren(...folded.map(renderJob));
  older.hidden = folded.length === 0;
  older.querySelector("summary").textContent = plural(folded.length, "older finished job");

  const peers = document.querySelector("#peers tbody");
  peers.replaceChildren(...d.peers.map((p) => row([
    { text: short(p.peer), title: p.peer },
    { text: short(p.owner), title: p.owner },
    { text: p.kind || "—" },
    { text: deviceState(p) },
    { text: p.connection || "—" },
  ])));
  if (d.peers.length === 0) peers.replaceChildren(row([{ text: "No devices yet." }]));

  const owners = document.querySelector("#owners tbody");
  owners.replaceChildren(...d.owners.map((o) => row([
    { text: o.name ? o.name + " (" + short(o.owner) + ")" : short(o.owner), title: o.owner },
    { text: String(o.receipts), num: true },
    { text: o.cost.toLocaleString("en", { maximumFractionDigits: 3 }), num: true },
  ])));
  if (d.owners.length === 0) owners.replaceChildren(row([{ text: partial ? "No receipts on the shards that answered." : "No receipts yet." }]));

  const entries = d.ledger.entries === 1 ? "1 entry" : d.ledger.entries + " entries";
  const head = d.ledger.head || "(empty)";
  const headEl = document.getElementById("ledger-head");
  if (head.startsWith("shard 0: ")) {
    // A pool divided into shards keeps one chain per shard, tied to one
    // another by anchors: each shard's head on a line of its own.
    const heads = head.split("; ");
    document.getElementById("ledger-entries").textContent = entries + " in " + heads.length + " chains, one per shard, tied to one another by anchors; heads";
    headEl.textContent = heads.join("\n");
    headEl.style.display = "block";
    headEl.style.whiteSpace = "pre-wrap";
  } else {
    document.getElementById("ledger-entries").textContent = entries + "; head";
    headEl.textContent = head;
  }
  document.getElementById("pool-key").textContent = d.key;
}

async function refresh() {
  const status = document.getElementById("status");
  try {
    const res = await fetch("/v1/dashboard", { cache: "no-store" });
    if (!res.ok) throw new Error("the coordinator answered " + res.status);
    const d = await res.json();
    render(d);
    let text = "Updated " + new Date().toLocaleTimeString() + ".";
    if (d.unanswered && d.unanswered.length > 0) {
      // A divided pool's shard without a node in charge (a take-over):
      // the others are shown.
      const names = d.unanswered.map((u) => "shard " + u.shard + " (" + u.reason + ")");
      text += " Not shown: " + names.join(", ") + "; its jobs, devices and receipts come back once a node takes it.";
    }
    status.textContent = text;
  } catch (e) {
    // Shown, not thrown: a coordinator that restarts is a moment to wait out.
    status.textContent = "Cannot reach the coordinator (" + e.message + "); trying again.";
  }
  setTimeout(refresh, REFRESH_MS);
}

document.getElementById("ledger-cmd").textContent = "idlepool ledger verify " + location.origin;
refresh();
