package coord

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"idlepool/job"
	"idlepool/pool"
)

// allocatedBy runs f and returns the bytes the process allocated
// meanwhile (runtime.MemStats.TotalAlloc, so other goroutines' too:
// tests bound it well above what f alone should take) and f's error.
func allocatedBy(f func() error) (uint64, error) {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	err := f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc, err
}

// elementsOf counts the elements of every array in v, a value decoded by
// encoding/json into an any: the reference checkJSONElements is held to.
func elementsOf(v any) int {
	n := 0
	switch v := v.(type) {
	case []any:
		n += len(v)
		for _, e := range v {
			n += elementsOf(e)
		}
	case map[string]any:
		for _, e := range v {
			n += elementsOf(e)
		}
	}
	return n
}

// randomJSON writes a random JSON value of at most depth levels to b:
// arrays and objects, empty or not, and strings with quotes, backslashes,
// brackets and commas in them, with white space between the tokens.
func randomJSON(r *rand.Rand, b *strings.Builder, depth int) {
	space := func() {
		if r.IntN(4) == 0 {
			b.WriteString([]string{" ", "\n", "\t ", "\r\n"}[r.IntN(4)])
		}
	}
	kind := r.IntN(6)
	if depth == 0 {
		kind = r.IntN(3)
	}
	switch kind {
	case 0:
		b.WriteString(strconv.Itoa(r.IntN(1000)))
	case 1:
		b.WriteString([]string{"true", "false", "null"}[r.IntN(3)])
	case 2:
		b.WriteByte('"')
		for range r.IntN(6) {
			b.WriteString([]string{`a`, `\"`, `\\`, `[`, `]`, `,`, `{`, `}`, `\u005b`, `\\\"`}[r.IntN(10)])
		}
		b.WriteByte('"')
	case 3, 4:
		b.WriteByte('[')
		for i := range r.IntN(5) {
			if i > 0 {
				b.WriteByte(',')
			}
			space()
			randomJSON(r, b, depth-1)
			space()
		}
		b.WriteByte(']')
	case 5:
		b.WriteByte('{')
		for i := range r.IntN(4) {
			if i > 0 {
				b.WriteByte(',')
			}
			space()
			b.WriteString(`"k` + strconv.Itoa(i) + `[,"`)
			space()
			b.WriteByte(':')
			space()
			randomJSON(r, b, depth-1)
		}
		b.WriteByte('}')
	}
}

// checkJSONElements counts as encoding/json decodes: on 3,000 random
// JSON texts it refuses exactly those with more elements than the
// limit, at the limit and one under it.
func TestCheckJSONElementsCounts(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 3000 {
		var b strings.Builder
		b.WriteString(" ")
		randomJSON(r, &b, 5)
		text := b.String()
		var v any
		if err := json.Unmarshal([]byte(text), &v); err != nil {
			t.Fatalf("text %d is not JSON: %v\n%s", i, err, text)
		}
		n := elementsOf(v)
		if err := checkJSONElements([]byte(text), n, "its"); err != nil {
			t.Fatalf("text %d with %d elements refused at the limit %d: %v\n%s", i, n, n, err, text)
		}
		if n > 0 {
			if err := checkJSONElements([]byte(text), n-1, "its"); err == nil {
				t.Fatalf("text %d with %d elements passed the limit %d\n%s", i, n, n-1, text)
			}
		}
	}
}

