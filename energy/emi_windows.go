package energy

import (
	"errors"
	"fmt"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sys/windows"
)

// pdh.dll, the Performance Data Helper, and the calls pdhReader makes
// (pdh.h). Each is looked up when first called: a pdh.dll that lacks one
// is a machine whose counters cannot be read.
var (
	pdh                    = windows.NewLazySystemDLL("pdh.dll")
	pdhOpenQueryW          = pdh.NewProc("PdhOpenQueryW")
	pdhAddEnglishCounterW  = pdh.NewProc("PdhAddEnglishCounterW")
	pdhCollectQueryData    = pdh.NewProc("PdhCollectQueryData")
	pdhGetRawCounterArrayW = pdh.NewProc("PdhGetRawCounterArrayW")
	pdhCloseQuery          = pdh.NewProc("PdhCloseQuery")
	kernel32               = windows.NewLazySystemDLL("kernel32.dll")
	getSystemTimes         = kernel32.NewProc("GetSystemTimes")
)

// PDH's status codes that pdhReader tells apart (pdhmsg.h).
const (
	pdhMoreData        = 0x800007D2 // PDH_MORE_DATA
	pdhNoData          = 0x800007D5 // PDH_NO_DATA: the object has no instance
	pdhCStatusValid    = 0          // PDH_CSTATUS_VALID_DATA
	pdhCStatusNewData  = 1          // PDH_CSTATUS_NEW_DATA
	energyCounterPath  = `\Energy Meter(*)\Energy`
	pdhMaxCounterBytes = 1 << 20
)

// pdhRawCounter is PDH_RAW_COUNTER: {DWORD CStatus; FILETIME TimeStamp;
// LONGLONG FirstValue, SecondValue; DWORD MultiCount;}.
type pdhRawCounter struct {
	CStatus     uint32
	TimeStamp   windows.Filetime
	FirstValue  int64
	SecondValue int64
	MultiCount  uint32
}

// pdhRawCounterItem is PDH_RAW_COUNTER_ITEM_W: {LPWSTR szName;
// PDH_RAW_COUNTER RawValue;}.
type pdhRawCounterItem struct {
	Name     *uint16
	RawValue pdhRawCounter
}

// pdhReader reads \Energy Meter(*)\Energy through one PDH query, kept
// open: each ReadEnergy collects the query and reads the counter's raw
// values (PdhGetRawCounterArrayW), which are the meters' cumulative
// picowatt-hours.
type pdhReader struct {
	mu      sync.Mutex
	query   uintptr // PDH_HQUERY
	counter uintptr // PDH_HCOUNTER
}

// pdhError is a PDH_STATUS other than ERROR_SUCCESS.
type pdhError struct {
	call   string
	status uint32
}

func (e *pdhError) Error() string { return fmt.Sprintf("%s: PDH status 0x%08X", e.call, e.status) }

func pdhCall(p *windows.LazyProc, args ...uintptr) error {
	if err := p.Find(); err != nil {
		return fmt.Errorf("pdh.dll: %w", err)
	}
	r, _, _ := p.Call(args...)
	if r != 0 {
		return &pdhError{call: p.Name, status: uint32(r)}
	}
	return nil
}

// openPDHReader opens a query on \Energy Meter(*)\Energy. A machine
// without the counter set, or a pdh.dll that cannot add it, is a
// *NotExposedError with the reason.
func openPDHReader() (*pdhReader, error) {
	r := &pdhReader{}
	if err := pdhCall(pdhOpenQueryW, 0, 0, uintptr(unsafe.Pointer(&r.query))); err != nil {
		return nil, &NotExposedError{Reason: "PDH cannot open a query: " + err.Error()}
	}
	path, _ := windows.UTF16PtrFromString(energyCounterPath)
	if err := pdhCall(pdhAddEnglishCounterW, r.query, uintptr(unsafe.Pointer(path)), 0, uintptr(unsafe.Pointer(&r.counter))); err != nil {
		r.close()
		return nil, &NotExposedError{Reason: "this machine has no Energy Meter counter set (" + energyCounterPath + "; " + err.Error() + ")"}
	}
	return r, nil
}

