// task-worker.js: the Web Worker in which the browser peer runs tasks,
// one at a time. The page sends {core, program, stdin, seed,
// maxStdoutBytes, meterExport}: core is the compiled core.wasm (for the
// task's random stream, math/rand/v2's ChaCha8 as a native worker seeds
// it), program the compiled, metered and memory-capped module. It answers
// {end} with what runTask returned, or {error}. The page terminates the
// worker at the task's time limit; the module's memory is capped by its
// own declared maximum (core.prepare), which the browser enforces.
"use strict";
importScripts("wasm_exec.js", "runner.js");

let coreReady = null;

function startCore(core) {
  if (coreReady) return coreReady;
  coreReady = new Promise((resolve, reject) => {
    self.idlepoolCoreReady = () => resolve(self.idlepoolCore);
    const go = new Go();
    WebAssembly.instantiate(core, go.importObject).then((inst) => go.run(inst)).catch(reject);
  });
  return coreReady;
}

self.onmessage = async (ev) => {
  const m = ev.data;
  try {
    const core = await startCore(m.core);
    const rand = core.newRand(m.seed);
    if (rand.error) throw new Error(rand.error);
    const end = await self.runTask(m.program, m.stdin, {
      random: (n) => rand.read(n),
      maxStdoutBytes: m.maxStdoutBytes,
      meterExport: m.meterExport,
    });
    self.postMessage({ end });
  } catch (e) {
    self.postMessage({ error: String((e && e.message) || e) });
  }
};
