package worker

// The function in this file lets a host other than this package's wazero
// runtime (the browser peer's, which runs modules in the browser's own
// WebAssembly engine) count the same work as a worker process: it is the
// worker's own metering, so that the two cannot drift apart. The browser
// host classifies a task's end itself (web/wasi.js), checked against a
// worker process by TestWasiJSNode and TestWasiJSBrowser.

// MeterModule returns bin with the work counter of metering rule
// MeterRule injected, exported as the mutable i64 global MeterExport,
// exactly as a worker process meters a module before it compiles it; a
// host that reads that global when the task ends counts what a worker
// counts (Result.Work). The error names what could not be decoded: such
// a module fails its task with FailureBadModule on every device. bin is
// not modified.
func MeterModule(bin []byte) ([]byte, error) { return meterModule(bin) }
