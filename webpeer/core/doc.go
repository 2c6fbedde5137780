// Command core is the browser peer's core, built with GOOS=js
// GOARCH=wasm into webpeer/static/core.wasm (make webpeer, or
// webpeer.BuildCore) and loaded by the page the coordinator serves at
// /join. It lends the page the project's own Go code where the browser
// must give the same bytes as a native device: the job's plan (a task's
// stdin, seed and limits from the job's canonical encoding), the
// worker's metering and its classification of a task's end, the task's
// random source (math/rand/v2's ChaCha8, as the worker seeds it), the
// replica digest and the offer's canonical form for signing, and an
// Ed25519 fallback for browsers whose WebCrypto lacks it.
//
// It registers one object, globalThis.idlepoolCore, whose functions take
// and return Uint8Arrays, strings and plain objects; each reports bad
// input by returning an object with an "error" string. Built for any
// other platform it only says how to build it.
package main
