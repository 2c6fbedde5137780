// Package web holds the files a coordinator serves to browsers, embedded
// so that the binary carries them and nothing is fetched from elsewhere
// (no CDN, no build step at run time).
//
// wasi.js is the WASI preview 1 host for browsers: it runs a task's
// WebAssembly module under the determinism profile (docs/determinism.md),
// the same answers to every host call as the native worker, so that a
// task computed in a browser gives the native worker's bytes. Its API is
// described at the top of the file; worker's tests run the profile's test
// vectors and the pi example through it, in Node and in Chromium, and
// compare with the native worker byte for byte. The browser peer
// (webpeer) runs its tasks with it too, served at /join/wasi.js.
//
// pool.html, pool.js and pool.css are the pool's read-only page, which
// the coordinator serves at / with a strict Content-Security-Policy (no
// inline script or style; everything from the coordinator itself).
//
// The package is plain data (Files) and imports no other package of the
// project.
package web
