// wasi.js: idlepool's WASI preview 1 host for browsers and Node, following
// the determinism profile (docs/determinism.md) exactly, so that a task run
// here gives the bytes the native worker (worker/, wazero) gives.
//
// API (an ES module; no dependencies; runs in a Web Worker, a page or Node 18+):
//
//   runTask(module, stdin, opts) -> Promise<Result>
//
//     module       Uint8Array | ArrayBuffer | WebAssembly.Module: the
//                  task's WebAssembly module, a WASI preview 1 command. To
//                  count work like the native worker (Result.work), pass
//                  the module as the worker runs it: metered
//                  (worker/meter.go, MeterRule); an unmetered module runs
//                  the same and reports work 0. A WebAssembly.Module is
//                  run as it is: its memory must already be capped (the
//                  browser peer's core.prepare does it), and
//                  opts.memoryLimitPages is not applied to it.
//     stdin        Uint8Array: the task's JSON (what the native worker puts
//                  on the module's stdin, worker.Request.Stdin).
//     opts.seed    Uint8Array(32) or 64 hex digits: the task's seed
//                  (worker.Request.Seed); random_get returns the ChaCha8
//                  stream of math/rand/v2 seeded with it.
//     opts.random  optional, instead of opts.seed: a function n ->
//                  Uint8Array(n) giving the task's random stream.
//     opts.inputDir  true: fd 3 is an empty directory preopened at
//                  /input, as the native worker mounts a job's input
//                  directory (a pool task always has one, so the browser
//                  peer sets this: Go's runtime walks the preopens at
//                  start, and the work count differs without it).
//                  Default false: fd 3 is not open, as in the vectors.
//     opts.inputs  optional {name: Uint8Array}: the task's input files,
//                  read-only in /input beside an empty /input/chunks, as
//                  the native worker mounts a pool task's input directory
//                  (implies inputDir). Names are file names (letters,
//                  digits, '_', '-', '.').
//     opts.meterExport  the exported global holding the work count;
//                  default "__idlepool_work" (worker.MeterExport).
//     opts.memoryLimitPages  linear memory cap in 64 KiB pages, 1..65536;
//                  default 4096 (256 MiB, worker.DefaultMemoryLimitMiB).
//     opts.maxStdoutBytes    default 16 MiB (worker.DefaultMaxStdoutBytes).
//     opts.maxStderrBytes    default 64 KiB (worker.DefaultMaxStderrBytes).
//
//   Result, the shape of worker.Result:
//     output   Uint8Array | null: stdout, only when the task succeeded
//     stderr   Uint8Array | null: stderr, head and tail kept as the native
//              worker keeps them; null when nothing was written
//     failure  null | {kind, message, trace?}: kind is
//              worker.FailureKind ("trap", "exit-status", "out-of-memory",
//              "output-too-large", "bad-module"); message as the native
//              worker writes it for exit-status, out-of-memory (Go report
//              or module memory), output-too-large and the traps the
//              profile names ("wasm trap: unreachable", with the engine's
//              own words in trace, which is not part of the outcome); for
//              other traps and bad-module the engine's own words, which
//              differ from wazero's (see the profile)
//     exitCode number | null: the proc_exit status (0 when _start returned)
//     work     bigint: the metered count (0n for an unmetered module)
//     error    string | null: the task could not be set up here (a module
//              that imports idlepool_cuda, which a browser cannot serve);
//              a fact about this host, never the task's outcome
//
// Time: runTask runs the module to its end on the calling thread and has no
// limit of its own. Enforce the task's time limit the way the native pool
// does, by killing the runner: call runTask in a dedicated Web Worker and
// terminate() it when the limit passes; that is a "timeout", a fact about
// the machine, never a verified outcome (DESIGN.md invariant 16).
//
// Files: this host has stdin, stdout and stderr; with opts.inputDir or
// opts.inputs, a read-only /input (fd 3) holding the task's files and an
// empty directory "chunks", answered as wazero answers the native
// worker's read-only mount: path_open (reading only; a write is ENOSYS,
// a new file EROFS), fd_read, fd_pread, fd_seek, fd_tell,
// fd_filestat_get, path_filestat_get, fd_readdir ("." and "..", then the
// names in order) and fd_close; every change is EROFS, path_readlink
// ENOSYS, a path not there ENOENT. Inode numbers are 0 and every time is
// the fake epoch (a native mount shows the host's, which no two machines
// share: a program must not depend on them). The chunks split rule's
// chunk file is not served.
//
// Also exported: chacha8(seed) -> {read(n) -> Uint8Array}, the random
// stream, and PROFILE, the profile's version (2).

export const PROFILE = 2;

const WASI = "wasi_snapshot_preview1";
const CUDA = "idlepool_cuda";
const METER_EXPORT = "__idlepool_work";
const MAX_MESSAGE_BYTES = 4096;

// errno values of WASI preview 1.
const E = {
  SUCCESS: 0, BADF: 8, FAULT: 21, INVAL: 28, ISDIR: 31, NAMETOOLONG: 37, NOENT: 44,
  EXIST: 20, NOSYS: 52, NOTDIR: 54, NOTSUP: 58, PERM: 63, SPIPE: 70, ROFS: 69,
};

// ---- the random source: Go's math/rand/v2 ChaCha8 (C2SP chacha8rand) ----

function qr(x, a, b, c, d) {
  x[a] = (x[a] + x[b]) | 0; x[d] ^= x[a]; x[d] = (x[d] << 16) | (x[d] >>> 16);
  x[c] = (x[c] + x[d]) | 0; x[b] ^= x[c]; x[b] = (x[b] << 12) | (x[b] >>> 20);
  x[a] = (x[a] + x[b]) | 0; x[d] ^= x[a]; x[d] = (x[d] << 8) | (x[d] >>> 24);
  x[c] = (x[c] + x[d]) | 0; x[b] ^= x[c]; x[b] = (x[b] << 7) | (x[b] >>> 25);
}

