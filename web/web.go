package web

import "embed"

// Files are the embedded browser files, at the root of the FS:
// "wasi.js" (an ES module), and the pool's page: "pool.html", "pool.js"
// and "pool.css".
//
//go:embed wasi.js pool.html pool.js pool.css
var Files embed.FS
