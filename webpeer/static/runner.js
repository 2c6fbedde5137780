// runner.js: the browser peer's task runner. It runs one WASI preview 1
// command module as a native idlepool worker runs it (worker/serve.go):
// argv is ["program"], no environment, the task's JSON on stdin, stdout
// and stderr captured, no file system, and every WASI call answered as
// wazero answers it under the worker's configuration: fake clocks that
// advance 1 ms per reading (realtime from 2022-01-01T00:00:00Z, monotonic
// from 0), sleeps and yields that return at once, random bytes from the
// task's seeded stream (opts.random), stdio reported as block devices
// whose flags cannot be set, the job's input directory preopened at
// /input on fd 3, ENOSYS for the rest. The same module and
// input give the same bytes and the same work count as on a native
// device.
//
// The one entry point is
//
//	runTask(module, input, opts) -> Promise<{output, stderr, exitCode,
//	  exited, trap, exceeded, work, error}>
//
// module: a WebAssembly.Module or its bytes (already metered and
// memory-capped, see core.prepare); input: a Uint8Array for stdin;
// opts: {random(n) -> Uint8Array, maxStdoutBytes, meterExport}. work is the meter global's value as a decimal string.
// A host implementing the project's determinism profile can replace this
// file as long as it keeps that function and its result.

