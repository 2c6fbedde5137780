// Package webpeer is the browser peer: the page a coordinator serves at
// /join, with which a person donates from a browser tab, and its assets.
//
// The page (static/join.html, join.js) keeps its keys in IndexedDB,
// speaks the coordinator's API as a native agent does, and runs tasks in
// a module Web Worker (task-worker.js) under web/wasi.js, the
// determinism profile's WASI host (docs/determinism.md), which Handler
// serves at prefix/wasi.js. The parts that must give the same bytes as a
// native device are the project's Go code compiled to WebAssembly
// (webpeer/core, built into static/core.wasm with Go's wasm_exec.js
// beside it by `make webpeer`, or by BuildCore in tests). The page
// fetches a job's program and input files in chunks from the native
// devices that hold them, over WebRTC data channels (static/p2p.js: the
// package p2p's signals and chunk protocol on the browser's
// RTCPeerConnection; RATIONALE.md says why not pion in the core), the
// pool's copy being the fallback.
//
// Handler serves the page and its assets with a strict
// Content-Security-Policy: scripts, workers and connections only from the
// pool's own origin, WebAssembly allowed ('wasm-unsafe-eval'), nothing
// inline, nothing from elsewhere. It is safe for concurrent use.
package webpeer
