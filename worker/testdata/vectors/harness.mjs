// harness.mjs runs tasks with web/wasi.js's runTask and reports their
// outcomes in a form Go reads (worker/browser_test.go): bytes in hex, the
// work count as a decimal string. In Node:
//
//	node harness.mjs WASI_JS   (a JSON request on stdin, the JSON results on stdout)
//
// where the request is {"modules": {"name": "hex"}, "tasks": [{"module":
// "name", "seed": "hex", "stdin": "hex", "memoryLimitPages": n, "inputDir": bool, "inputs": {"name": "hex"}}]}; in a
// browser the test page calls runAll itself.

const hex = (b) => (b === null ? null : Array.from(b, (x) => x.toString(16).padStart(2, "0")).join(""));
const unhex = (s) => new Uint8Array((s.match(/../g) || []).map((x) => parseInt(x, 16)));

export async function runAll(runTask, req) {
  const modules = {};
  for (const [name, h] of Object.entries(req.modules)) modules[name] = unhex(h);
  const out = [];
  for (const t of req.tasks) {
    let inputs;
    if (t.inputs) {
      inputs = {};
      for (const [name, h] of Object.entries(t.inputs)) inputs[name] = unhex(h);
    }
    const r = await runTask(modules[t.module], unhex(t.stdin), { seed: t.seed, memoryLimitPages: t.memoryLimitPages, maxStdoutBytes: t.maxStdoutBytes || undefined, inputDir: t.inputDir || false, inputs });
    out.push({ stdout: hex(r.output), stderr: hex(r.stderr), failure: r.failure, work: String(r.work), error: r.error });
  }
  return out;
}

if (typeof process !== "undefined" && process.argv && import.meta.url === "file://" + process.argv[1]) {
  // Node 18 has WebCrypto only as a module, not as a global.
  globalThis.crypto ??= (await import("node:crypto")).webcrypto;
  const { runTask } = await import(process.argv[2]);
  const chunks = [];
  for await (const c of process.stdin) chunks.push(c);
  const req = JSON.parse(Buffer.concat(chunks).toString("utf8"));
  process.stdout.write(JSON.stringify(await runAll(runTask, req)));
}