(function (scope) {
  "use strict";

  const ESUCCESS = 0, EBADF = 8, EFAULT = 21, EINVAL = 28, ENOSYS = 52, ENOTSUP = 58;
  const MS = 1000000n;
  const FAKE_EPOCH_NANOS = 1640995200000n * MS;
  const STDIO_RIGHTS = 0x1ffn; // datasync|read|seek|fdstat_set_flags|sync|tell|write|advise|allocate
  const FILETYPE_BLOCK_DEVICE = 1;
  const INPUT_DIR = new TextEncoder().encode("/input");

  class ExitSignal {
    constructor(code) { this.code = code; }
  }
  class OutputTooLarge {}

  function runTask(module, input, opts) {
    return (async () => {
      opts = opts || {};
      const maxStdout = opts.maxStdoutBytes || (16 << 20);
      const random = opts.random;
      const meterExport = opts.meterExport || "__idlepool_work";
      const mod = module instanceof WebAssembly.Module ? module : await WebAssembly.compile(module);
      const stdin = input || new Uint8Array(0);
      let stdinPos = 0;
      const stdout = [], stderr = [];
      let stdoutLen = 0, stderrLen = 0, exceeded = false;
      let wall = FAKE_EPOCH_NANOS - MS, mono = -MS;
      let instance = null;

      const mem = () => instance.exports.memory.buffer;
      const dv = () => new DataView(mem());
      const u8 = () => new Uint8Array(mem());
      const inBounds = (ptr, len) => ptr >>> 0 === ptr && ptr + len <= mem().byteLength;

      function iovecs(iovs, n) {
        const d = dv(), out = [];
        for (let i = 0; i < n; i++) {
          const p = iovs + 8 * i;
          if (!inBounds(p, 8)) return null;
          const buf = d.getUint32(p, true), len = d.getUint32(p + 4, true);
          if (!inBounds(buf, len)) return null;
          out.push([buf, len]);
        }
        return out;
      }

      const argv = [new TextEncoder().encode("program\0")];
      const wasi = {
        args_sizes_get(argcPtr, bufSizePtr) {
          const d = dv();
          d.setUint32(argcPtr, argv.length, true);
          d.setUint32(bufSizePtr, argv.reduce((n, a) => n + a.length, 0), true);
          return ESUCCESS;
        },
        args_get(argvPtr, bufPtr) {
          const d = dv(), m = u8();
          for (const a of argv) {
            d.setUint32(argvPtr, bufPtr, true);
            m.set(a, bufPtr);
            argvPtr += 4;
            bufPtr += a.length;
          }
          return ESUCCESS;
        },
        environ_sizes_get(countPtr, sizePtr) {
          const d = dv();
          d.setUint32(countPtr, 0, true);
          d.setUint32(sizePtr, 0, true);
          return ESUCCESS;
        },
        environ_get() { return ESUCCESS; },
        clock_res_get(id, ptr) {
          let res;
          if (id === 0) res = 1000n;
          else if (id === 1) res = 1n;
          else return EINVAL;
          if (!inBounds(ptr, 8)) return EFAULT;
          dv().setBigUint64(ptr, res, true);
          return ESUCCESS;
        },
        clock_time_get(id, _precision, ptr) {
          let t;
          if (id === 0) t = (wall += MS);
          else if (id === 1) t = (mono += MS);
          else return EINVAL;
          if (!inBounds(ptr, 8)) return EFAULT;
          dv().setBigUint64(ptr, t, true);
          return ESUCCESS;
        },
        random_get(buf, len) {
          if (!inBounds(buf, len)) return EFAULT;
          if (len > 0) u8().set(random(len), buf);
          return ESUCCESS;
        },
        fd_write(fd, iovs, n, nwrittenPtr) {
          if (fd !== 1 && fd !== 2) return EBADF;
          const vs = iovecs(iovs, n);
          if (vs === null) return EFAULT;
          let total = 0;
          for (const [buf, len] of vs) {
            const chunk = u8().slice(buf, buf + len);
            if (fd === 1) {
              if (exceeded || stdoutLen + len > maxStdout) {
                exceeded = true;
                throw new OutputTooLarge();
              }
              stdout.push(chunk);
              stdoutLen += len;
            } else {
              stderr.push(chunk);
              stderrLen += len;
            }
            total += len;
          }
          dv().setUint32(nwrittenPtr, total, true);
          return ESUCCESS;
        },
        fd_read(fd, iovs, n, nreadPtr) {
          if (fd !== 0) return EBADF;
          const vs = iovecs(iovs, n);
          if (vs === null) return EFAULT;
          let total = 0;
          for (const [buf, len] of vs) {
            const k = Math.min(len, stdin.length - stdinPos);
            u8().set(stdin.subarray(stdinPos, stdinPos + k), buf);
            stdinPos += k;
            total += k;
            if (k < len) break;
          }
          dv().setUint32(nreadPtr, total, true);
          return ESUCCESS;
        },
        fd_fdstat_get(fd, ptr) {
          if (fd > 2) return EBADF;
          if (!inBounds(ptr, 24)) return EFAULT;
          const d = dv();
          for (let i = 0; i < 24; i++) d.setUint8(ptr + i, 0);
          d.setUint8(ptr, FILETYPE_BLOCK_DEVICE);
          d.setBigUint64(ptr + 8, STDIO_RIGHTS, true);
          return ESUCCESS;
        },
        fd_fdstat_set_flags(fd) { return fd > 2 ? EBADF : ENOSYS; },
        // fd 3 is the job's input directory, preopened at /input as a
        // native worker mounts it (read-only; the page runs only tasks
        // that read no files, so it is empty here).
        fd_prestat_get(fd, ptr) {
          if (fd !== 3) return EBADF;
          if (!inBounds(ptr, 8)) return EFAULT;
          const d = dv();
          d.setUint32(ptr, 0, true); // tag 0: a directory
          d.setUint32(ptr + 4, INPUT_DIR.length, true);
          return ESUCCESS;
        },
        fd_prestat_dir_name(fd, ptr, len) {
          if (fd !== 3) return EBADF;
          if (!inBounds(ptr, len)) return EFAULT;
          u8().set(INPUT_DIR.subarray(0, len), ptr);
          return ESUCCESS;
        },
        fd_close(fd) { return fd > 3 ? EBADF : ESUCCESS; },
        proc_exit(code) { throw new ExitSignal(code >>> 0); },
        sched_yield() { return ESUCCESS; },
        poll_oneoff(inPtr, outPtr, nsubs, neventsPtr) {
          if (nsubs === 0) return EINVAL;
          if (!inBounds(inPtr, nsubs * 48) || !inBounds(outPtr, nsubs * 32)) return EFAULT;
          const d = dv(), m = u8();
          m.fill(0, outPtr, outPtr + nsubs * 32);
          d.setUint32(neventsPtr, nsubs, true);
          let nevents = 0;
          const write = (sub, errno) => {
            const o = outPtr + nevents * 32;
            m.copyWithin(o, sub, sub + 8); // userdata
            d.setUint16(o + 8, errno, true);
            d.setUint8(o + 10, d.getUint8(sub + 8));
            nevents++;
          };
          for (let i = 0; i < nsubs; i++) {
            const sub = inPtr + i * 48;
            const type = d.getUint8(sub + 8);
            const fd = d.getInt32(sub + 16, true);
            if (type === 0) write(sub, ESUCCESS); // a clock: fake sleeps return at once
            else if (type === 1) {
              if (fd < 0) return EBADF;
              if (fd > 2) write(sub, EBADF);
              else if (fd !== 0) write(sub, ESUCCESS);
              // stdin is not pollable: no event, as under wazero
            } else if (type === 2) {
              if (fd < 0) return EBADF;
              write(sub, fd > 2 ? EBADF : ENOTSUP);
            } else return EINVAL;
          }
          if (nevents !== nsubs) d.setUint32(neventsPtr, nevents, true);
          return ESUCCESS;
        },
      };

      const imports = {};
      for (const imp of WebAssembly.Module.imports(mod)) {
        if (imp.kind !== "function") {
          return { error: "bad-module: imports " + imp.kind + " " + imp.module + "." + imp.name + ": modules must define their own" };
        }
        if (imp.module !== "wasi_snapshot_preview1") {
          return { error: "unsupported: imports " + imp.module + "." + imp.name + ", which this browser cannot offer" };
        }
        imports.wasi_snapshot_preview1 = imports.wasi_snapshot_preview1 || {};
        imports.wasi_snapshot_preview1[imp.name] = wasi[imp.name] || (() => ENOSYS);
      }
      instance = await WebAssembly.instantiate(mod, imports);
      const start = instance.exports._start;
      if (typeof start !== "function") {
        return { error: "bad-module: not a WASI command: no exported function _start() without parameters and results" };
      }
      let exited = false, exitCode = 0, trap = null;
      try {
        start();
      } catch (e) {
        if (e instanceof ExitSignal) {
          exited = true;
          exitCode = e.code;
        } else if (e instanceof OutputTooLarge) {
          exceeded = true;
        } else if (e instanceof WebAssembly.RuntimeError || e instanceof RangeError) {
          trap = String(e.message || e);
        } else {
          throw e;
        }
      }
      const g = instance.exports[meterExport];
      const work = g instanceof WebAssembly.Global ? BigInt.asUintN(64, BigInt(g.value)).toString() : "0";
      const join = (parts, n) => {
        const out = new Uint8Array(n);
        let p = 0;
        for (const c of parts) { out.set(c, p); p += c.length; }
        return out;
      };
      return {
        output: exceeded ? new Uint8Array(0) : join(stdout, stdoutLen),
        stderr: join(stderr, stderrLen),
        exitCode, exited, trap, exceeded, work, error: null,
      };
    })();
  }

  scope.runTask = runTask;
})(typeof self !== "undefined" ? self : globalThis);
