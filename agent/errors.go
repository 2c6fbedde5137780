package agent

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"syscall"
	"time"

	"idlepool/coord/api"
	"idlepool/version"
)

// Sentinel errors of package agent; compare with errors.Is. An *APIError
// matches the sentinel of its status code.
var (
	// ErrBadRequest: the coordinator refused a request as malformed (400).
	ErrBadRequest = errors.New("agent: request refused as malformed")
	// ErrUnauthorized: the coordinator does not know this device or its
	// signature (401).
	ErrUnauthorized = errors.New("agent: request not authenticated")
	// ErrForbidden: not allowed, e.g. not invited to the pool, not the
	// job's merger, or a lease of another peer (403).
	ErrForbidden = errors.New("agent: not allowed")
	// ErrNotFound: unknown job, lease or blob (404).
	ErrNotFound = errors.New("agent: not found")
	// ErrConflict: the request conflicts with the pool's state, e.g. a job
	// whose files are not uploaded yet (409).
	ErrConflict = errors.New("agent: conflict")
	// ErrLeaseExpired: the lease is no longer held (410).
	ErrLeaseExpired = errors.New("agent: lease expired")
	// ErrTooLarge: the request body is over the coordinator's limit (413).
	ErrTooLarge = errors.New("agent: request too large")
	// ErrClockSkew: the coordinator refused a request because its
	// timestamp is too far from the coordinator's clock (401 clock_skew;
	// it also matches ErrUnauthorized). Worth retrying: the client
	// measures the offset and the clock may be set right.
	ErrClockSkew = errors.New("agent: this device's clock is too far off the pool's")
	// ErrUnavailable: the coordinator could not be reached or answered
	// with a server error; worth retrying later.
	ErrUnavailable = errors.New("agent: coordinator unavailable")

	// ErrNotCoordinator: what answered at the pool's URL is not an
	// idlepool coordinator: it served an HTML page (see NotAPIError).
	ErrNotCoordinator = errors.New("agent: not an idlepool coordinator")
	// ErrTooOld: the pool accepts only newer idlepool versions (426
	// "agent_too_old", or its GET /v1/pool's min_agent; see TooOldError).
	ErrTooOld = errors.New("agent: the pool needs a newer idlepool")

	// ErrNoAgent: no agent answers on the local API (none runs, or its
	// socket is stale). Returned by ReadStatus.
	ErrNoAgent = errors.New("agent: no agent answers on the local API")
	// ErrPoolKeyChanged: the pool's coordinator key differs from the one
	// pinned when this device first joined it.
	ErrPoolKeyChanged = errors.New("agent: the pool's key changed since this device joined")
	// ErrBadReceipt: a ledger entry does not verify against the pool's key.
	ErrBadReceipt = errors.New("agent: receipt does not verify")
	// ErrBadBlob: a downloaded file does not match its digest.
	ErrBadBlob = errors.New("agent: downloaded file does not match its digest")
)

// APIError is an error answer of the coordinator: its HTTP status and the
// body's "error" and "code" fields.
type APIError struct {
	Method, Path string   // the request, e.g. "POST", "/v1/leases"
	Status       int      // the HTTP status, 300 or more
	Code         string   // machine-readable, e.g. "not_your_lease"
	Message      string   // for people
	Missing      []string // 409 on job registration: digests not uploaded yet
	// Offset is, for a refusal of the request's timestamp (Code
	// "clock_skew"), the pool's clock minus this device's as measured
	// from that answer.
	Offset time.Duration
}

// codeClockSkew is the coordinator's code for a request whose timestamp
// is too far from its clock.
const codeClockSkew = "clock_skew"

// TooOldError is a pool's refusal of this idlepool: it accepts only
// devices of version Need or newer (api.PoolInfo.MinAgent, or its 426
// "agent_too_old" answer). It matches ErrTooOld. Its words name the
// version; Donor adds what is done about it ("updating").
type TooOldError struct {
	Pool string // the pool's URL
	Need string // the oldest version it accepts, as people write it ("1.4"); "" when it did not say
	Have string // this build's version
}

// Error says "this pool needs idlepool 1.4 or newer (this is 1.3.0)".
func (e *TooOldError) Error() string {
	need := "a newer idlepool"
	if e.Need != "" {
		need = "idlepool " + e.Need + " or newer"
	}
	return fmt.Sprintf("this pool needs %s (this is %s)", need, e.Have)
}

// Is matches ErrTooOld.
func (e *TooOldError) Is(target error) bool { return target == ErrTooOld }

// CheckVersion says whether the pool that answered info accepts this
// build: a *TooOldError when its MinAgent is newer than version.Version
// (a build without a version counts as older than every release).
func CheckVersion(info api.PoolInfo) error {
	if need, err := version.Parse(info.MinAgent); info.MinAgent != "" && err == nil && version.Current().Less(need) {
		// (a malformed minimum refuses nobody here; the pool's 426 still would)
		return &TooOldError{Need: need.Short(), Have: version.Version}
	}
	if info.MinAPI > api.APIVersion {
		return &TooOldError{Have: version.Version}
	}
	return nil
}

