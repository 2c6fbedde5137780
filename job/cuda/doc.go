// Package cuda is the job-program side of the idlepool_cuda host module: a
// small typed API through which a WebAssembly job program loads PTX
// kernels, moves bytes between its linear memory and GPU buffers, and
// launches kernels on the GPU the worker gave its task. The contract with
// the worker is the host module described in docs/author.md ("The GPU
// host module idlepool_cuda"); this package follows it exactly.
//
// Built with GOOS=wasip1 GOARCH=wasm, every call is a //go:wasmimport of a
// function of module idlepool_cuda. Built for any other platform (for
// example `go test` of a job program's CPU path), the package reports no
// device: [Devices] returns 0 and every other call fails with an error
// that errors.Is reports as [ErrNoDevice]. A task the worker gave no GPU
// sees the same under WebAssembly, so a program written as
//
//	if cuda.Devices() > 0 {
//		mod, err := cuda.LoadModule(ptx) // the PTX text, read from /input/...
//		...
//		fn, err := mod.Function("count_inside")
//		buf, err := cuda.Alloc(8 * n)
//		err = fn.Launch(cuda.Dim3{X: blocks, Y: 1, Z: 1}, cuda.Dim3{X: 256, Y: 1, Z: 1}, 0,
//			cuda.BufferArg(buf), cuda.U64(seed), cuda.U32(n))
//		err = cuda.Synchronize()
//		err = buf.Read(0, out)
//	} else {
//		// the same computation on the CPU
//	}
//
// computes on the GPU where there is one and on the CPU elsewhere.
//
// Errors are [*Error] values carrying the host module's code, the call
// that failed and the worker's message; compare them with errors.Is
// against the sentinels ErrNoDevice … ErrLimit.
//
// Concurrency: the host module serialises calls per task; a job program
// is one goroutine in practice. Modules, functions and buffers live until
// the task ends (the worker destroys the task's CUDA context then);
// [Buffer.Free] returns device memory earlier.
//
// The package uses only the standard library so that it compiles with
// GOOS=wasip1 GOARCH=wasm.
package cuda