// block computes 4 interleaved ChaCha8 blocks for key (8 words) and
// counter into out (64 words), as internal/chacha8rand's block_generic.
function block(key, counter, out) {
  const x = new Int32Array(16);
  for (let i = 0; i < 4; i++) {
    x[0] = 0x61707865; x[1] = 0x3320646e; x[2] = 0x79622d32; x[3] = 0x6b206574;
    for (let k = 0; k < 8; k++) x[4 + k] = key[k];
    x[12] = counter + i; x[13] = 0; x[14] = 0; x[15] = 0;
    for (let r = 0; r < 4; r++) {
      qr(x, 0, 4, 8, 12); qr(x, 1, 5, 9, 13); qr(x, 2, 6, 10, 14); qr(x, 3, 7, 11, 15);
      qr(x, 0, 5, 10, 15); qr(x, 1, 6, 11, 12); qr(x, 2, 7, 8, 13); qr(x, 3, 4, 9, 14);
    }
    for (let k = 0; k < 16; k++) {
      out[k * 4 + i] = k >= 4 && k < 12 ? (x[k] + key[k - 4]) | 0 : x[k];
    }
  }
}

// chacha8 returns the byte stream that Go's rand.NewChaCha8(seed).Read
// gives: little-endian uint64s of chacha8rand, 32 per block of 4, the
// last 4 of every 4th block becoming the next key.
export function chacha8(seed) {
  const s = toBytes32(seed);
  const key = new Int32Array(8);
  const dv = new DataView(s.buffer, s.byteOffset, 32);
  for (let k = 0; k < 8; k++) key[k] = dv.getInt32(4 * k, true);
  const words = new Int32Array(64);
  const bytes = new Uint8Array(words.buffer); // little-endian on every engine that runs wasm
  let counter = 0, pos = 0, end = 256;
  block(key, counter, words);
  return {
    read(n) {
      const out = new Uint8Array(n);
      let o = 0;
      while (o < n) {
        if (pos === end) {
          counter += 4;
          if (counter === 16) {
            for (let k = 0; k < 8; k++) key[k] = words[56 + k];
            counter = 0;
          }
          block(key, counter, words);
          pos = 0;
          end = counter === 12 ? 224 : 256;
        }
        const m = Math.min(n - o, end - pos);
        out.set(bytes.subarray(pos, pos + m), o);
        o += m; pos += m;
      }
      return out;
    },
  };
}

function toBytes32(seed) {
  if (typeof seed === "string") {
    if (!/^[0-9a-fA-F]{64}$/.test(seed)) throw new Error("wasi.js: seed must be 64 hex digits");
    const b = new Uint8Array(32);
    for (let i = 0; i < 32; i++) b[i] = parseInt(seed.slice(2 * i, 2 * i + 2), 16);
    return b;
  }
  if (!(seed instanceof Uint8Array) || seed.length !== 32) throw new Error("wasi.js: seed must be 32 bytes");
  return seed;
}

// ---- stdout and stderr, as worker/capture.go keeps them ----

class OutputTooLarge extends Error {}

class StdoutBuffer {
  constructor(max) { this.max = max; this.chunks = []; this.len = 0; this.exceeded = false; }
  write(p) {
    if (this.exceeded || p.length > this.max - this.len) {
      this.exceeded = true;
      throw new OutputTooLarge();
    }
    this.chunks.push(p.slice()); this.len += p.length;
    return p.length;
  }
  bytes() { return concat(this.chunks, this.len); }
}

const enc = new TextEncoder();
const dec = new TextDecoder();
const MAX_WATCHED_LINE = 512;

function startsWith(b, s) {
  const p = enc.encode(s);
  if (b.length < p.length) return false;
  for (let i = 0; i < p.length; i++) if (b[i] !== p[i]) return false;
  return true;
}

class StderrBuffer {
  constructor(max) {
    this.max = max; this.headMax = Math.floor(max / 2); this.tailMax = max - this.headMax;
    this.head = []; this.tail = []; this.total = 0;
    this.line = []; this.lineLen = 0; this.panicLine = ""; this.outOfMem = false;
  }
  write(p) {
    this.watch(p);
    this.total += p.length;
    let rest = p;
    const n = Math.min(rest.length, this.headMax - this.head.length);
    if (n > 0) { for (let i = 0; i < n; i++) this.head.push(rest[i]); rest = rest.subarray(n); }
    if (rest.length === 0) {
      // nothing more
    } else if (rest.length >= this.tailMax) {
      this.tail = Array.from(rest.subarray(rest.length - this.tailMax));
    } else {
      for (const c of rest) this.tail.push(c);
      if (this.tail.length > 2 * this.tailMax) this.tail = this.tail.slice(this.tail.length - this.tailMax);
    }
    return p.length;
  }
  watch(p) {
    while (p.length > 0) {
      const i = p.indexOf(10);
      const chunk = i >= 0 ? p.subarray(0, i) : p;
      const room = MAX_WATCHED_LINE - this.line.length;
      if (room > 0) for (let k = 0; k < Math.min(room, chunk.length); k++) this.line.push(chunk[k]);
      this.lineLen += chunk.length;
      if (i < 0) return;
      this.endLine();
      p = p.subarray(i + 1);
    }
  }
  endLine() {
    const line = this.line;
    if (this.lineLen > 0) {
      if (startsWith(line, "fatal error: out of memory") || startsWith(line, "runtime: out of memory")) this.outOfMem = true;
      if (this.panicLine === "" && (startsWith(line, "panic: ") || startsWith(line, "fatal error: "))) {
        this.panicLine = dec.decode(new Uint8Array(line));
      }
    }
    this.line = []; this.lineLen = 0;
  }
  finish() { if (this.lineLen > 0) this.endLine(); }
  bytes() {
    if (this.total === 0) return null;
    let tail = this.tail.slice(Math.max(0, this.tail.length - this.tailMax));
    if (this.head.length + tail.length === this.total) return new Uint8Array(this.head.concat(tail));
    for (;;) {
      const omitted = this.total - this.head.length - tail.length;
      const marker = Array.from(enc.encode(`\n[... ${omitted} bytes omitted ...]\n`));
      const over = this.head.length + marker.length + tail.length - this.max;
      if (over <= 0) return new Uint8Array(this.head.concat(marker, tail));
      if (tail.length === 0) return new Uint8Array(this.head.slice(0, Math.min(this.head.length, this.max)));
      tail = tail.slice(Math.min(over, tail.length));
    }
  }
}