// ReadEnergy collects the query and returns each instance's raw value.
// No instance is an empty map (the counter set exists but nothing
// publishes to it).
func (r *pdhReader) ReadEnergy() (map[string]uint64, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.query == 0 {
		return nil, errors.New("the Energy Meter query is closed")
	}
	if err := pdhCall(pdhCollectQueryData, r.query); err != nil {
		var pe *pdhError
		if errors.As(err, &pe) && pe.status == pdhNoData {
			return map[string]uint64{}, nil
		}
		return nil, err
	}
	var size, count uint32
	err := pdhCall(pdhGetRawCounterArrayW, r.counter, uintptr(unsafe.Pointer(&size)), uintptr(unsafe.Pointer(&count)), 0)
	var pe *pdhError
	switch {
	case errors.As(err, &pe) && pe.status == pdhNoData:
		return map[string]uint64{}, nil
	case errors.As(err, &pe) && pe.status == pdhMoreData:
	case err != nil:
		return nil, err
	default:
		return map[string]uint64{}, nil // nothing to read
	}
	if size == 0 || size > pdhMaxCounterBytes {
		return nil, fmt.Errorf("PdhGetRawCounterArrayW: asks for %d bytes", size)
	}
	// The items, then the strings their names point to, in one buffer
	// of uint64s (the items' alignment).
	buf := make([]uint64, (size+7)/8)
	if err := pdhCall(pdhGetRawCounterArrayW, r.counter, uintptr(unsafe.Pointer(&size)), uintptr(unsafe.Pointer(&count)), uintptr(unsafe.Pointer(&buf[0]))); err != nil {
		return nil, err
	}
	if uintptr(count)*unsafe.Sizeof(pdhRawCounterItem{}) > uintptr(len(buf))*8 {
		return nil, fmt.Errorf("PdhGetRawCounterArrayW: %d items do not fit %d bytes", count, size)
	}
	items := unsafe.Slice((*pdhRawCounterItem)(unsafe.Pointer(&buf[0])), count)
	out := make(map[string]uint64, count)
	for _, it := range items {
		st := it.RawValue.CStatus
		if st != pdhCStatusValid && st != pdhCStatusNewData {
			return nil, fmt.Errorf("the Energy Meter's instance %s: counter status 0x%08X", windows.UTF16PtrToString(it.Name), st)
		}
		out[windows.UTF16PtrToString(it.Name)] = uint64(it.RawValue.FirstValue)
	}
	return out, nil
}

func (r *pdhReader) close() {
	if r.query != 0 {
		_ = pdhCall(pdhCloseQuery, r.query)
		r.query = 0
	}
}

// OpenSystemEMI opens this machine's Energy Meter counters through
// pdh.dll (no driver of ours: the counters are what the processor's
// driver publishes, readable without administrator rights) and keeps
// the CPU packages' instances. A machine that exposes none is a
// *NotExposedError (matching ErrNoCounter), whose text says why in
// words for the donor; a failure of PDH otherwise is an error naming the
// call and its status.
func OpenSystemEMI() (*EMI, error) {
	r, err := openPDHReader()
	if err != nil {
		return nil, err
	}
	e, err := OpenEMI(r)
	if err != nil {
		r.close()
		return nil, err
	}
	return e, nil
}

// winTimes reads CPU times through kernel32: GetSystemTimes (each
// CPU's idle, kernel (idle included) and user time, summed over CPUs)
// and GetProcessTimes, in 100 ns units.
type winTimes struct{}

// SystemCPUTimes returns Windows' CPU times (GetSystemTimes,
// GetProcessTimes) for Config.Times.
func SystemCPUTimes() CPUTimes { return winTimes{} }

func filetime(f windows.Filetime) time.Duration {
	return time.Duration(uint64(f.HighDateTime)<<32|uint64(f.LowDateTime)) * 100
}

// Busy is kernel plus user time less idle time, over all CPUs.
func (winTimes) Busy() (time.Duration, error) {
	if err := getSystemTimes.Find(); err != nil {
		return 0, err
	}
	var idle, kernel, user windows.Filetime
	r, _, err := getSystemTimes.Call(uintptr(unsafe.Pointer(&idle)), uintptr(unsafe.Pointer(&kernel)), uintptr(unsafe.Pointer(&user)))
	if r == 0 {
		return 0, fmt.Errorf("GetSystemTimes: %w", err)
	}
	return filetime(kernel) + filetime(user) - filetime(idle), nil
}

// Process is the process's kernel and user time.
func (winTimes) Process(pid int) (time.Duration, error) {
	h, err := windows.OpenProcess(windows.PROCESS_QUERY_LIMITED_INFORMATION, false, uint32(pid))
	if err != nil {
		return 0, fmt.Errorf("open process %d: %w", pid, err)
	}
	defer windows.CloseHandle(h)
	var created, exited, kernel, user windows.Filetime
	if err := windows.GetProcessTimes(h, &created, &exited, &kernel, &user); err != nil {
		return 0, fmt.Errorf("CPU time of process %d: %w", pid, err)
	}
	return filetime(kernel) + filetime(user), nil
}
