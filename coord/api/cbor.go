package api

import (
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/fxamacker/cbor/v2"

	"idlepool/castore"
	"idlepool/pool"
)

// CBORContentType is the media type of a body in its CBOR form (RFC
// 8949): the request and answer of POST /v1/work from API version 8, and
// the compact answer of GET /v1/receipts (pool.EntriesContentType).
const CBORContentType = "application/cbor"

// The CBOR form of a body is its JSON form converted item for item (RFC
// 8949, section 6.2): a map with the JSON's keys as text strings, in the
// order of the Go type's fields; integers, booleans and text as they are;
// digests and job IDs as the same 64 hex digits (HexDigest's text), times
// as the same RFC 3339 text; but binary values (a result) as byte strings,
// not base64. It is what fxamacker/cbor makes of the types with these
// options: their json tags name the keys, HexDigest's MarshalCBOR and
// UnmarshalCBOR write and read the digests.
var (
	cborEnc = func() cbor.EncMode {
		em, err := cbor.EncOptions{
			Time:        cbor.TimeRFC3339Nano,
			IndefLength: cbor.IndefLengthForbidden,
		}.EncMode()
		if err != nil {
			panic(err)
		}
		return em
	}()
	// cborStrict refuses what the encoder never writes and a careful
	// client never sends: keys in another case, unknown keys, a key
	// twice, indefinite lengths and tags. Unmarshal refuses trailing
	// bytes whatever the options.
	cborStrict = cborDecMode(cbor.ExtraDecErrorUnknownField)
	// cborAnswer is cborStrict less the refusal of unknown keys: an
	// answer of a newer coordinator may carry keys this client does not
	// know, which it skips, as it skips them in JSON.
	cborAnswer = cborDecMode(cbor.ExtraDecErrorNone)
)

// onlyBoolsAndNull rejects every simple value but false, true and null
// (20 to 22): the library would read the others (undefined among them)
// as integers or as null.
var onlyBoolsAndNull = func() *cbor.SimpleValueRegistry {
	var reject []func(*cbor.SimpleValueRegistry) error
	for v := 0; v < 256; v++ {
		if v < 20 || v == 23 || v > 31 {
			reject = append(reject, cbor.WithRejectedSimpleValue(cbor.SimpleValue(v)))
		}
	}
	r, err := cbor.NewSimpleValueRegistryFromDefaults(reject...)
	if err != nil {
		panic(err)
	}
	return r
}()

func cborDecMode(extra cbor.ExtraDecErrorCond) cbor.DecMode {
	dm, err := cbor.DecOptions{
		SimpleValues:      onlyBoolsAndNull,
		FieldNameMatching: cbor.FieldNameMatchingCaseSensitive,
		DupMapKey:         cbor.DupMapKeyEnforcedAPF,
		IndefLength:       cbor.IndefLengthForbidden,
		TagsMd:            cbor.TagsForbidden,
		ExtraReturnErrors: extra,
		MaxNestedLevels:   16,
		MaxArrayElements:  1 << 16,
		MaxMapPairs:       1 << 10,
	}.DecMode()
	if err != nil {
		panic(err)
	}
	return dm
}

// workRequestCBOR and workResultCBOR are WorkRequest and WorkResult in
// the shape of their CBOR form: their fields and json tags, but a ref in
// the shape of its JSON (castore.ManifestWire). castore.Manifest has no
// CBOR form of its own, since the cluster's state stream encodes it as a
// Go struct and must read what older nodes wrote; MarshalCBOR and
// UnmarshalCBOR take a WorkRequest through these
// (TestWorkRequestCBORFields keeps their keys the same).
type workRequestCBOR struct {
	Results   []workResultCBOR `json:"results,omitempty"`
	Lease     int              `json:"lease,omitempty"`
	Transfers []TransferReport `json:"transfers,omitempty"`
}

type workResultCBOR struct {
	Lease   string                `json:"lease"`
	Digest  HexDigest             `json:"digest"`
	Result  []byte                `json:"result,omitempty"`
	Failed  bool                  `json:"failed,omitempty"`
	Reason  string                `json:"reason,omitempty"`
	Machine bool                  `json:"machine,omitempty"`
	Ref     *castore.ManifestWire `json:"ref,omitempty"`
	Work    *pool.Work            `json:"work,omitempty"`
}