function concat(chunks, len) {
  const out = new Uint8Array(len);
  let o = 0;
  for (const c of chunks) { out.set(c, o); o += c.length; }
  return out;
}

// ---- path checks of wazero's atPath: Go's path.Clean and fs.ValidPath ----

function cleanPath(p) {
  if (p === "") return ".";
  const rooted = p[0] === "/";
  const out = [];
  for (const part of p.split("/")) {
    if (part === "" || part === ".") continue;
    if (part === "..") {
      if (out.length > 0 && out[out.length - 1] !== "..") out.pop();
      else if (!rooted) out.push("..");
      continue;
    }
    out.push(part);
  }
  const s = out.join("/");
  if (rooted) return "/" + s;
  return s === "" ? "." : s;
}

function validPath(name) {
  if (name === ".") return true;
  for (const elem of name.split("/")) {
    if (elem === "" || elem === "." || elem === "..") return false;
  }
  return true;
}

// ---- the module: checks and the memory limit, as the native worker ----

function readLEB(b, pos) {
  let result = 0, shift = 0, byte;
  do {
    if (pos >= b.length) throw new Error("truncated LEB128");
    byte = b[pos++];
    result += (byte & 0x7f) * 2 ** shift;
    shift += 7;
  } while (byte & 0x80);
  return [result, pos];
}

function writeLEB(n) {
  const out = [];
  do {
    let byte = n % 128;
    n = Math.floor(n / 128);
    if (n > 0) byte |= 0x80;
    out.push(byte);
  } while (n > 0);
  return out;
}

function pagesToUnit(pages) {
  const k = pages * 64;
  if (k < 1024) return `${k} Ki`;
  const m = Math.floor(k / 1024);
  if (m < 1024) return `${m} Mi`;
  const g = Math.floor(m / 1024);
  if (g < 1024) return `${g} Gi`;
  return `${Math.floor(g / 1024)} Ti`;
}

// limitMemory gives the module's own memory the worker's cap: a maximum
// over the limit or a minimum over it is out-of-memory (wazero's
// Memory.Validate, same words); a missing maximum becomes the limit, so
// that memory.grow past it fails as it does under wazero.
function limitMemory(bin, limit) {
  if (bin.length < 8) return { bin };
  let pos = 8;
  while (pos < bin.length) {
    const id = bin[pos];
    let size, start;
    [size, start] = readLEB(bin, pos + 1);
    if (id === 5) {
      let [count, p] = readLEB(bin, start);
      if (count !== 1) return { bin };
      const flags = bin[p++];
      let min, max = null;
      [min, p] = readLEB(bin, p);
      if (flags & 1) [max, p] = readLEB(bin, p);
      if (max !== null && max > limit) return { failure: `module memory max ${max} pages (${pagesToUnit(max)}) over limit of ${limit} pages (${pagesToUnit(limit)})` };
      if (min > limit) return { failure: `module memory min ${min} pages (${pagesToUnit(min)}) over limit of ${limit} pages (${pagesToUnit(limit)})` };
      if (max !== null) return { bin };
      const content = [1, (flags | 1) & 0xff, ...writeLEB(min), ...writeLEB(limit)];
      const section = [5, ...writeLEB(content.length), ...content];
      const out = new Uint8Array(pos + section.length + (bin.length - start - size));
      out.set(bin.subarray(0, pos), 0);
      out.set(section, pos);
      out.set(bin.subarray(start + size), pos + section.length);
      return { bin: out };
    }
    pos = start + size;
  }
  return { bin };
}

const compiled = new Map(); // key -> WebAssembly.Module, at most 8

async function sha256hex(bin) {
  const d = new Uint8Array(await crypto.subtle.digest("SHA-256", bin));
  return Array.from(d, (b) => b.toString(16).padStart(2, "0")).join("");
}

function clip(s) {
  const b = enc.encode(s);
  if (b.length <= MAX_MESSAGE_BYTES) return s;
  return dec.decode(b.subarray(0, MAX_MESSAGE_BYTES)) + " [...]";
}

async function compile(bin, pages) {
  const key = (await sha256hex(bin)) + ":" + pages;
  let m = compiled.get(key);
  if (m) return { module: m };
  const lim = limitMemory(bin, pages);
  if (lim.failure) return { failure: { kind: "out-of-memory", message: clip(lim.failure) } };
  try {
    m = await WebAssembly.compile(lim.bin);
  } catch (e) {
    return { failure: { kind: "bad-module", message: clip("compile: " + String(e && e.message || e)) } };
  }
  const checked = check(m);
  if (checked.module === undefined) return checked;
  if (compiled.size >= 8) compiled.delete(compiled.keys().next().value);
  compiled.set(key, m);
  return { module: m };
}

// check refuses a module the native worker refuses: one that is not a
// WASI command or that imports memory or modules it cannot have.
function check(m) {
  const exp = WebAssembly.Module.exports(m);
  if (!exp.some((e) => e.name === "_start" && e.kind === "function")) {
    return { failure: { kind: "bad-module", message: "not a WASI command: no exported function _start() without parameters and results" } };
  }
  for (const imp of WebAssembly.Module.imports(m)) {
    if (imp.kind === "memory") {
      return { failure: { kind: "bad-module", message: `imports memory ${imp.module}.${imp.name}: modules must define their own` } };
    }
    if (imp.module === CUDA) return { error: `the module imports ${CUDA}.${imp.name}: this host has no GPU; the task is for native devices` };
    if (imp.module !== WASI) {
      return { failure: { kind: "bad-module", message: `imports ${imp.module}.${imp.name}: only ${WASI} and ${CUDA} are available` } };
    }
  }
  return { module: m };
}

// ---- the profile's host functions ----

class Exit { constructor(code) { this.code = code; } }

const FAKE_EPOCH_NS = 1640995200000000000n;
const TICK_NS = 1000000n;
const REALTIME_RESOLUTION_NS = 1000n;
const MONOTONIC_RESOLUTION_NS = 1n;