// What checkJSONElements is given that is not JSON it leaves to the
// decoder, without failing: an unterminated string, brackets that do not
// match, a lone backslash at the end.
func TestCheckJSONElementsNotJSON(t *testing.T) {
	for _, text := range []string{``, `"`, `"abc\"`, `]]]}}`, `[[[[`, `["\`, `[,,,]`, strings.Repeat("[", 11)} {
		if err := checkJSONElements([]byte(text), 10, "its"); err != nil {
			t.Errorf("%q: %v", text, err)
		}
	}
	if err := checkJSONElements([]byte(`[,,,,,,,,,,,]`), 10, "its"); err == nil {
		t.Error("12 elements, even malformed, passed the limit of 10")
	}
}

// A request body of arrays larger than any request decoded whole may
// carry is refused before it is decoded: 1 MiB of empty objects (349,519
// of them, which decoding as held results turned into 28 MB of structs
// after allocating 134 MB in all) is an error naming the bound, and
// deciding it allocates little; over HTTP, an offer of them is a 400
// saying so. Held results are read one by one: 1 MiB of them meets the
// route's own limit at its 1,025th, and a full request as an agent sends
// it (1,024 results whose job and digest are arrays of 32 numbers,
// 66,560 elements) is answered. A chunk announcement at its route's
// limit passes the bound and meets that limit's error, as before.
func TestDecodeStrictBounded(t *testing.T) {
	body := []byte(`{"results":[` + strings.Repeat(`{},`, (maxJSONBody-20)/3) + `{}]}`)
	if len(body) > maxJSONBody {
		t.Fatalf("body of %d bytes, over the limit of %d", len(body), maxJSONBody)
	}
	n, err := allocatedBy(func() error { return decodeStrict(body, &HeldResults{}) })
	want := "the body's arrays hold more than " + strconv.Itoa(maxJSONElements) + " elements in all"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("decodeStrict: %v, want an error saying %q", err, want)
	}
	if n > 1<<20 {
		t.Errorf("refusing it allocated %d KB", n>>10)
	}

	ts := startServer(t, nil)
	bob := newPeer(t, nil)
	ts.register(t, bob, "", http.StatusCreated)
	offer := []byte(`{"pools":[` + strings.Repeat(`{},`, (maxJSONBody-20)/3) + `{}]}`)
	if a := ts.do(t, bob, "POST", "/v1/offers", offer); a.status != http.StatusBadRequest || !strings.Contains(string(a.body), want) {
		t.Errorf("an offer of %d bytes: %d %s, want 400 saying %q", len(offer), a.status, a.body, want)
	}
	if a := ts.do(t, bob, "POST", "/v1/results/held", body); a.status != http.StatusBadRequest ||
		!strings.Contains(string(a.body), "1025 results or more, the limit is 1024") {
		t.Errorf("held results of %d bytes: %d %s, want 400 naming the route's limit", len(body), a.status, a.body)
	}
	held := HeldResults{Results: make([]pool.HeldResult, pool.MaxHeldQuery)}
	for i := range held.Results {
		held.Results[i] = pool.HeldResult{Job: job.ID{byte(i)}, Task: int64(i), Digest: job.Digest{byte(i), 1}}
	}
	if a := ts.do(t, bob, "POST", "/v1/results/held", held); a.status != http.StatusOK {
		t.Errorf("%d held results: %d %s, want 200", len(held.Results), a.status, a.body)
	}
	held.Results = append(held.Results, pool.HeldResult{})
	if a := ts.do(t, bob, "POST", "/v1/results/held", held); a.status != http.StatusBadRequest ||
		!strings.Contains(string(a.body), "1025 results or more, the limit is 1024") {
		t.Errorf("%d held results: %d %s, want 400 naming the limit", len(held.Results), a.status, a.body)
	}
	chunks := `{"add":[` + strings.Repeat(`"`+strings.Repeat("ab", 32)+`",`, MaxChunksPerRequest) + `"` + strings.Repeat("cd", 32) + `"]}`
	if a := ts.do(t, bob, "POST", "/v1/chunks/announce", []byte(chunks)); a.status != http.StatusBadRequest || !strings.Contains(string(a.body), "at most "+strconv.Itoa(MaxChunksPerRequest)) {
		t.Errorf("an announcement of %d chunks: %d %s, want 400 naming its own limit", MaxChunksPerRequest+1, a.status, a.body)
	}
}

// Containers nested deeper than encoding/json decodes are not kept on
// checkJSONElements's stack: 12 MiB of "{" (a result submission may
// have 96) allocates next to nothing before the decoder refuses it, as
// it did before the check (95 MB of them allocated 586 MB).
func TestCheckJSONElementsDeep(t *testing.T) {
	body := bytes.Repeat([]byte("{"), 12<<20)
	n, err := allocatedBy(func() error { return checkJSONElements(body, maxJSONElements, "the body's") })
	if err != nil {
		t.Fatalf("checkJSONElements: %v, want it left to the decoder", err)
	}
	if n > 1<<20 {
		t.Errorf("scanning it allocated %d KB", n>>10)
	}
	if err := decodeStrict(body, &ResultSubmission{}); err == nil {
		t.Error("decodeStrict accepted 12 MiB of {")
	}
	deep := strings.Repeat(`{"a":`, 20_000) + "[1,2,3]" + strings.Repeat("}", 20_000)
	if err := checkJSONElements([]byte(deep), 2, "its"); err != nil {
		t.Errorf("an array below maxJSONDepth: %v, want it left to the decoder", err)
	}
}

// A JSON POST /v1/work counts the arrays within each of its results
// before decoding it: one result whose reference names 2 million empty
// chunks (6.5 MB, within the body's limit) allocated 423 MB before the
// manifest was refused; now it is refused naming the result, having
// allocated about the body's size a few times over.
func TestDecodeWorkItemBounded(t *testing.T) {
	body := []byte(`{"results":[{"lease":"` + strings.Repeat("a", 32) + `","digest":"` + strings.Repeat("0", 64) +
		`","ref":{"size":1,"chunk_size":1,"chunks":[` + strings.Repeat(`{},`, (maxWorkBody-300)/3) + `{}]}}]}`)
	if len(body) > maxWorkBody {
		t.Fatalf("body of %d bytes, over the limit of %d", len(body), maxWorkBody)
	}
	n, err := allocatedBy(func() error { _, _, err := decodeWork(body, false); return err })
	want := "results[0]: its arrays hold more than " + strconv.Itoa(maxWorkItemElements) + " elements in all"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("decodeWork: %v, want an error saying %q", err, want)
	}
	if n > 64<<20 {
		t.Errorf("refusing it allocated %d MB", n>>20)
	}
}