// codeTaskDecided is the coordinator's code (409) for a heartbeat or
// result of a replica whose task was decided without it (pool.
// ErrTaskDecided): another device's result completed its verification
// first, as when a backup replica in a job's tail wins.
const codeTaskDecided = "task_decided"

// errTaskDecided is the cause with which a running task is stopped when
// the coordinator says it was decided without this replica.
var errTaskDecided = errors.New("agent: task decided without this replica")

// isTaskDecided reports whether err is the coordinator's answer that the
// task was decided without this replica.
func isTaskDecided(err error) bool {
	ae, ok := errors.AsType[*APIError](err)
	return ok && ae.Status == http.StatusConflict && ae.Code == codeTaskDecided
}

// Error implements error: "METHOD PATH: STATUS message".
func (e *APIError) Error() string {
	msg := e.Message
	if msg == "" {
		msg = http.StatusText(e.Status)
	}
	return fmt.Sprintf("%s %s: %d %s", e.Method, e.Path, e.Status, msg)
}

// Is matches the sentinel of e's status code.
func (e *APIError) Is(target error) bool {
	if e.Code == api.CodeAgentTooOld {
		return target == ErrTooOld
	}
	switch e.Status {
	case http.StatusBadRequest:
		return target == ErrBadRequest
	case http.StatusUnauthorized:
		return target == ErrUnauthorized || (target == ErrClockSkew && e.Code == codeClockSkew)
	case http.StatusForbidden:
		return target == ErrForbidden
	case http.StatusNotFound:
		return target == ErrNotFound
	case http.StatusConflict:
		return target == ErrConflict
	case http.StatusGone:
		return target == ErrLeaseExpired
	case http.StatusRequestEntityTooLarge:
		return target == ErrTooLarge
	}
	return e.Status >= 500 && target == ErrUnavailable
}

// Retryable reports whether err is worth retrying later: the coordinator
// was unreachable, timed out or failed (5xx, 429), or refused this
// device's clock (ErrClockSkew). Other refusals (4xx) are not.
func Retryable(err error) bool {
	if err == nil {
		return false
	}
	var ae *APIError
	if errors.As(err, &ae) {
		return ae.Status >= 500 || ae.Status == http.StatusTooManyRequests || ae.Code == codeClockSkew
	}
	return errors.Is(err, ErrUnavailable)
}

// NotAPIError is an answer that is no coordinator's: an HTML page, as
// another web server, a proxy or a captive portal serves at the pool's
// URL. It matches ErrNotCoordinator, and ErrUnavailable too when its
// status is a server error (5xx) or 429, as a proxy in front of a
// coordinator that is down answers: worth retrying later (Retryable).
type NotAPIError struct {
	Method      string // the request's method, e.g. "GET"
	URL         string // the request's URL, without its query
	Status      int    // the HTTP status
	ContentType string // the answer's Content-Type header, "" if none
	Title       string // the page's <title>, "" if it has none
}

// Error says what the URL served and what was expected.
func (e *NotAPIError) Error() string {
	page := "an HTML page"
	if e.Title != "" {
		page += fmt.Sprintf(" titled %q", e.Title)
	}
	ctype := e.ContentType
	if ctype == "" {
		ctype = "no Content-Type"
	}
	return fmt.Sprintf("%s %s served %d %s, %s (%s), where an idlepool coordinator's JSON API was expected",
		e.Method, e.URL, e.Status, http.StatusText(e.Status), page, ctype)
}

// Is matches ErrNotCoordinator, and ErrUnavailable for a 5xx or 429.
func (e *NotAPIError) Is(target error) bool {
	return target == ErrNotCoordinator ||
		target == ErrUnavailable && (e.Status >= 500 || e.Status == http.StatusTooManyRequests)
}

// UnansweredWords says in a few words why a coordinator did not answer
// a request (err is Retryable, or a connection failed): "connection
// refused", "connection reset", "no answer in time", "host X not found",
// "it answered 503 Service Unavailable", or, where the answer gave a
// reason, "it answered 503: no node of this cluster is in charge …";
// "unreachable" otherwise.
func UnansweredWords(err error) string {
	var ae *APIError
	var dns *net.DNSError
	var ne net.Error
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, syscall.ECONNRESET):
		return "connection reset"
	case errors.As(err, &ae) && ae.Message != "":
		return fmt.Sprintf("it answered %d: %s", ae.Status, ae.Message)
	case errors.As(err, &ae):
		return fmt.Sprintf("it answered %d %s", ae.Status, http.StatusText(ae.Status))
	case errors.As(err, &dns):
		return "host " + dns.Name + " not found"
	case errors.As(err, &ne) && ne.Timeout():
		return "no answer in time"
	}
	return "unreachable"
}