// File types and rights as the native worker reports stdio (wazero: a
// device of mode 0640, which WASI calls a block device).
const FILETYPE_BLOCK_DEVICE = 1;
const FILETYPE_DIRECTORY = 3;
const FILETYPE_REGULAR_FILE = 4;
// wazero's dirRightsBase (imports/wasi_snapshot_preview1/fs.go): the
// rights it reports for a directory.
const DIR_RIGHTS_BASE = 0x1 | 0x8 | 0x10 | 0x200 | 0x400 | 0x800 | 0x1000 | 0x2000 | 0x4000 |
  0x8000 | 0x10000 | 0x20000 | 0x40000 | 0x80000 | 0x100000 | 0x200000 | 0x800000 |
  0x1000000 | 0x2000000 | 0x4000000;
const INPUT_DIR = "/input";
const FILE_RIGHTS_BASE = 0x1 | 0x2 | 0x4 | 0x8 | 0x10 | 0x20 | 0x40 | 0x80 | 0x100 |
  0x200000 | 0x400000 | 0x800000 | 0x8000000;

function makeHost(state) {
  const mem = () => state.memory;
  const view = () => new DataView(state.memory.buffer);
  const size = () => state.memory.buffer.byteLength;
  const inRange = (p, n) => (p >>> 0) + n <= size();
  const u32 = (x) => x >>> 0;
  const fds = state.fds;

  const w32 = (p, v) => { p >>>= 0; if (!inRange(p, 4)) return false; view().setUint32(p, v, true); return true; };
  const w64 = (p, v) => { p >>>= 0; if (!inRange(p, 8)) return false; view().setBigUint64(p, BigInt.asUintN(64, BigInt(v)), true); return true; };

  function readv(iovs, count, reader) {
    let n = 0;
    const stop = count * 8;
    if (!inRange(iovs, stop)) return [0, E.FAULT];
    const dv = view();
    for (let pos = 0; pos < stop; pos += 8) {
      const off = dv.getUint32(iovs + pos, true);
      const l = dv.getUint32(iovs + pos + 4, true);
      if (l === 0) continue;
      if (!inRange(off, l)) return [0, E.FAULT];
      const [got, errno] = reader(new Uint8Array(mem().buffer, off, l));
      n += got;
      if (errno === E.NOSYS) return [0, E.BADF];
      if (errno !== 0) return [0, errno];
      if (got < l) break;
    }
    return [n, 0];
  }

  function writev(iovs, count, writer) {
    let n = 0;
    const stop = count * 8;
    if (!inRange(iovs, stop)) return [0, E.FAULT];
    const dv = view();
    for (let pos = 0; pos < stop; pos += 8) {
      const off = dv.getUint32(iovs + pos, true);
      const l = dv.getUint32(iovs + pos + 4, true);
      if (!inRange(off, l)) return [0, E.FAULT];
      const [got, errno] = writer(new Uint8Array(mem().buffer, off, l));
      n += got;
      if (errno === E.NOSYS) return [0, E.BADF];
      if (errno !== 0) return [0, errno];
    }
    return [n, 0];
  }

  // The files: 0 stdin, 1 stdout, 2 stderr; every other descriptor is
  // closed. Each method answers as wazero's stdio files do.
  const read = (f, buf) => {
    if (f.kind === "file") {
      const n = Math.max(0, Math.min(buf.length, f.data.length - f.pos));
      buf.set(f.data.subarray(f.pos, f.pos + n));
      f.pos += n;
      return [n, 0];
    }
    if (f.kind === "dir") return [0, E.ISDIR];
    if (f.kind !== "stdin") return [0, E.NOSYS];
    const n = Math.min(buf.length, state.stdin.length - state.stdinPos);
    buf.set(state.stdin.subarray(state.stdinPos, state.stdinPos + n));
    state.stdinPos += n;
    return [n, 0];
  };
  const write = (f, buf) => {
    if (f.kind === "stdout") return [state.stdout.write(buf), 0];
    if (f.kind === "stderr") return [state.stderr.write(buf), 0];
    return [0, E.NOSYS];
  };

  function stringsSizes(list) {
    return list.reduce((n, s) => n + enc.encode(s).length + 1, 0);
  }
  function writeStrings(list, ptrs, buf) {
    ptrs >>>= 0; buf >>>= 0;
    const total = stringsSizes(list);
    if (!inRange(ptrs, 4 * list.length) || !inRange(buf, total)) return E.FAULT;
    let p = buf;
    list.forEach((s, i) => {
      const b = enc.encode(s);
      view().setUint32(ptrs + 4 * i, p, true);
      new Uint8Array(mem().buffer, p, b.length + 1).set([...b, 0]);
      p += b.length + 1;
    });
    return 0;
  }

  const args = ["program"];
  const environ = [];

  // resolve finds a path under the directory open at fd, as wazero's
  // atPath does: {errno} or {path (relative to /input), node (null when
  // there is none), slash (the path ended in '/')}.
  function resolve(fd, p, len) {
    if (!inRange(p, len)) return { errno: E.FAULT };
    const name = dec.decode(new Uint8Array(mem().buffer, p, len));
    const clean = cleanPath(name);
    if (!validPath(clean)) return { errno: E.PERM };
    const f = fds.get(fd);
    if (!f) return { errno: E.BADF };
    if (f.kind !== "dir") return { errno: E.NOTDIR }; // a stdio stream or a file
    const path = clean === "." ? f.path : f.path === "" ? clean : f.path + "/" + clean;
    return { errno: 0, path, node: state.tree.get(path) || null, slash: name.endsWith("/") };
  }

  // atPath answers a change under a directory: EROFS, as the native
  // worker's read-only mount refuses every change, once the path is
  // valid.
  function atPath(fd, p, len) {
    const r = resolve(fd, p, len);
    return r.errno || E.ROFS;
  }

  function writeFilestat(buf, node) {
    buf = u32(buf);
    if (!inRange(buf, 64)) return E.FAULT;
    const dv = view();
    dv.setBigUint64(buf, 0n, true); // dev
    dv.setBigUint64(buf + 8, 0n, true); // ino
    dv.setBigUint64(buf + 16, BigInt(node.kind === "dir" ? FILETYPE_DIRECTORY : FILETYPE_REGULAR_FILE), true);
    dv.setBigUint64(buf + 24, 1n, true); // nlink
    dv.setBigUint64(buf + 32, BigInt(node.kind === "file" ? node.data.length : 0), true);
    // Times: the profile's fake epoch. A native mount shows the host
    // file's own, which no two machines share, but a program that turns
    // one into a time.Time does the same work for any real time, and not
    // for 0 (Go's time.Unix normalises nanoseconds past a second).
    for (let o = 40; o < 64; o += 8) dv.setBigUint64(buf + o, FAKE_EPOCH_NS, true);
    return 0;
  }

  function toTimes(flags) {
    const setA = (flags & 1) !== 0, nowA = (flags & 2) !== 0;
    const setM = (flags & 4) !== 0, nowM = (flags & 8) !== 0;
    if (setA && nowA) return E.INVAL;
    let now = 0n;
    if (!setA && nowA) now = state.walltime();
    if (setM && nowM) return E.INVAL;
    if (!setM && nowM && now === 0n) state.walltime();
    return 0;
  }

  const h = {
    args_sizes_get(argc, size) {
      if (!w32(argc, args.length)) return E.FAULT;
      if (!w32(size, stringsSizes(args))) return E.FAULT;
      return 0;
    },
    args_get(argv, buf) { return writeStrings(args, argv, buf); },
    environ_sizes_get(n, size) {
      if (!w32(n, environ.length)) return E.FAULT;
      if (!w32(size, stringsSizes(environ))) return E.FAULT;
      return 0;
    },
    environ_get(env, buf) { return writeStrings(environ, env, buf); },
    clock_res_get(id, res) {
      let r;
      if (id === 0) r = REALTIME_RESOLUTION_NS;
      else if (id === 1) r = MONOTONIC_RESOLUTION_NS;
      else return E.INVAL;
      return w64(res, r) ? 0 : E.FAULT;
    },
    clock_time_get(id, _precision, t) {
      let v;
      if (id === 0) v = state.walltime();
      else if (id === 1) v = state.nanotime();
      else return E.INVAL;
      return w64(t, v) ? 0 : E.FAULT;
    },
    random_get(buf, len) {
      buf = u32(buf); len = u32(len);
      if (!inRange(buf, len)) return E.FAULT;
      new Uint8Array(mem().buffer, buf, len).set(state.rand.read(len));
      return 0;
    },
    sched_yield() { return 0; },
    proc_raise() { return E.NOSYS; },
    proc_exit(code) { throw new Exit(u32(code)); },
    poll_oneoff(inp, out, n, nevents) {
      inp = u32(inp); out = u32(out); n = u32(n);
      if (n === 0) return E.INVAL;
      if (!inRange(inp, n * 48)) return E.FAULT;
      const outOK = inRange(out, n * 32);
      if (outOK) new Uint8Array(mem().buffer, out, n * 32).fill(0);
      if (!outOK) return E.FAULT;
      if (!w32(nevents, n)) return E.FAULT;
      const bytes = new Uint8Array(mem().buffer);
      const dv = view();
      const blocking = [];
      let count = 0;
      const writeEvent = (ud, errno, type) => {
        const o = out + count * 32;
        bytes.set(ud, o);
        bytes[o + 8] = errno; bytes[o + 9] = 0;
        dv.setUint32(o + 10, type, true);
        count++;
      };
      for (let i = 0; i < n; i++) {
        const s = inp + i * 48;
        const ud = bytes.slice(s, s + 8);
        const type = bytes[s + 8];
        if (type === 0) {
          const flags = dv.getUint16(s + 40, true);
          if (flags === 1) return E.NOTSUP;
          if (flags !== 0) return E.INVAL;
          writeEvent(ud, 0, type);
        } else if (type === 1) {
          const fd = dv.getInt32(s + 16, true);
          if (fd < 0) return E.BADF;
          if (!fds.has(fd)) writeEvent(ud, E.BADF, type);
          else blocking.push(ud);
        } else if (type === 2) {
          const fd = dv.getInt32(s + 16, true);
          if (fd < 0) return E.BADF;
          writeEvent(ud, fds.has(fd) ? E.NOTSUP : E.BADF, type);
        } else {
          return E.INVAL;
        }
      }
      // Sleeping returns at once. Stdin is always ready (all of it is
      // there from the start).
      if (count === n) return 0;
      if (!fds.has(0)) return E.BADF;
      for (const ud of blocking) writeEvent(ud, 0, 1);
      if (count !== n && !w32(nevents, count)) return E.FAULT;
      return 0;
    },
    fd_read(fd, iovs, count, nread) {
      const f = fds.get(fd);
      if (!f) return E.BADF;
      const [n, errno] = readv(u32(iovs), u32(count), (b) => read(f, b));
      if (errno) return errno;
      return w32(nread, n) ? 0 : E.FAULT;
    },
    fd_pread(fd, iovs, count, off, nread) {
      const f = fds.get(fd);
      if (!f) return E.BADF;
      let at = BigInt.asIntN(64, BigInt(off));
      if (f.kind === "file" && at < 0n) return E.INVAL;
      const [n, errno] = readv(u32(iovs), u32(count), (b) => {
        if (f.kind === "dir") return [0, E.ISDIR];
        if (f.kind !== "file") return [0, E.NOSYS];
        const from = at > BigInt(f.data.length) ? f.data.length : Number(at);
        const k = Math.min(b.length, f.data.length - from);
        b.set(f.data.subarray(from, from + k));
        at += BigInt(k);
        return [k, 0];
      });
      if (errno) return errno;
      return w32(nread, n) ? 0 : E.FAULT;
    },
    fd_write(fd, iovs, count, nwritten) {
      const f = fds.get(fd);
      if (!f) return E.BADF;
      const [n, errno] = writev(u32(iovs), u32(count), (b) => write(f, b));
      if (errno) return errno;
      return w32(nwritten, n) ? 0 : E.FAULT;
    },
    fd_pwrite(fd, iovs, count, _off, nwritten) {
      const f = fds.get(fd);
      if (!f) return E.BADF;
      const [n, errno] = writev(u32(iovs), u32(count), (b) => (b.length === 0 ? [0, 0] : [0, E.NOSYS]));
      if (errno) return errno;
      return w32(nwritten, n) ? 0 : E.FAULT;
    },
    fd_close(fd) {
      if (!fds.has(fd)) return E.BADF;
      fds.delete(fd);
      return 0;
    },
    fd_fdstat_get(fd, st) {
      st = u32(st);
      if (!inRange(st, 24)) return E.FAULT;
      const f = fds.get(fd);
      if (!f) return E.BADF;
      const dv = view();
      const dir = f.kind === "dir";
      dv.setUint16(st, dir ? FILETYPE_DIRECTORY : f.kind === "file" ? FILETYPE_REGULAR_FILE : FILETYPE_BLOCK_DEVICE, true);
      dv.setUint16(st + 2, 0, true);
      dv.setUint32(st + 4, 0, true);
      dv.setBigUint64(st + 8, BigInt(dir ? DIR_RIGHTS_BASE : FILE_RIGHTS_BASE), true);
      dv.setBigUint64(st + 16, dir ? BigInt((FILE_RIGHTS_BASE | DIR_RIGHTS_BASE) >>> 0) : 0n, true);
      return 0;
    },
    fd_fdstat_set_flags(fd, flags) {
      if (flags & (2 | 8 | 16)) return E.INVAL;
      if (!fds.has(fd)) return E.BADF;
      if (flags & 4) return E.NOSYS;
      return 0;
    },
    fd_fdstat_set_rights() { return E.NOSYS; },
    fd_filestat_get(fd, buf) {
      buf = u32(buf);
      if (!inRange(buf, 64)) return E.FAULT;
      const f = fds.get(fd);
      if (!f) return E.BADF;
      if (f.kind === "dir" || f.kind === "file") return writeFilestat(buf, f.kind === "dir" ? state.tree.get(f.path) : f);
      const dv = view();
      dv.setBigUint64(buf, 0n, true); // dev
      dv.setBigUint64(buf + 8, 0n, true); // ino
      dv.setBigUint64(buf + 16, BigInt(f.kind === "dir" ? FILETYPE_DIRECTORY : FILETYPE_BLOCK_DEVICE), true);
      dv.setBigUint64(buf + 24, 1n, true); // nlink
      for (let o = 32; o < 64; o += 8) dv.setBigUint64(buf + o, 0n, true); // size, times
      return 0;
    },
    fd_filestat_set_size(fd) { return fds.has(fd) ? E.NOSYS : E.BADF; },
    fd_filestat_set_times(fd, _a, _m, flags) {
      if (!fds.has(fd)) return E.BADF;
      const errno = toTimes(flags);
      if (errno) return errno;
      return E.NOSYS;
    },
    fd_advise(fd, _o, _l, advice) {
      if (!fds.has(fd)) return E.BADF;
      return advice <= 5 ? 0 : E.INVAL;
    },
    fd_allocate(fd, off, len) {
      if (!fds.has(fd)) return E.BADF;
      const tail = BigInt.asIntN(64, BigInt.asUintN(64, off) + BigInt.asUintN(64, len));
      if (tail < 0n) return E.INVAL;
      return tail <= 0n ? 0 : E.NOSYS; // a stdio stream has size 0 and cannot grow
    },
    fd_datasync(fd) { return fds.has(fd) ? 0 : E.BADF; },
    fd_sync(fd) { return fds.has(fd) ? 0 : E.BADF; },
    fd_seek(fd, off, whence, newOff) {
      const f = fds.get(fd);
      if (!f) return E.BADF;
      if (f.kind === "dir") return E.ISDIR;
      if (f.kind !== "file") return E.NOSYS;
      let base;
      if (whence === 0) base = 0n;
      else if (whence === 1) base = BigInt(f.pos);
      else if (whence === 2) base = BigInt(f.data.length);
      else return E.INVAL;
      const to = base + BigInt.asIntN(64, BigInt(off));
      if (to < 0n) return E.INVAL;
      f.pos = to > BigInt(f.data.length) ? f.data.length : Number(to);
      return w64(newOff, to) ? 0 : E.FAULT;
    },
    fd_tell(fd, out) {
      const f = fds.get(fd);
      if (!f) return E.BADF;
      if (f.kind === "dir") return E.ISDIR;
      if (f.kind !== "file") return E.NOSYS;
      return w64(out, f.pos) ? 0 : E.FAULT;
    },
    fd_readdir(fd, buf, len, cookie, used) {
      buf = u32(buf); len = u32(len);
      if (len < 24) return E.INVAL;
      const f = fds.get(fd);
      if (!f || f.kind !== "dir") return E.BADF;
      // "." and "..", then the entries by name, as wazero lists a
      // directory; d_next numbers them from 1.
      const dir = state.tree.get(f.path);
      const all = [{ name: ".", type: FILETYPE_DIRECTORY }, { name: "..", type: FILETYPE_DIRECTORY }].concat(
        dir.entries.map((n) => ({ name: n, type: state.tree.get(f.path === "" ? n : f.path + "/" + n).kind === "dir" ? FILETYPE_DIRECTORY : FILETYPE_REGULAR_FILE })));
      const c = BigInt.asUintN(64, BigInt(cookie));
      if (c > BigInt(all.length)) return E.NOENT;
      const list = all.slice(Number(c));
      let toWrite = 0, count = 0, truncated = 0, left = len;
      for (const e of list) {
        if (left === 0) break;
        count++;
        const l = 24 + enc.encode(e.name).length;
        if (l > left) { truncated = left >= 24 ? 24 : left; toWrite += truncated; break; }
        left -= l; toWrite += l;
      }
      if (toWrite > 0) {
        if (!inRange(buf, toWrite)) return E.FAULT;
        let skipName = -1;
        if (truncated > 0) { if (truncated < 24) count--; else skipName = count - 1; }
        const dv = view(), bytes = new Uint8Array(mem().buffer);
        let pos = buf, next = c + 1n;
        for (let i = 0; i < count; i++) {
          const name = enc.encode(list[i].name);
          dv.setBigUint64(pos, next++, true);
          dv.setBigUint64(pos + 8, 0n, true);
          dv.setUint32(pos + 16, name.length, true);
          dv.setUint32(pos + 20, list[i].type, true);
          pos += 24;
          if (i !== skipName) { bytes.set(name, pos); pos += name.length; }
        }
      }
      return w32(used, truncated > 0 ? len : toWrite) ? 0 : E.FAULT;
    },
    fd_renumber(from, to) {
      if (!fds.has(from) || to < 0) return E.BADF;
      return E.NOTSUP; // the only open descriptors are the preopened stdio
    },
    fd_prestat_get(fd, buf) {
      const f = fds.get(fd);
      if (!f) return E.BADF;
      // tag 0 (a directory), then the name's length
      if (f.kind === "file" || (f.kind === "dir" && !f.preopen)) return E.BADF;
      const n = f.kind === "dir" ? BigInt(INPUT_DIR.length) << 32n : 0n;
      return w64(buf, n) ? 0 : E.FAULT;
    },
    fd_prestat_dir_name(fd, p, len) {
      const f = fds.get(fd);
      if (!f) return E.BADF;
      if (f.kind === "file" || (f.kind === "dir" && !f.preopen)) return E.BADF;
      const name = enc.encode(f.kind === "dir" ? INPUT_DIR : "");
      len = u32(len);
      if (len > name.length) return E.NAMETOOLONG;
      p = u32(p);
      if (!inRange(p, len)) return E.FAULT;
      new Uint8Array(mem().buffer, p, len).set(name.subarray(0, len));
      return 0;
    },
    sock_accept(fd) { return E.BADF; },
    sock_recv(fd) { return E.BADF; },
    sock_send(fd, _d, _n, flags) { return flags !== 0 ? E.NOTSUP : E.BADF; },
    sock_shutdown(fd) { return E.BADF; },
    path_open(fd, _df, p, len, oflags, rights, _inh, fdflags, out) {
      const r = resolve(fd, u32(p), u32(len));
      if (r.errno) return r.errno;
      if (u32(len) === 0) return E.INVAL;
      const wantDir = (oflags & 2) !== 0;
      if (wantDir && (oflags & 1)) return E.INVAL;
      // Writing (the fd_write right, or append) is refused as the native
      // worker's read-only mount refuses it.
      if ((BigInt.asUintN(64, BigInt(rights)) & 0x40n) !== 0n || (fdflags & 1) !== 0) return wantDir ? E.ISDIR : E.NOSYS;
      if (!r.node) return (oflags & 1) ? E.ROFS : E.NOENT;
      if ((oflags & 5) === 5) return E.EXIST;
      if (r.node.kind === "file" && (wantDir || r.slash)) return E.NOTDIR;
      let n = 3;
      while (fds.has(n)) n++;
      fds.set(n, r.node.kind === "dir" ? { kind: "dir", path: r.path } : { kind: "file", data: r.node.data, pos: 0 });
      if (!w32(out, n)) { fds.delete(n); return E.FAULT; }
      return 0;
    },
    path_filestat_get(fd, _fl, p, len, buf) {
      const r = resolve(fd, u32(p), u32(len));
      if (r.errno) return r.errno;
      if (!r.node) return E.NOENT;
      if (r.node.kind === "file" && r.slash) return E.NOTDIR;
      return writeFilestat(buf, r.node);
    },
    path_filestat_set_times(fd, _fl, p, len, _a, _m, fst) {
      const errno = toTimes(fst);
      if (errno) return errno;
      return atPath(fd, u32(p), u32(len));
    },
    path_create_directory(fd, p, len) { return atPath(fd, u32(p), u32(len)); },
    path_remove_directory(fd, p, len) { return atPath(fd, u32(p), u32(len)); },
    path_unlink_file(fd, p, len) { return atPath(fd, u32(p), u32(len)); },
    path_readlink(fd, p, len, _b, blen) {
      if (u32(len) === 0 || u32(blen) === 0) return E.INVAL;
      const r = resolve(fd, u32(p), u32(len));
      return r.errno || E.NOSYS; // the native mount reads no links
    },
    path_link(ofd, _of, op, olen, nfd, np, nlen) {
      const e = atPath(ofd, u32(op), u32(olen));
      return e || atPath(nfd, u32(np), u32(nlen));
    },
    path_rename(fd, op, olen, nfd, np, nlen) {
      const e = atPath(fd, u32(op), u32(olen));
      return e || atPath(nfd, u32(np), u32(nlen));
    },
    path_symlink(op, olen, fd, np, nlen) {
      const f = fds.get(fd);
      if (!f) return E.BADF;
      if (f.kind !== "dir") return E.NOTDIR;
      return atPath(fd, u32(np), u32(nlen));
    },
  };
  return h;
}

