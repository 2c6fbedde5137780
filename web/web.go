package web

import "embed"

// Files are the embedded browser files, at the root of the FS:
// "wasi.js" (an ES module).
//
//go:embed wasi.js
var Files embed.FS
