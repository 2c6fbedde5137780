//go:build !wasip1

package cuda

import "runtime"

// platformHost returns the host module of a native build: no device.
func platformHost() host { return noDevice{} }

// noDevice is the host module outside WebAssembly: there is no
// idlepool_cuda to call, so there is no device and every call fails with
// ErrNoDevice.
type noDevice struct{}

func (noDevice) deviceCount() int32                    { return 0 }
func (noDevice) deviceInfo(int32, []byte) int32        { return codeNoDevice }
func (noDevice) moduleLoad([]byte) int32               { return codeNoDevice }
func (noDevice) functionGet(int32, []byte) int32       { return codeNoDevice }
func (noDevice) memAlloc(int64) int32                  { return codeNoDevice }
func (noDevice) memFree(int32) int32                   { return codeNoDevice }
func (noDevice) memcpyHtoD(int32, int64, []byte) int32 { return codeNoDevice }
func (noDevice) memcpyDtoH([]byte, int32, int64) int32 { return codeNoDevice }
func (noDevice) synchronize() int32                    { return codeNoDevice }
func (noDevice) launch(int32, Dim3, Dim3, uint32, []byte, int32) int32 {
	return codeNoDevice
}

// noDeviceMessage is last_error's text outside WebAssembly.
var noDeviceMessage = "no GPU: this program was built for " + runtime.GOOS +
	"; the idlepool_cuda host module exists only for programs built with GOOS=wasip1 GOARCH=wasm and run by an idlepool worker"

func (noDevice) lastError(out []byte) int32 {
	return int32(copy(out, noDeviceMessage))
}