// ---- running a task ----

function classify(err, stdout, stderr) {
  if (stdout.exceeded || err instanceof OutputTooLarge) {
    return { failure: { kind: "output-too-large", message: `stdout exceeded ${stdout.max} bytes` }, exitCode: null };
  }
  if (err === null) return { failure: null, exitCode: 0 };
  if (err instanceof Exit) {
    const code = err.code;
    if (code === 0) return { failure: null, exitCode: 0 };
    if (stderr.outOfMem) return { failure: { kind: "out-of-memory", message: "the Go runtime ran out of memory: " + clip(stderr.panicLine) }, exitCode: code };
    if (code === 2 && stderr.panicLine !== "") return { failure: { kind: "trap", message: clip(stderr.panicLine) }, exitCode: code };
    return { failure: { kind: "exit-status", message: `exit status ${code}` }, exitCode: code };
  }
  const msg = String(err && err.message || err);
  if (stderr.outOfMem) return { failure: { kind: "out-of-memory", message: clip(msg) }, exitCode: null };
  const words = trapWords(err, msg);
  if (words !== null) return { failure: { kind: "trap", message: "wasm trap: " + words, trace: clip(String(err && err.stack || msg)) }, exitCode: null };
  return { failure: { kind: "trap", message: clip(msg) }, exitCode: null };
}

