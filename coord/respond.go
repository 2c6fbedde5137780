package coord

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"syscall"

	"github.com/dustin/go-humanize"

	"idlepool/home"
	"idlepool/pool"
	"idlepool/store"
)

// apiError is an error answer: a status, a stable code and a message for
// people. Handlers return it for requests that are wrong; every other
// error goes through statusOf.
type apiError struct {
	status  int
	code    string
	msg     string
	missing []HexDigest
}

func (e *apiError) Error() string { return e.msg }

func badRequest(format string, args ...any) *apiError {
	return &apiError{http.StatusBadRequest, "bad_request", fmt.Sprintf(format, args...), nil}
}

func unauthorized(err error) *apiError {
	return &apiError{http.StatusUnauthorized, "unauthorized", err.Error(), nil}
}

func notFound(code, format string, args ...any) *apiError {
	return &apiError{http.StatusNotFound, code, fmt.Sprintf(format, args...), nil}
}

// errorStatus maps an error to its HTTP status and code (docs/api.md,
// "Status codes"). Scheduler errors are matched with errors.Is against
// the sentinels of package pool.
func errorStatus(err error) (status int, code string) {
	var ae *apiError
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &ae):
		return ae.status, ae.code
	case errors.As(err, &tooLarge):
		return http.StatusRequestEntityTooLarge, "too_large"
	case errors.Is(err, errClockSkew):
		return http.StatusUnauthorized, "clock_skew"
	case errors.Is(err, errAuth), errors.Is(err, pool.ErrUnknownPeer):
		return http.StatusUnauthorized, "unauthorized"
	case errors.Is(err, pool.ErrUnknownJob):
		return http.StatusNotFound, "unknown_job"
	case errors.Is(err, pool.ErrUnknownLease):
		return http.StatusNotFound, "unknown_lease"
	case errors.Is(err, pool.ErrNotYourLease):
		return http.StatusForbidden, "not_your_lease"
	case errors.Is(err, pool.ErrNotMerger):
		return http.StatusForbidden, "not_merger"
	case errors.Is(err, pool.ErrNotAllowed):
		return http.StatusForbidden, "not_allowed"
	case errors.Is(err, pool.ErrExcluded):
		return http.StatusForbidden, "excluded"
	case errors.Is(err, pool.ErrLeaseExpired):
		return http.StatusGone, "lease_expired"
	case errors.Is(err, pool.ErrJobCancelled):
		return http.StatusGone, "job_cancelled"
	case errors.Is(err, pool.ErrNotOwner):
		return http.StatusForbidden, "not_owner"
	case errors.Is(err, pool.ErrTaskDecided):
		return http.StatusConflict, "task_decided"
	case errors.Is(err, pool.ErrSendInline):
		return http.StatusConflict, "send_inline"
	case errors.Is(err, pool.ErrConflict):
		return http.StatusConflict, "conflict"
	case errors.Is(err, pool.ErrBadSubmission), errors.Is(err, pool.ErrBadRequest):
		return http.StatusBadRequest, "bad_request"
	case errors.Is(err, errBusy):
		return http.StatusServiceUnavailable, "busy"
	case errors.Is(err, pool.ErrStoreUnavailable), errors.Is(err, syscall.ENOSPC):
		return http.StatusServiceUnavailable, "store_unavailable"
	case errors.Is(err, pool.ErrStopped), errors.Is(err, context.Canceled):
		return http.StatusServiceUnavailable, "unavailable"
	}
	return http.StatusInternalServerError, "internal"
}

// fail answers err. Client errors (4xx) say what is wrong; a coordinator
// fault (5xx) is logged with its cause and answered with a generic
// message, so internals do not leak.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	status, code := errorStatus(err)
	body := ErrorBody{Error: err.Error(), Code: code}
	var ae *apiError
	if errors.As(err, &ae) {
		body.Missing = ae.missing
	}
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		body.Error = fmt.Sprintf("request body larger than the limit of %d bytes for %s", tooLarge.Limit, r.URL.Path)
	}
	switch {
	case code == "busy":
		s.log.Info("Request refused", "method", r.Method, "path", r.URL.Path, "err", err)
		body.Error = "the coordinator holds as many request bodies as its limits allow: retry in a moment"
		w.Header().Set("Retry-After", "1")
	case code == "store_unavailable":
		s.log.Debug("Request refused while the store is unavailable", "method", r.Method, "path", r.URL.Path, "err", err)
		body.Error = "the coordinator cannot store anything now (" + s.storeWords(err) + "): retry later"
		w.Header().Set("Retry-After", "5")
	case errors.Is(err, context.Canceled) && r.Context().Err() != nil:
		// The client went away (a long poll it stopped waiting for): no
		// fault of the coordinator's, and nobody reads the answer.
		s.log.Debug("Request given up by its client", "method", r.Method, "path", r.URL.Path)
		body.Error = "the request was cancelled"
	case status == http.StatusServiceUnavailable:
		s.log.Warn("Request refused", "method", r.Method, "path", r.URL.Path, "err", err)
		body.Error = "the coordinator is shutting down or restarting: retry later"
	case status >= 500:
		s.log.Error("Request failed", "method", r.Method, "path", r.URL.Path, "err", err)
		body.Error = "internal coordinator error (see the coordinator's log)"
	default:
		s.log.Debug("Request refused", "method", r.Method, "path", r.URL.Path, "status", status, "err", err)
	}
	writeJSON(w, status, body)
}

// writeJSON answers v as JSON with status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, `{"error":"internal coordinator error","code":"internal"}`, http.StatusInternalServerError)
		return
	}
	writeBody(w, status, "application/json", append(b, '\n'))
}

// writeBody writes an answer of status with body b of media type ctype,
// and its Content-Length: without it net/http sends a body over 4 KiB in
// chunks, and a client reading it into a buffer cannot size the buffer
// up front (a device's receipts, read so, were the largest part of what
// its agent allocated).
func writeBody(w http.ResponseWriter, status int, ctype string, b []byte) {
	h := w.Header()
	h.Set("Content-Type", ctype)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	w.Write(b)
}

// storeWords says for people why the pool's database takes no writes:
// "disk full, 0 B free on /var/lib/idlepool", "its database is locked by
// another process".
func (s *Server) storeWords(err error) string {
	switch {
	case errors.Is(err, store.ErrFull), errors.Is(err, syscall.ENOSPC):
		free, ferr := home.FreeBytes(s.cfg.DataDir)
		if ferr != nil {
			return "disk full on " + s.cfg.DataDir
		}
		return fmt.Sprintf("disk full, %s free on %s", humanize.IBytes(free), s.cfg.DataDir)
	case errors.Is(err, store.ErrBusy):
		return "its database is locked by another process"
	}
	return err.Error()
}
