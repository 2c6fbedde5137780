// p2p.js: the browser peer's end of the device-to-device data plane. It
// fetches a job's file in chunks from the native devices that hold them,
// over WebRTC data channels, speaking the protocols of the native agents
// (the Go package p2p, RATIONALE.md "Peer-to-peer data plane"):
//
//   - signalling through the pool (POST and GET /v1/signals): every
//     signal is signed with the device key over p2p.Signal's signed
//     bytes, numbered (seq climbs), and carries the SHA-256 fingerprint
//     of this browser's DTLS certificate, so the device at the other end
//     knows the connection is this device's; a signal that arrives is
//     checked against the sender's key the pool vouches for;
//   - four pre-negotiated data channels (IDs 0..3, "chunks-N"), as a
//     native Node opens them;
//   - the chunk protocol: request 'q' id[4] digest[32], answered by
//     frames 'r' id[4] status[1] last[1] payload of at most 60 KiB (every
//     message is under 64 KiB); at most 16 requests open per channel, and
//     nothing is sent while a channel buffers more than HIGH_WATER bytes
//     (bufferedamountlow wakes the sender).
//
// Which device holds which chunk comes from the pool's tracker (GET
// /v1/blobs/{digest}/chunks, POST /v1/chunks/holders); a chunk no device
// gives within the limits comes from the pool (GET /v1/chunks/{digest}).
// Every chunk is checked against its SHA-256 wherever it came from. This
// browser serves no chunks itself: it answers every request "not found".
//
// When the page came from a pool on this machine's loopback (tests,
// and a pool on one machine), ICE keeps to loopback candidates, as a
// native agent of such a pool does (p2p.Config.LoopbackOnly).
//
// window.idlepoolP2P.fetchFile(digest, ctx) returns {bytes, path,
// peerBytes, directBytes, relayedBytes, poolBytes, peers} or throws
// (peerBytes = directBytes + relayedBytes: the chunks from devices, by
// the path of the connection each came over); ctx is {api, sign, peer,
// core} from join.js. window.idlepoolP2P.conns() lists the connections.
(() => {
  "use strict";
  const enc = new TextEncoder();
  const CHANNELS = 4; // p2p.DefaultChannels
  const MAX_IN_FLIGHT = 16; // p2p's maxInFlight
  const MAX_CHUNK_BYTES = 4 << 20; // p2p.DefaultMaxChunkBytes
  const MAX_FRAME_BYTES = 64 << 10; // every data-channel message is at most this
  const HIGH_WATER = 1 << 20; // bufferedAmount above which a sender waits
  const LOW_WATER = 256 << 10;
  const CONNECT_MS = 15000;
  const REQUEST_MS = 30000;
  const DOWN_MS = 60000; // a device that failed is not asked again for this long
  const MAX_HOLDER_ASK = 256; // chunks per holders request, well under coord.MaxChunksPerRequest
  const STATUS = { OK: 0, NOT_FOUND: 1, ERROR: 2, TOO_LARGE: 3 };

  const hex = (b) => Array.from(new Uint8Array(b), (x) => x.toString(16).padStart(2, "0")).join("");
  const unhex = (s) => Uint8Array.from(s.match(/../g), (x) => parseInt(x, 16));
  const b64 = (b) => btoa(String.fromCharCode(...new Uint8Array(b)));
  const unb64 = (s) => Uint8Array.from(atob(s), (c) => c.charCodeAt(0));
  const loopbackPool = ["127.0.0.1", "localhost", "[::1]"].includes(location.hostname);

  // ---- signals ----

  // signedBytes is p2p.Signal's signedBytes: the domain, then each field
  // as a 4-byte big-endian length and its bytes.
  function signedBytes(s) {
    const parts = [];
    const field = (b) => {
      const len = new Uint8Array(4);
      new DataView(len.buffer).setUint32(0, b.length);
      parts.push(len, b);
    };
    const u64 = (n) => {
      const b = new Uint8Array(8);
      new DataView(b.buffer).setBigUint64(0, BigInt.asUintN(64, BigInt(n)));
      return b;
    };
    for (const v of ["idlepool/signal/v1", s.from, s.to, s.session]) field(enc.encode(v));
    field(u64(s.seq));
    field(u64(s.sentMs));
    for (const v of [s.kind, s.sdp || "", s.fingerprint || "", s.candidate || "", s.reason || ""]) field(enc.encode(v));
    const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
    let o = 0;
    for (const p of parts) { out.set(p, o); o += p.length; }
    return out;
  }

  let ctx = null; // join.js's {api, sign, peer, core}
  // Sequence numbers start at the clock in microseconds (under 2^53), so
  // a reloaded page's signals climb above the last page's.
  let seq = Date.now() * 1000;
  let sending = Promise.resolve(); // signals go out in the order made
  const sessions = new Map(); // session -> Conn
  const byPeer = new Map(); // device ID -> Conn (open or opening)
  const down = new Map(); // device ID -> time it last failed
  let polling = false;

  function send(to, session, kind, fields) {
    const s = Object.assign({ from: ctx.peer(), to, session, kind }, fields);
    sending = sending.then(async () => {
      s.seq = ++seq;
      s.sentMs = Date.now();
      const sig = await ctx.sign(signedBytes(s));
      await ctx.api("POST", "/v1/signals", Object.assign({}, s, { sig: b64(sig) }));
    }).catch((e) => {
      console.warn("signal " + kind + " to " + to + " not sent: " + e.message);
      // 410 peer_offline: the device stopped listening for signals (it
      // quit or was killed): the connection fails now, not after
      // CONNECT_MS, as a native device's does (p2p.ErrPeerOffline).
      const c = sessions.get(session);
      if (e.status === 410 && e.code === "peer_offline" && c) c.fail(new Error(to + " is offline: " + e.message));
    });
    return sending;
  }

  // poll long-polls the mailbox while some connection is being set up
  // or is open; signals of sessions gone are dropped.
  async function poll() {
    if (polling) return;
    polling = true;
    try {
      while (sessions.size > 0) {
        let r;
        try {
          // A native device numbers its signals from the clock in
          // nanoseconds, past what a JavaScript number holds exactly:
          // seq is read as a string, and signed as the integer it is.
          const raw = new TextDecoder().decode(await ctx.api("GET", "/v1/signals?waitMs=20000", undefined, true));
          r = JSON.parse(raw.replace(/([{,])"seq":(\d+)/g, '$1"seq":"$2"'));
        } catch (e) {
          console.warn("signals: " + e.message);
          await new Promise((res) => setTimeout(res, 1000));
          continue;
        }
        for (const s of r.signals || []) {
          const c = sessions.get(s.session);
          if (!c || c.peer !== s.from) continue;
          if (!verify(s)) {
            c.fail(new Error("a signal from " + s.from + " does not verify"));
            continue;
          }
          c.signal(s);
        }
      }
    } finally {
      polling = false;
    }
  }

  // verify checks a delivered signal against the key the pool vouches
  // for: the key is the sender's, and the signature is over its fields.
  function verify(s) {
    if (!s.fromKey || !s.sig) return false;
    const pub = unb64(s.fromKey);
    if (ctx.core.peerID(pub) !== s.from) return false;
    return ctx.core.edVerify(pub, signedBytes(s), s.sig) === true;
  }

  // ---- connections ----

  function fingerprintOf(sdp) {
    const fps = sdp.split(/\r?\n/).filter((l) => l.startsWith("a=fingerprint:")).map((l) => l.slice(14).trim());
    if (!fps.length || fps.some((f) => f.toLowerCase() !== fps[0].toLowerCase())) throw new Error("this browser's offer has no single DTLS fingerprint");
    return fps[0];
  }

  const loopbackCandidate = (c) => {
    const f = (c || "").split(" ");
    return f.length > 4 && (f[4] === "127.0.0.1" || f[4] === "::1");
  };

  // Conn is one RTCPeerConnection to a native device, as this browser's
  // offer: open() resolves once its data channels are open.
  class Conn {
    constructor(peer) {
      this.peer = peer;
      this.session = hex(crypto.getRandomValues(new Uint8Array(16)));
      this.pending = new Map(); // request id -> {parts, len, status, resolve, reject}
      this.nextID = 0;
      this.rr = 0;
      this.remoteSet = false;
      this.early = []; // candidates before the answer
      this.path = "direct";
      this.closed = false;
      this.opened = new Promise((res, rej) => { this.resolveOpen = res; this.rejectOpen = rej; });
      this.opened.catch(() => {});
    }

    async open() {
      this.began = performance.now();
      sessions.set(this.session, this);
      poll();
      const timer = setTimeout(() => this.fail(new Error("no connection to " + this.peer + " within " + CONNECT_MS / 1000 + " s")), CONNECT_MS);
      this.opened.finally(() => clearTimeout(timer)).catch(() => {});
      try {
        const ice = await ctx.api("GET", "/v1/ice");
        const pc = new RTCPeerConnection({ iceServers: ice.iceServers || [] });
        this.pc = pc;
        this.chans = [];
        let open = 0;
        for (let i = 0; i < CHANNELS; i++) {
          const dc = pc.createDataChannel("chunks-" + i, { negotiated: true, id: i });
          dc.binaryType = "arraybuffer";
          dc.bufferedAmountLowThreshold = LOW_WATER;
          const ch = { dc, inflight: 0, waiters: [] };
          dc.onopen = () => { if (++open === CHANNELS) this.ready(); };
          dc.onclose = () => this.fail(new Error("data channel " + dc.label + " to " + this.peer + " closed"));
          dc.onmessage = (ev) => this.receive(ch, ev.data);
          this.chans.push(ch);
        }
        pc.onicecandidate = (ev) => {
          if (!ev.candidate || !ev.candidate.candidate) return;
          if (loopbackPool && !loopbackCandidate(ev.candidate.candidate)) return;
          send(this.peer, this.session, "candidate", { candidate: JSON.stringify(ev.candidate.toJSON()) });
        };
        pc.onconnectionstatechange = () => {
          if (pc.connectionState === "failed" || pc.connectionState === "closed") this.fail(new Error("the connection to " + this.peer + " " + pc.connectionState));
        };
        const offer = await pc.createOffer();
        await pc.setLocalDescription(offer);
        const sdp = pc.localDescription.sdp;
        await send(this.peer, this.session, "offer", { sdp, fingerprint: fingerprintOf(sdp) });
      } catch (e) {
        this.fail(e);
      }
      return this.opened;
    }

    // signal handles a verified signal of this session.
    async signal(s) {
      try {
        if (s.kind === "answer" && !this.remoteSet) {
          await this.pc.setRemoteDescription({ type: "answer", sdp: s.sdp });
          this.remoteSet = true;
          for (const c of this.early.splice(0)) await this.addCandidate(c);
        } else if (s.kind === "candidate") {
          if (this.remoteSet) await this.addCandidate(s.candidate);
          else if (this.early.length < 64) this.early.push(s.candidate);
        } else if (s.kind === "bye") {
          this.fail(new Error(this.peer + " refused: " + (s.reason || "no reason")));
        }
      } catch (e) {
        this.fail(e);
      }
    }

    async addCandidate(text) {
      const init = JSON.parse(text);
      if (loopbackPool && !loopbackCandidate(init.candidate)) return;
      await this.pc.addIceCandidate(init);
    }

    async ready() {
      try {
        // direct or relayed: the selected candidate pair's types.
        const stats = await this.pc.getStats();
        let pair = null;
        stats.forEach((r) => { if (r.type === "transport" && r.selectedCandidatePairId) pair = stats.get(r.selectedCandidatePairId); });
        if (pair) {
          const l = stats.get(pair.localCandidateId), r = stats.get(pair.remoteCandidateId);
          if ((l && l.candidateType === "relay") || (r && r.candidateType === "relay")) this.path = "relayed";
        }
      } catch (_) { /* the path stays "direct", the only other one being seen in stats */ }
      this.setupMs = Math.round(performance.now() - this.began);
      this.resolveOpen();
    }

    fail(err) {
      if (this.closed) return;
      this.closed = true;
      this.err = err;
      this.rejectOpen(err);
      for (const p of this.pending.values()) p.reject(err);
      this.pending.clear();
      sessions.delete(this.session);
      if (byPeer.get(this.peer) === this) byPeer.delete(this.peer);
      down.set(this.peer, Date.now());
      if (this.pc) this.pc.close();
    }

    close() {
      if (this.closed) return;
      send(this.peer, this.session, "bye", { reason: "closed" });
      this.fail(new Error("closed"));
      down.delete(this.peer);
    }

    // sendOn sends one message on ch once its buffer is below HIGH_WATER.
    async sendOn(ch, msg) {
      if (msg.length > MAX_FRAME_BYTES) throw new Error("message of " + msg.length + " bytes is over " + MAX_FRAME_BYTES);
      while (ch.dc.bufferedAmount > HIGH_WATER) {
        await new Promise((res) => ch.dc.addEventListener("bufferedamountlow", res, { once: true }));
        if (this.closed) throw this.err;
      }
      ch.dc.send(msg);
    }

    receive(ch, data) {
      const b = new Uint8Array(data);
      if (typeof data === "string" || b.length === 0) return this.fail(new Error(this.peer + " broke the chunk protocol: a text message"));
      if (b[0] === 0x71 && b.length === 37) {
        // A request: this browser holds no chunks.
        const frame = new Uint8Array(7);
        frame[0] = 0x72; frame.set(b.subarray(1, 5), 1); frame[5] = STATUS.NOT_FOUND; frame[6] = 1;
        this.sendOn(ch, frame).catch(() => {});
        return;
      }
      if (b[0] !== 0x72 || b.length < 7) return this.fail(new Error(this.peer + " broke the chunk protocol: message of type " + b[0]));
      const id = new DataView(b.buffer, b.byteOffset).getUint32(1);
      const p = this.pending.get(id);
      if (!p) return; // the answer to a request given up on
      p.status = b[5];
      p.len += b.length - 7;
      if (p.len > MAX_CHUNK_BYTES) {
        this.pending.delete(id);
        return p.reject(new Error(this.peer + " sent a chunk over " + MAX_CHUNK_BYTES + " bytes"));
      }
      p.parts.push(b.slice(7));
      if (b[6] === 1) {
        this.pending.delete(id);
        const out = new Uint8Array(p.len);
        let o = 0;
        for (const part of p.parts) { out.set(part, o); o += part.length; }
        p.resolve({ status: p.status, bytes: out });
      }
    }

    // fetch asks for the chunk named digest (hex) and returns its bytes
    // once their SHA-256 is digest; null when the device has no such chunk.
    async fetch(digest) {
      await this.opened;
      const ch = this.chans[this.rr++ % this.chans.length];
      while (ch.inflight >= MAX_IN_FLIGHT) await new Promise((res) => ch.waiters.push(res));
      ch.inflight++;
      const id = (this.nextID = (this.nextID + 1) >>> 0);
      let timer;
      try {
        const answer = new Promise((resolve, reject) => {
          this.pending.set(id, { parts: [], len: 0, status: 0, resolve, reject });
          timer = setTimeout(() => { this.pending.delete(id); reject(new Error("no chunk from " + this.peer + " within " + REQUEST_MS / 1000 + " s")); }, REQUEST_MS);
        });
        const req = new Uint8Array(37);
        req[0] = 0x71;
        new DataView(req.buffer).setUint32(1, id);
        req.set(unhex(digest), 5);
        await this.sendOn(ch, req);
        const a = await answer;
        if (a.status === STATUS.NOT_FOUND) return null;
        if (a.status !== STATUS.OK) throw new Error(this.peer + " cannot give chunk " + digest.slice(0, 12) + " (status " + a.status + ")");
        const sum = hex(await crypto.subtle.digest("SHA-256", a.bytes));
        if (sum !== digest) throw new Error(this.peer + " sent other bytes for chunk " + digest.slice(0, 12));
        return a.bytes;
      } finally {
        clearTimeout(timer);
        ch.inflight--;
        const w = ch.waiters.shift();
        if (w) w();
      }
    }
  }

  function connTo(peer) {
    let c = byPeer.get(peer);
    if (!c) {
      c = new Conn(peer);
      byPeer.set(peer, c);
      c.open().catch(() => {}); // its fetches see why it failed
    }
    return c;
  }

  // ---- files ----

  async function fromPool(digest) {
    const r = await fetch("/v1/chunks/" + digest);
    if (!r.ok) throw new Error("the pool has no chunk " + digest + " (HTTP " + r.status + ")");
    const b = new Uint8Array(await r.arrayBuffer());
    const sum = hex(await crypto.subtle.digest("SHA-256", b));
    if (sum !== digest) throw new Error("chunk " + digest + " came from the pool with SHA-256 " + sum);
    return b;
  }

  // chunk gets one chunk from the devices that hold it, else the pool.
  async function chunk(digest, holders, got) {
    for (const peer of holders || []) {
      if (peer === ctx.peer()) continue;
      const d = down.get(peer);
      if (d && Date.now() - d < DOWN_MS) continue;
      const c = connTo(peer);
      try {
        const b = await c.fetch(digest);
        if (b) {
          got.peerBytes += b.length;
          if (c.path === "relayed") got.relayedBytes += b.length;
          else got.directBytes += b.length;
          got.peers.set(peer, c.path);
          return b;
        }
      } catch (e) {
        console.warn("chunk " + digest.slice(0, 12) + " from " + peer + ": " + e.message);
      }
    }
    const b = await fromPool(digest);
    got.poolBytes += b.length;
    return b;
  }

  async function fetchFile(digest, c) {
    ctx = c;
    const r = await fetch("/v1/blobs/" + digest + "/chunks");
    if (!r.ok) return null; // a pool from before chunks: the whole file from it
    const m = await r.json();
    const list = m.chunks.map((x) => x.sha256);
    const holders = {};
    for (let i = 0; i < list.length; i += MAX_HOLDER_ASK) {
      const h = await ctx.api("POST", "/v1/chunks/holders", { chunks: list.slice(i, i + MAX_HOLDER_ASK) });
      Object.assign(holders, h.holders || {});
    }
    const got = { peerBytes: 0, directBytes: 0, relayedBytes: 0, poolBytes: 0, peers: new Map() };
    const parts = await Promise.all(list.map((d) => chunk(d, holders[d], got)));
    const bytes = new Uint8Array(m.size);
    let o = 0;
    for (const p of parts) {
      if (o + p.length > bytes.length) throw new Error("the chunks of file " + digest + " are longer than its " + m.size + " bytes");
      bytes.set(p, o);
      o += p.length;
    }
    if (o !== bytes.length) throw new Error("the chunks of file " + digest + " are shorter than its " + m.size + " bytes");
    const via = [...got.peers].map(([p, path]) => "peer " + p.slice(0, 12) + " (" + path + ")");
    if (got.poolBytes > 0) via.push("pool");
    return { bytes, path: via.join(" + "), peerBytes: got.peerBytes, directBytes: got.directBytes, relayedBytes: got.relayedBytes,
      poolBytes: got.poolBytes, peers: [...got.peers.keys()] };
  }

  // closeAll ends every connection (Stop, or the tab closing).
  function closeAll() {
    for (const c of [...byPeer.values()]) c.close();
  }

  function conns() {
    return [...byPeer.values()].map((c) => ({ peer: c.peer, path: c.path, open: !c.closed, setupMs: c.setupMs }));
  }

  window.idlepoolP2P = { fetchFile, closeAll, conns, signedBytes };
})();