// toCBOR returns r in the shape of its CBOR form.
func (r *WorkRequest) toCBOR() workRequestCBOR {
	w := workRequestCBOR{Lease: r.Lease, Transfers: r.Transfers}
	if r.Results != nil {
		w.Results = make([]workResultCBOR, len(r.Results))
	}
	for i, x := range r.Results {
		w.Results[i] = workResultCBOR{Lease: x.Lease, Digest: x.Digest, Result: x.Result, Failed: x.Failed,
			Reason: x.Reason, Machine: x.Machine, Work: x.Work}
		if x.Ref != nil {
			ref := x.Ref.Wire()
			w.Results[i].Ref = &ref
		}
	}
	return w
}

// fromCBOR sets r from w; a ref that is not a well-formed manifest is an
// error wrapping castore.ErrBadManifest.
func (r *WorkRequest) fromCBOR(w *workRequestCBOR) error {
	out := WorkRequest{Lease: w.Lease, Transfers: w.Transfers}
	if w.Results != nil {
		out.Results = make([]WorkResult, len(w.Results))
	}
	for i, x := range w.Results {
		out.Results[i] = WorkResult{Lease: x.Lease, ResultSubmission: ResultSubmission{Digest: x.Digest, Result: x.Result,
			Failed: x.Failed, Reason: x.Reason, Machine: x.Machine, Work: x.Work}}
		if x.Ref != nil {
			ref, err := x.Ref.Manifest()
			if err != nil {
				return fmt.Errorf("results[%d]: field \"ref\": %w", i, err)
			}
			out.Results[i].Ref = &ref
		}
	}
	*r = out
	return nil
}

// MarshalCBOR returns the CBOR form of v, a body of the API (see
// CBORContentType): WorkRequest (or a pointer to one) or WorkResponse. The
// error is an encoding failure of one of v's values.
func MarshalCBOR(v any) ([]byte, error) {
	switch r := v.(type) {
	case WorkRequest:
		return cborEnc.Marshal(r.toCBOR())
	case *WorkRequest:
		return cborEnc.Marshal(r.toCBOR())
	}
	return cborEnc.Marshal(v)
}

// UnmarshalCBOR decodes data, the CBOR form of a request body, into v (a
// pointer, e.g. to WorkRequest), strictly: exactly one map, no unknown
// key, no key twice or in another case, no indefinite length, no tag, no
// trailing bytes, each value of its field's type. The error says which
// of those is wrong and, for a value, names its field; the coordinator
// answers it as 400.
func UnmarshalCBOR(data []byte, v any) error {
	if r, ok := v.(*WorkRequest); ok {
		var w workRequestCBOR
		if err := cborStrict.Unmarshal(data, &w); err != nil {
			return cborProblem(err)
		}
		return r.fromCBOR(&w)
	}
	return cborProblem(cborStrict.Unmarshal(data, v))
}

// UnmarshalCBORAnswer is UnmarshalCBOR for an answer, which may carry
// keys this client does not know (a newer coordinator's): it skips them.
func UnmarshalCBORAnswer(data []byte, v any) error {
	return cborProblem(cborAnswer.Unmarshal(data, v))
}

// cborProblem rewords fxamacker/cbor's errors for people: the library's
// words name Go types ("cannot unmarshal byte string into Go struct
// field api.WorkRequest.results of type []api.WorkResult"), which say
// nothing to a client in another language.
func cborProblem(err error) error {
	if err == nil {
		return nil
	}
	var typ *cbor.UnmarshalTypeError
	var unknown *cbor.UnknownFieldError
	var dup *cbor.DupMapKeyError
	var extra *cbor.ExtraneousDataError
	var syn *cbor.SyntaxError
	var unacceptable *cbor.UnacceptableDataItemError
	switch {
	case errors.As(err, &typ):
		// "api.WorkRequest.results": the library names the outermost
		// field of the value, which may be inside it.
		field := typ.StructFieldName
		field = field[strings.LastIndexByte(field, '.')+1:]
		got := typ.CBORType
		if got == "primitives" {
			got = "float or simple value"
		}
		if field == "" {
			return fmt.Errorf("a CBOR %s where the body has %s", got, cborWords(typ.GoType))
		}
		return fmt.Errorf("field %q (or a value inside it): want %s, not a CBOR %s", field, cborWords(typ.GoType), got)
	case errors.As(err, &unacceptable):
		return fmt.Errorf("a CBOR value the body never has (%v): only false, true and null are taken of the simple values", err)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return errors.New("truncated CBOR: the body ends inside a value, or a length runs past its end")
	case errors.As(err, &unknown):
		return fmt.Errorf("unknown key in the CBOR map (%v)", err)
	case errors.As(err, &dup):
		return fmt.Errorf("a key appears twice in a CBOR map (%v)", err)
	case errors.As(err, &extra):
		return errors.New("trailing data after the CBOR map")
	case errors.As(err, &syn):
		return fmt.Errorf("malformed CBOR: %v", err)
	}
	return fmt.Errorf("CBOR body: %v", err)
}

