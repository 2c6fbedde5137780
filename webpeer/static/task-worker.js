// task-worker.js: the module Web Worker in which the browser peer runs
// tasks, one at a time, with the determinism profile's host (wasi.js,
// served from web/wasi.js). The page sends {program, stdin, seed,
// maxStdoutBytes, meterExport, inputs}: program is the compiled, metered and
// memory-capped module (core.prepare), seed the task's seed in hex (the
// host derives the random stream from it as a native worker does). The
// task runs with /input on fd 3 holding inputs ({name: Uint8Array}, the
// files the page fetched and checked), as a native worker mounts a pool
// task's input directory. It answers {end} with what runTask
// returned (work as a decimal string), or {error}. The page terminates
// the worker at the task's time limit; the module's memory is capped by
// its own declared maximum, which the browser enforces.
import { runTask } from "./wasi.js";

self.onmessage = async (ev) => {
  const m = ev.data;
  try {
    const end = await runTask(m.program, m.stdin, {
      seed: m.seed,
      maxStdoutBytes: m.maxStdoutBytes,
      meterExport: m.meterExport,
      inputDir: true,
      inputs: m.inputs,
    });
    end.work = String(end.work);
    self.postMessage({ end });
  } catch (e) {
    self.postMessage({ error: String((e && e.message) || e) });
  }
};