// The profile's words for a trap (docs/determinism.md, "Traps";
// worker/trap.go), from the words of V8 (Chromium, Node), SpiderMonkey
// (Firefox) and JavaScriptCore (Safari).
const TRAPS = new Map([
  ["unreachable", "unreachable"],
  ["unreachable executed", "unreachable"],
  ["unreachable code should not be executed", "unreachable"],
  ["divide by zero", "integer divide by zero"],
  ["remainder by zero", "integer divide by zero"],
  ["integer divide by zero", "integer divide by zero"],
  ["division by zero", "integer divide by zero"],
  ["divide result unrepresentable", "integer overflow or invalid conversion to integer"],
  ["float unrepresentable in integer range", "integer overflow or invalid conversion to integer"],
  ["integer overflow", "integer overflow or invalid conversion to integer"],
  ["invalid conversion to integer", "integer overflow or invalid conversion to integer"],
  ["out of bounds trunc operation", "integer overflow or invalid conversion to integer"],
  ["memory access out of bounds", "out of bounds memory access"],
  ["index out of bounds", "out of bounds memory access"],
  ["out of bounds memory access", "out of bounds memory access"],
  ["table index is out of bounds", "invalid table access or indirect call"],
  ["null function or function signature mismatch", "invalid table access or indirect call"],
  ["function signature mismatch", "invalid table access or indirect call"],
  ["dereferencing a null pointer", "invalid table access or indirect call"],
  ["indirect call to null", "invalid table access or indirect call"],
  ["indirect call signature mismatch", "invalid table access or indirect call"],
  ["out of bounds call_indirect", "invalid table access or indirect call"],
  ["call_indirect to a null table entry", "invalid table access or indirect call"],
  ["call_indirect to a signature that does not match", "invalid table access or indirect call"],
]);

