// join.js: the browser peer. It keeps a device key (and, for a new
// owner, an owner key) in IndexedDB, registers with the pool that served
// the page, offers its capacity, leases tasks, fetches each task's
// program (from other devices over WebRTC where p2p.js finds one, from
// the pool otherwise), runs it in a Web Worker under the task's memory
// and time limits, and returns results, heartbeats and hand-backs as a
// native agent does (docs/api.md): its leases and its reports of how
// each job's files came (bytes direct from devices, relayed, from the
// pool) go with POST /v1/work, and each task's row says how it ended
// once its receipt arrives. Query parameters: start=1 starts at
// once, cores=N sets the cores, keys=fallback forces the key fallback
// (the core's Ed25519 instead of WebCrypto's).
(() => {
  "use strict";
  const $ = (id) => document.getElementById(id);
  const enc = new TextEncoder();
  const params = new URLSearchParams(location.search);
  const state = {
    status: "loading", peer: "", owner: "", keyKind: "", pool: "",
    results: [], receipts: [], receiptCount: 0, errors: [], fetches: [], running: {}, reported: [],
    openedAt: performance.now(), firstResultMs: null, firstReceiptMs: null,
  };
  window.idlepoolPeer = state;

  let core = null, coreModule = null, build = null, dev = null, owner = null;
  let running = false, offerTimer = null, receiptTimer = null;
  const jobs = new Map(); // job ID -> {info, canonical}
  const files = new Map(); // digest -> Promise<Uint8Array>
  const programs = new Map(); // digest/memory -> Promise<{module}|{failure}>
  const held = new Map(); // lease ID -> presigned release header
  const transfers = new Map(); // job ID -> {direct, relayed, coordinator} not yet reported
  const endings = new Map(); // lease ID -> shows in its row how its task ended
  let busy = 0; // slots that hold a lease
  let slots = 0; // slots started by Start

  const say = (s) => { state.status = s; $("status").textContent = s; };
  const fail = (where, e) => {
    const msg = where + ": " + ((e && e.message) || e);
    state.errors.push(msg);
    if (state.errors.length > 50) state.errors.shift();
    console.warn(msg);
    return msg;
  };
  const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
  const hex = (b) => Array.from(new Uint8Array(b), (x) => x.toString(16).padStart(2, "0")).join("");
  const b64 = (b) => btoa(String.fromCharCode(...new Uint8Array(b)));
  const unb64 = (s) => Uint8Array.from(atob(s), (c) => c.charCodeAt(0));
  const short = (id) => (id || "").slice(0, 12);
  const plural = (n, word) => n + " " + word + (n === 1 ? "" : "s");
  const MAX_TRANSFERS = 64; // api.MaxWorkTransfers: reports per POST /v1/work

  // ---- the core's files ----

  // memFS serves the files the page fetched (by digest, under /blobs/)
  // to the core, read-only, through the Node-like fs object Go's js port
  // calls (wasm_exec.js installs one that refuses everything): planning
  // a job checks its program's header and size as a native device does.
  const blobs = new Map(); // "/blobs/<hex>" -> Uint8Array
  function memFS() {
    const fs = globalThis.fs, open = new Map();
    let next = 100;
    const err = (code) => { const e = new Error(code); e.code = code; return e; };
    const stat = (b) => ({ dev: 0, ino: 0, mode: 0o100444, nlink: 1, uid: 0, gid: 0, rdev: 0, size: b.length,
      blksize: 4096, blocks: Math.ceil(b.length / 512), atimeMs: 0, mtimeMs: 0, ctimeMs: 0, isDirectory: () => false });
    fs.stat = fs.lstat = (path, cb) => { const b = blobs.get(path); b ? cb(null, stat(b)) : cb(err("ENOENT")); };
    fs.open = (path, flags, mode, cb) => {
      const b = blobs.get(path);
      if (!b) return cb(err("ENOENT"));
      if (flags !== 0) return cb(err("EROFS"));
      const fd = next++;
      open.set(fd, { b, pos: 0 });
      cb(null, fd);
    };
    fs.fstat = (fd, cb) => { const f = open.get(fd); f ? cb(null, stat(f.b)) : cb(err("EBADF")); };
    fs.read = (fd, buf, off, len, pos, cb) => {
      const f = open.get(fd);
      if (!f) return cb(err("EBADF"));
      const at = pos === null || pos === undefined ? f.pos : pos;
      const n = Math.max(0, Math.min(len, f.b.length - at));
      buf.set(f.b.subarray(at, at + n), off);
      if (pos === null || pos === undefined) f.pos += n;
      cb(null, n);
    };
    fs.close = (fd, cb) => { open.delete(fd) ? cb(null) : cb(err("EBADF")); };
  }

  // ---- keys ----

  function openDB() {
    return new Promise((resolve, reject) => {
      const r = indexedDB.open("idlepool-peer", 1);
      r.onupgradeneeded = () => r.result.createObjectStore("kv");
      r.onsuccess = () => resolve(r.result);
      r.onerror = () => reject(r.error);
    });
  }
  function dbOp(db, mode, f) {
    return new Promise((resolve, reject) => {
      const tx = db.transaction("kv", mode);
      const req = f(tx.objectStore("kv"));
      tx.oncomplete = () => resolve(req.result);
      tx.onerror = () => reject(tx.error);
    });
  }

  // newKey makes an Ed25519 key: WebCrypto's, non-extractable, where the
  // browser has it; else the core's (a 32-byte seed kept in IndexedDB).
  async function newKey() {
    if (params.get("keys") !== "fallback") {
      try {
        const pair = await crypto.subtle.generateKey({ name: "Ed25519" }, false, ["sign", "verify"]);
        const pub = new Uint8Array(await crypto.subtle.exportKey("raw", pair.publicKey));
        return { kind: "webcrypto", pair, pub };
      } catch (e) {
        fail("WebCrypto has no Ed25519, using the fallback", e);
      }
    }
    const seed = core.edGenerate();
    return { kind: "fallback", seed, pub: core.edPublic(seed) };
  }

  async function signWith(key, msg) {
    if (key.kind === "webcrypto") {
      return new Uint8Array(await crypto.subtle.sign({ name: "Ed25519" }, key.pair.privateKey, msg));
    }
    return core.edSign(key.seed, msg);
  }

  async function loadKeys() {
    const db = await openDB();
    dev = await dbOp(db, "readonly", (s) => s.get("device"));
    owner = await dbOp(db, "readonly", (s) => s.get("owner"));
    if (!dev) {
      dev = await newKey();
      await dbOp(db, "readwrite", (s) => s.put(dev, "device"));
    }
    state.peer = core.peerID(dev.pub);
    state.keyKind = dev.kind === "webcrypto" ? "WebCrypto Ed25519, not extractable, in IndexedDB" : "Ed25519 seed in IndexedDB (this browser's WebCrypto has no Ed25519)";
    $("peer").textContent = state.peer;
    $("keykind").textContent = state.keyKind;
    $("devkey").textContent = b64(dev.pub);
    return db;
  }

  // ownerFor returns {pub, endorsement}: a linked owner's from the text
  // pasted (owner key and endorsement, base64, as `idlepool owner
  // endorse` prints them), or this browser's own owner key's.
  async function ownerFor(db) {
    if (document.querySelector("input[name=owner]:checked").value === "link") {
      const words = $("endorsement").value.trim().split(/\s+/);
      if (words.length !== 2) throw new Error("paste the two words `idlepool owner endorse` printed: the owner key and the endorsement");
      const pub = unb64(words[0]), endorsement = unb64(words[1]);
      if (pub.length !== 32 || endorsement.length !== 64) throw new Error("the owner key must be 32 bytes and the endorsement 64, in base64");
      return { pub, endorsement };
    }
    if (!owner) {
      owner = await newKey();
      await dbOp(db, "readwrite", (s) => s.put(owner, "owner"));
    }
    return { pub: owner.pub, endorsement: await signWith(owner, core.endorsement(dev.pub)) };
  }

  // ---- the pool's API ----

  async function authorization(method, target, body) {
    const ts = Date.now();
    const sum = hex(await crypto.subtle.digest("SHA-256", body));
    const parts = ["idlepool/request/v1", method, target, String(ts), sum].map((s) => enc.encode(s));
    const msg = new Uint8Array(parts.reduce((n, p) => n + p.length + 1, -1));
    let o = 0;
    parts.forEach((p, i) => { if (i) msg[o++] = 0; msg.set(p, o); o += p.length; });
    return "Idlepool peer=" + state.peer + ", ts=" + ts + ", sig=" + b64(await signWith(dev, msg));
  }

  class APIError extends Error {
    constructor(status, body) {
      super((body && body.error) || "HTTP " + status);
      this.status = status;
      this.code = body && body.code;
    }
  }

  async function api(method, target, body, raw) {
    const bytes = body === undefined ? new Uint8Array(0) : enc.encode(typeof body === "string" ? body : JSON.stringify(body));
    const headers = { Authorization: await authorization(method, target, bytes) };
    if (build) {
      headers["Idlepool-Version"] = build.version;
      headers["Idlepool-Api"] = String(build.api);
    }
    if (bytes.length) headers["Content-Type"] = "application/json";
    const r = await fetch(target, { method, headers, body: bytes.length ? bytes : undefined, cache: "no-store" });
    if (!r.ok) {
      let b = null;
      try { b = await r.json(); } catch (_) { /* not JSON */ }
      throw new APIError(r.status, b);
    }
    return raw ? new Uint8Array(await r.arrayBuffer()) : r.json();
  }

  async function sendOffer() {
    const cores = Number($("cores").value), mem = Number($("memory").value);
    const now = new Date();
    const offer = {
      peer: state.peer, owner: state.owner, pool: state.pool,
      capacity: {
        os: "js", arch: "wasm", logical_cpus: navigator.hardwareConcurrency || 1, cores,
        memory_total_mib: Math.round((navigator.deviceMemory || 1) * 1024), memory_mib: mem,
        gpus: [], schedule: [], time_zone: "",
      },
      state: "computing", accept: { max_memory_mib: mem }, issued: now.toISOString(),
      expires: new Date(now.getTime() + 5 * 60 * 1000).toISOString(),
    };
    const canonical = core.offerCanonical(JSON.stringify(offer));
    if (canonical.error) throw new Error(canonical.error);
    offer.sig = b64(await signWith(dev, canonical));
    await api("POST", "/v1/offers", offer);
  }

  // ---- files ----

  // file returns a job's file by digest: in chunks, each from a device of
  // the pool that holds it over a WebRTC data channel (p2p.js), from the
  // pool where none gives it; the whole file from the pool when chunks
  // cannot be had. Either way its SHA-256 is checked. state.fetches
  // records the path it took ("peer <device> (direct)", "pool", or
  // both joined by " + ") and how many of its bytes came from devices;
  // its bytes by path are queued as job's transfer report (noteTransfer).
  // A file fetched before, for any job, is not fetched or counted again.
  function file(digest, job) {
    if (!files.has(digest)) {
      const p = (async () => {
        let bytes = null, path = "pool", peerBytes = 0, peers = [], moved = null;
        const began = performance.now();
        try {
          const got = await window.idlepoolP2P.fetchFile(digest, { api, sign: (m) => signWith(dev, m), peer: () => state.peer, core });
          if (got) {
            ({ bytes, path, peerBytes, peers } = got);
            moved = { direct: got.directBytes, relayed: got.relayedBytes, coordinator: got.poolBytes };
          }
        } catch (e) {
          fail("fetch " + short(digest) + " in chunks", e);
        }
        if (!bytes) {
          const r = await fetch("/v1/blobs/" + digest);
          if (!r.ok) throw new Error("the pool has no file " + digest + " (HTTP " + r.status + ")");
          bytes = new Uint8Array(await r.arrayBuffer());
          path = "pool";
          peerBytes = 0;
          peers = [];
          moved = { direct: 0, relayed: 0, coordinator: bytes.length };
        }
        noteTransfer(job, moved);
        const sum = hex(await crypto.subtle.digest("SHA-256", bytes));
        if (sum !== digest) throw new Error("file " + digest + " arrived with SHA-256 " + sum + " (via " + path + ")");
        state.fetches.push({ digest, path, bytes: bytes.length, peerBytes, peers, ms: Math.round(performance.now() - began) });
        return { bytes, path };
      })();
      p.catch(() => files.delete(digest));
      files.set(digest, p);
    }
    return files.get(digest);
  }

  // noteTransfer queues t, bytes of job's files fetched by path, for the
  // pool: added to what is not yet reported for that job.
  function noteTransfer(job, t) {
    if (!t || !(t.direct || t.relayed || t.coordinator)) return;
    const q = transfers.get(job) || { direct: 0, relayed: 0, coordinator: 0 };
    q.direct += t.direct;
    q.relayed += t.relayed;
    q.coordinator += t.coordinator;
    transfers.set(job, q);
  }

  // work sends POST /v1/work with body and, as "transfers", the reports
  // not yet sent (at most MAX_TRANSFERS jobs), as a native agent's
  // requests carry them. Reports go back in the queue when the request
  // fails, unless the pool refused it as malformed (400), which it would
  // refuse again.
  async function work(body) {
    const reports = [];
    for (const [job, t] of transfers) {
      if (reports.length === MAX_TRANSFERS) break;
      reports.push(Object.assign({ job }, t));
      transfers.delete(job);
    }
    if (reports.length) body = Object.assign({ transfers: reports }, body);
    try {
      const r = await api("POST", "/v1/work", body);
      state.reported.push(...reports);
      if (state.reported.length > 100) state.reported.splice(0, state.reported.length - 100);
      return r;
    } catch (e) {
      if (!(e instanceof APIError && e.status === 400)) for (const t of reports) noteTransfer(t.job, t);
      throw e;
    }
  }

  // report sends the transfer reports queued, if any, at once: before a
  // task runs, so that the job's owner sees them while the job runs and
  // before it completes. A failure leaves them for the next request.
  async function report() {
    if (!transfers.size) return;
    try { await work({}); } catch (e) { fail("report transfers", e); }
  }

  async function jobOf(id) {
    if (!jobs.has(id)) {
      const p = (async () => {
        const [info, canonical] = await Promise.all([api("GET", "/v1/jobs/" + id), api("GET", "/v1/jobs/" + id + "/canonical", undefined, true)]);
        return { info, canonical };
      })();
      p.catch(() => jobs.delete(id));
      jobs.set(id, p);
    }
    return jobs.get(id);
  }

  function program(digest, bytes, memoryMiB) {
    const k = digest + "/" + memoryMiB;
    if (!programs.has(k)) {
      programs.set(k, (async () => {
        const p = core.prepare(bytes, memoryMiB);
        if (p.error) throw new Error(p.error);
        if (p.failure) return { failure: p.failure };
        try {
          return { module: await WebAssembly.compile(p.module) };
        } catch (e) {
          return { failure: { kind: "bad-module", message: "compile: " + e.message } };
        }
      })());
    }
    return programs.get(k);
  }

  // ---- tasks ----

  // taskRow adds a task's row; the function it returns sets its state.
  // Tasks are named by their index, from 0, as the pool's receipts, its
  // ledger and the command line name them.
  function taskRow(lease, t, info, path) {
    const tr = document.createElement("tr");
    for (const v of [t.name + " (" + short(t.job) + ")", short(info.owner), "index " + lease.task + " (" + plural(t.tasks, "task") + ")", path, "running"]) {
      const td = document.createElement("td");
      td.textContent = v;
      tr.appendChild(td);
    }
    $("tasks").prepend(tr);
    while ($("tasks").children.length > 20) $("tasks").lastChild.remove();
    return (s) => { tr.lastChild.textContent = s; };
  }

  function newWorker() { return new Worker("/join/task-worker.js", { type: "module" }); }

  // runIn runs one task in the slot's worker, terminating it at the time
  // limit (a machine failure, as a native worker reports it).
  function runIn(slot, msg, timeoutMs) {
    return new Promise((resolve) => {
      const w = slot.worker;
      const done = (v) => {
        clearTimeout(timer);
        w.onmessage = w.onerror = null;
        resolve(v);
      };
      const timer = setTimeout(() => {
        w.terminate();
        slot.worker = newWorker();
        done({ failure: { kind: "timeout", message: "task ran longer than its limit of " + (timeoutMs / 1000) + "s" } });
      }, timeoutMs);
      w.onmessage = (ev) => done(ev.data.error ? { error: ev.data.error } : ev.data.end);
      w.onerror = (ev) => {
        w.terminate();
        slot.worker = newWorker();
        done({ failure: { kind: "worker-died", message: "the task's Web Worker failed: " + (ev.message || "unknown error") } });
      };
      w.postMessage(msg);
    });
  }

  async function release(lease) {
    held.delete(lease.lease);
    try { await api("POST", "/v1/leases/" + lease.lease + "/release"); } catch (e) { fail("hand back lease", e); }
  }

  async function compute(slot, lease) {
    const id = lease.job;
    const { info, canonical } = await jobOf(id);
    const names = core.jobFiles(canonical);
    if (names.error) throw new Error(names.error);
    // Planning a job reads its files (sizes, headers): all of them first.
    const got = await Promise.all(names.map((d) => file(d, id)));
    await report();
    names.forEach((d, i) => blobs.set("/blobs/" + d, got[i].bytes));
    const f = got[0];
    const t = core.task(canonical, lease.task);
    if (t.error) throw new Error(t.error);
    if (t.chunk) {
      // The chunks rule's piece of a file is not cut here yet: hand the
      // task back at once, for a native device.
      fail("job " + short(id), "its tasks read chunks of a split input, which the browser peer does not cut yet");
      return release(lease);
    }
    const inputs = {};
    for (const [name, d] of Object.entries(t.files)) inputs[name] = blobs.get("/blobs/" + d);
    const paths = [...new Set(got.map((g) => g.path))].join(", ");
    state.running[lease.lease] = { job: id, task: lease.task, owner: info.owner };
    held.set(lease.lease, await authorization("POST", "/v1/leases/" + lease.lease + "/release", new Uint8Array(0)));
    const beat = setInterval(async () => {
      try {
        await api("POST", "/v1/leases/" + lease.lease + "/heartbeat");
        held.set(lease.lease, await authorization("POST", "/v1/leases/" + lease.lease + "/release", new Uint8Array(0)));
      } catch (e) { fail("heartbeat", e); }
    }, Math.max(1000, Math.min(30000, (new Date(lease.deadline) - Date.now()) / 3)));
    const mark = taskRow(lease, t, info, paths);
    try {
      const prog = await program(t.program, f.bytes, t.memoryMiB);
      const limits = { memoryMiB: t.memoryMiB, maxStdoutBytes: t.maxStdoutBytes, timeoutMs: t.timeoutMs };
      let end;
      if (prog.failure) {
        end = { failure: prog.failure };
      } else {
        end = await runIn(slot, { program: prog.module, stdin: t.stdin, seed: t.seed, maxStdoutBytes: t.maxStdoutBytes, meterExport: core.meterExport, inputs }, t.timeoutMs);
        if (end.error) {
          // The browser could not run the task at all (an import it
          // cannot offer): another device will.
          fail("task " + lease.task, end.error);
          mark("handed back: " + end.error);
          clearInterval(beat);
          return release(lease);
        }
      }
      const o = core.outcome(Object.assign({}, end, limits));
      if (o.error) throw new Error(o.error);
      clearInterval(beat);
      const result = { job: id, task: lease.task, digest: o.digest, ok: o.ok, machine: o.machine, path: paths, ended: "" };
      const failed = o.ok ? "" : o.reason.split("\n")[0];
      // The pool's ledger entry for the lease says how the task ended
      // (receipts); it may come before the answer to the submission.
      if (!o.machine) {
        endings.set(lease.lease, (kind) => { result.ended = kind; mark(endWords(kind, failed)); });
        while (endings.size > 500) endings.delete(endings.keys().next().value);
      }
      try {
        await api("POST", "/v1/leases/" + lease.lease + "/result", o.submission);
      } catch (e) {
        endings.delete(lease.lease);
        throw e;
      }
      held.delete(lease.lease);
      state.results.push(result);
      if (state.firstResultMs === null) state.firstResultMs = performance.now() - state.openedAt;
      if (!result.ended) mark(o.ok ? "returned, waiting for agreement" : o.machine ? "not finished here: " + failed : "failed: " + failed + "; waiting for agreement");
    } finally {
      clearInterval(beat);
      delete state.running[lease.lease];
    }
  }

  // endWords says how a returned task ended, from the kind of the
  // pool's ledger entry for its lease (pool.Kind*); failed is the
  // failure's first line, "" for a result.
  function endWords(kind, failed) {
    switch (kind) {
      case "receipt": return failed ? "failed, and other devices failed alike: " + failed : "accepted";
      case "deviation": return "rejected: other devices agreed on other bytes";
      case "unverified": return "unverified: no agreement was reached";
      default: return kind;
    }
  }

  // showWork says whether the tab computes or waits for work.
  function showWork() {
    if (!running) return;
    const cores = plural(slots, "core");
    say(busy > 0 ? "Computing " + plural(busy, "task") + " for the pool " + state.pool + " on " + cores
      : "Ready on " + cores + ": waiting for work from the pool " + state.pool);
  }

  // slotLoop leases one task at a time with POST /v1/work (which carries
  // the transfer reports queued) and computes it.
  async function slotLoop(slot) {
    while (running) {
      let r;
      try {
        r = await work({ lease: 1 });
      } catch (e) {
        fail("lease", e);
        await sleep(2000);
        continue;
      }
      if (r.lease_error) {
        if (r.lease_error.code === "no_offer") {
          try { await sendOffer(); } catch (e2) { fail("offer", e2); }
        } else fail("lease", r.lease_error.error || "HTTP " + r.lease_error.status);
        await sleep(2000);
        continue;
      }
      if (!r.leases.length) {
        showWork();
        await sleep(1000);
        continue;
      }
      for (const lease of r.leases) {
        if (!running) { await release(lease); continue; }
        busy++;
        showWork();
        try {
          await compute(slot, lease);
        } catch (e) {
          fail("task " + lease.task + " of job " + short(lease.job), e);
          await release(lease);
          await sleep(2000); // not at once to the next task, which may fail alike
        } finally {
          busy--;
          showWork();
        }
      }
    }
    slot.worker.terminate();
  }

  // ---- receipts ----

  // receipts fetches the ledger entries naming this device that came
  // since the last (GET /v1/receipts?after=), shows the newest 50 and
  // marks the rows of the tasks they end. state.receipts keeps the
  // newest 1000.
  let receiptSeq = 0, receiptCost = 0, receiptsBusy = false;
  async function receipts() {
    if (receiptsBusy) return; // the last call is still under way
    receiptsBusy = true;
    try {
      for (;;) {
        const r = await api("GET", "/v1/receipts?after=" + receiptSeq + "&max=1000");
        for (const e of r.entries) {
          receiptSeq = Math.max(receiptSeq, e.seq);
          receiptCost += Number(e.cost || 0);
          state.receiptCount++;
          state.receipts.push(e);
          const end = endings.get(e.lease);
          if (end) {
            endings.delete(e.lease);
            end(e.kind);
          }
        }
        if (state.receipts.length > 1000) state.receipts.splice(0, state.receipts.length - 1000);
        if (r.entries.length < 1000) break;
      }
      if (state.receiptCount && state.firstReceiptMs === null) state.firstReceiptMs = performance.now() - state.openedAt;
      const body = $("receipts");
      body.textContent = "";
      for (const e of state.receipts.slice(-50).reverse()) {
        const tr = document.createElement("tr");
        for (const v of [e.seq, short(e.job), e.task, e.cost, e.kind]) {
          const td = document.createElement("td");
          td.textContent = String(v === undefined ? "" : v);
          tr.appendChild(td);
        }
        body.appendChild(tr);
      }
      $("receiptsum").textContent = (state.receiptCount === 1 ? "1 ledger entry" : state.receiptCount + " ledger entries") + ", " + receiptCost.toFixed(3) + " cost units, signed by the pool (GET /v1/ledger to audit)";
    } catch (e) {
      fail("receipts", e);
    } finally {
      receiptsBusy = false;
    }
  }

  // ---- start, stop, close ----

  async function start() {
    $("start").disabled = true;
    try {
      const db = await openDB();
      const o = await ownerFor(db);
      const reg = await api("POST", "/v1/peers", { key: b64(dev.pub), owner_key: b64(o.pub), endorsement: b64(o.endorsement), name: "browser" });
      state.owner = reg.owner;
      $("owner").textContent = reg.owner + (owner && o.pub === owner.pub ? " (this browser's own)" : " (linked)");
      await sendOffer();
    } catch (e) {
      say("Could not join: " + fail("join", e));
      $("start").disabled = false;
      return;
    }
    running = true;
    slots = Math.max(1, Number($("cores").value));
    $("stop").disabled = false;
    showWork();
    offerTimer = setInterval(() => sendOffer().catch((e) => fail("offer", e)), 120000);
    receiptTimer = setInterval(receipts, 3000);
    for (let i = 0; i < slots; i++) slotLoop({ worker: newWorker() });
  }

  function stop() {
    running = false;
    clearInterval(offerTimer);
    clearInterval(receiptTimer);
    $("stop").disabled = true;
    $("start").disabled = false;
    window.idlepoolP2P.closeAll();
    report();
    say("Stopped: the tasks running now finish and are returned");
  }

  // On closing the tab the tasks in hand are handed back with the
  // releases signed in advance (a closing page cannot wait for a
  // signature); those that do not arrive expire and are leased again.
  window.addEventListener("pagehide", () => {
    for (const [id, auth] of held) {
      fetch("/v1/leases/" + id + "/release", { method: "POST", keepalive: true, headers: { Authorization: auth } });
    }
    held.clear();
  });

  async function init() {
    try {
      build = await (await fetch("/join/build.json")).json();
      const pool = await (await fetch("/v1/pool")).json();
      state.pool = pool.pool;
      $("pool").textContent = pool.pool;
      memFS();
      coreModule = await WebAssembly.compileStreaming(fetch("/join/core.wasm"));
      core = await new Promise((resolve, reject) => {
        window.idlepoolCoreReady = () => resolve(window.idlepoolCore);
        const go = new Go();
        WebAssembly.instantiate(coreModule, go.importObject).then((inst) => go.run(inst)).catch(reject);
      });
      await loadKeys();
      const hc = navigator.hardwareConcurrency || 2;
      $("cores").max = String(hc);
      $("cores").value = params.get("cores") || String(Math.max(1, Math.floor(hc / 2)));
      say("Ready: press Start to compute for the pool");
    } catch (e) {
      say("This browser cannot join: " + fail("load", e));
      return;
    }
    $("start").addEventListener("click", start);
    $("stop").addEventListener("click", stop);
    for (const r of document.querySelectorAll("input[name=owner]")) {
      r.addEventListener("change", () => { $("link").hidden = r.value !== "link" || !r.checked; });
    }
    if (params.get("start") === "1") start();
  }
  init();
})();