// cborWords names a Go type of the API's bodies as what it takes in CBOR.
func cborWords(goType string) string {
	switch {
	case goType == "[]uint8":
		return "a byte string"
	case goType == "string":
		return "a text string"
	case goType == "bool":
		return "a boolean"
	case strings.HasPrefix(goType, "int"), strings.HasPrefix(goType, "uint"):
		return "an integer"
	case strings.HasPrefix(goType, "[]"):
		return "an array"
	case strings.HasPrefix(goType, "map["), strings.Contains(goType, "."):
		return "a map"
	}
	return goType
}

// AppendWorkResponseCBOR appends r's CBOR form (see CBORContentType) to
// dst: the bytes MarshalCBOR writes for it, written directly. It is the
// coordinator's answer to every POST /v1/work that asks for CBOR, where
// the generic encoder's reflection cost as much as encoding/json's.
// Text that is not valid UTF-8 (a message quoting bytes a client sent)
// has each run of bad bytes replaced by one U+FFFD (encoding/json
// replaces each byte); a CBOR text string must be UTF-8 (RFC 8949,
// section 3.1).
func AppendWorkResponseCBOR(dst []byte, r *WorkResponse) []byte {
	n := uint64(2)
	if r.LeaseError != nil {
		n++
	}
	dst = pool.AppendCBORHead(dst, 5, n)
	dst = cborText(dst, "results")
	if r.Results == nil {
		dst = append(dst, 0xf6) // null, as MarshalCBOR writes a nil slice
	} else {
		dst = pool.AppendCBORHead(dst, 4, uint64(len(r.Results)))
	}
	for i := range r.Results {
		dst = appendWorkAnswerCBOR(dst, &r.Results[i])
	}
	dst = cborText(dst, "leases")
	if r.Leases == nil {
		dst = append(dst, 0xf6) // null, as MarshalCBOR writes a nil slice
	} else {
		dst = pool.AppendCBORHead(dst, 4, uint64(len(r.Leases)))
	}
	for _, g := range r.Leases {
		dst = pool.AppendCBORHead(dst, 5, 4)
		dst = cborText(dst, "lease")
		dst = cborText(dst, g.Lease)
		dst = cborText(dst, "job")
		dst = pool.AppendCBORHead(dst, 3, 2*uint64(len(g.Job)))
		dst = hex.AppendEncode(dst, g.Job[:])
		dst = cborText(dst, "task")
		dst = pool.AppendCBORInt(dst, g.Task)
		dst = cborText(dst, "deadline")
		if g.Deadline.IsZero() {
			dst = append(dst, 0xf6) // null, as MarshalCBOR writes a zero time
		} else {
			var buf [64]byte
			t := g.Deadline.AppendFormat(buf[:0], time.RFC3339Nano) // ASCII
			dst = append(pool.AppendCBORHead(dst, 3, uint64(len(t))), t...)
		}
	}
	if r.LeaseError != nil {
		dst = cborText(dst, "lease_error")
		dst = appendWorkAnswerCBOR(dst, r.LeaseError)
	}
	return dst
}

// appendWorkAnswerCBOR appends a's CBOR map: lease and status always,
// code and error when not empty (their omitempty).
func appendWorkAnswerCBOR(dst []byte, a *WorkAnswer) []byte {
	n := uint64(2)
	if a.Code != "" {
		n++
	}
	if a.Error != "" {
		n++
	}
	dst = pool.AppendCBORHead(dst, 5, n)
	dst = cborText(dst, "lease")
	dst = cborText(dst, a.Lease)
	dst = cborText(dst, "status")
	dst = pool.AppendCBORInt(dst, int64(a.Status))
	if a.Code != "" {
		dst = cborText(dst, "code")
		dst = cborText(dst, a.Code)
	}
	if a.Error != "" {
		dst = cborText(dst, "error")
		dst = cborText(dst, a.Error)
	}
	return dst
}

// cborText appends s as a CBOR text string, each run of invalid UTF-8 in
// it replaced by U+FFFD.
func cborText(dst []byte, s string) []byte {
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	return pool.AppendCBORText(dst, s)
}