function trapWords(err, msg) {
  if (err instanceof RangeError && /call stack/i.test(msg)) return "call stack exhausted";
  if (typeof InternalError !== "undefined" && err instanceof InternalError && /recursion/i.test(msg)) return "call stack exhausted";
  if (!(err instanceof WebAssembly.RuntimeError)) return null;
  return TRAPS.get(msg.toLowerCase().replace(/[.\s]+$/, "")) ?? null;
}

export async function runTask(module, stdin, opts = {}) {
  const pages = opts.memoryLimitPages ?? 4096;
  if (!Number.isInteger(pages) || pages < 1 || pages > 65536) throw new Error(`wasi.js: memoryLimitPages ${pages} out of range 1..65536`);
  const maxStdout = opts.maxStdoutBytes ?? (16 << 20);
  const maxStderr = opts.maxStderrBytes ?? (64 << 10);
  if (!(stdin instanceof Uint8Array)) throw new Error("wasi.js: stdin must be a Uint8Array");
  let rand;
  if (typeof opts.random === "function") rand = { read: opts.random };
  else rand = chacha8(opts.seed);
  const meterExport = opts.meterExport ?? METER_EXPORT;

  let c;
  if (module instanceof WebAssembly.Module) c = check(module);
  else c = await compile(module instanceof Uint8Array ? module : new Uint8Array(module), pages);
  if (c.error) return { output: null, stderr: null, failure: null, exitCode: null, work: 0n, error: c.error };
  if (c.failure) return { output: null, stderr: null, failure: c.failure, exitCode: null, work: 0n, error: null };

  let wall = FAKE_EPOCH_NS - TICK_NS;
  let mono = -TICK_NS;
  const state = {
    memory: null,
    stdin, stdinPos: 0,
    stdout: new StdoutBuffer(maxStdout),
    stderr: new StderrBuffer(maxStderr),
    fds: new Map([[0, { kind: "stdin" }], [1, { kind: "stdout" }], [2, { kind: "stderr" }]]),
    rand,
    walltime: () => (wall += TICK_NS),
    nanotime: () => (mono += TICK_NS),
  };
  // The input directory: "chunks" (empty) and the task's files, as the
  // native worker mounts a pool task's input directory.
  state.tree = new Map([["", { kind: "dir", entries: [] }]]);
  if (opts.inputDir || opts.inputs) {
    const files = opts.inputs || {};
    const names = Object.keys(files);
    for (const name of names) {
      if (!/^[A-Za-z0-9_.-]+$/.test(name) || name === "." || name === ".." || name === "chunks") throw new Error(`wasi.js: input name ${JSON.stringify(name)} is not a file name`);
      if (!(files[name] instanceof Uint8Array)) throw new Error(`wasi.js: input ${name} must be a Uint8Array`);
      state.tree.set(name, { kind: "file", data: files[name] });
    }
    state.tree.set("chunks", { kind: "dir", entries: [] });
    state.tree.get("").entries = names.concat("chunks").sort();
    state.fds.set(3, { kind: "dir", path: "", preopen: true });
  }
  const host = makeHost(state);
  const imports = { [WASI]: {} };
  for (const imp of WebAssembly.Module.imports(c.module)) {
    if (imp.module === WASI && host[imp.name]) imports[WASI][imp.name] = host[imp.name];
  }
  let instance;
  try {
    instance = await WebAssembly.instantiate(c.module, imports);
  } catch (e) {
    return { output: null, stderr: null, failure: { kind: "bad-module", message: clip("instantiate: " + String(e && e.message || e)) }, exitCode: null, work: 0n, error: null };
  }
  state.memory = instance.exports.memory;
  let err = null;
  try {
    instance.exports._start();
  } catch (e) {
    err = e;
  }
  const g = instance.exports[meterExport];
  const work = g instanceof WebAssembly.Global ? BigInt.asUintN(64, BigInt(g.value)) : 0n;
  state.stderr.finish();
  const { failure, exitCode } = classify(err, state.stdout, state.stderr);
  return {
    output: failure === null ? state.stdout.bytes() : null,
    stderr: state.stderr.bytes(),
    failure, exitCode, work, error: null,
  };
}
