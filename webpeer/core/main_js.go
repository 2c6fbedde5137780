//go:build js && wasm

package main

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"strconv"
	"syscall/js"
	"time"

	"github.com/fxamacker/cbor/v2"

	"idlepool/identity"
	"idlepool/job"
	"idlepool/offers"
	"idlepool/pool"
	"idlepool/worker"
)

func main() {
	core := js.Global().Get("Object").New()
	for name, f := range map[string]func(args []js.Value) (any, error){
		"task":           task,
		"jobFiles":       jobFiles,
		"prepare":        prepare,
		"outcome":        outcome,
		"newRand":        newRand,
		"offerCanonical": offerCanonical,
		"endorsement":    endorsement,
		"peerID":         peerID,
		"edGenerate":     edGenerate,
		"edPublic":       edPublic,
		"edSign":         edSign,
		"edVerify":       edVerify,
	} {
		core.Set(name, js.FuncOf(func(_ js.Value, args []js.Value) any {
			v, err := f(args)
			if err != nil {
				return map[string]any{"error": err.Error()}
			}
			return v
		}))
	}
	core.Set("meterRule", worker.MeterRule)
	core.Set("meterExport", worker.MeterExport)
	js.Global().Set("idlepoolCore", core)
	if ready := js.Global().Get("idlepoolCoreReady"); ready.Type() == js.TypeFunction {
		ready.Invoke()
	}
	select {} // serve calls until the page or worker goes away
}

// bytesOf copies a Uint8Array argument.
func bytesOf(v js.Value, name string) ([]byte, error) {
	if v.Type() != js.TypeObject || v.Get("byteLength").Type() != js.TypeNumber {
		return nil, fmt.Errorf("%s: want a Uint8Array", name)
	}
	b := make([]byte, v.Get("byteLength").Int())
	js.CopyBytesToGo(b, v)
	return b, nil
}

// jsBytes copies b into a new Uint8Array.
func jsBytes(b []byte) js.Value {
	a := js.Global().Get("Uint8Array").New(len(b))
	js.CopyBytesToJS(a, b)
	return a
}

func need(args []js.Value, n int) error {
	if len(args) < n {
		return fmt.Errorf("want %d arguments, got %d", n, len(args))
	}
	return nil
}

// blobDir is where the page's in-memory file system (join.js) serves
// the files it fetched, by digest.
const blobDir = "/blobs/"

// jobFiles(canonical Uint8Array) returns the hex digests of the files
// the job names, program first: the page fetches them before task.
func jobFiles(args []js.Value) (any, error) {
	if err := need(args, 1); err != nil {
		return nil, err
	}
	canonical, err := bytesOf(args[0], "canonical")
	if err != nil {
		return nil, err
	}
	var doc struct {
		Program string            `cbor:"program"`
		Inputs  map[string]string `cbor:"inputs"`
	}
	if err := cbor.Unmarshal(canonical, &doc); err != nil {
		return nil, fmt.Errorf("not a canonical job encoding: %w", err)
	}
	out := []any{doc.Program}
	for _, d := range doc.Inputs {
		out = append(out, d)
	}
	for _, d := range out {
		if _, err := job.ParseDigest(d.(string)); err != nil {
			return nil, fmt.Errorf("the job names a file %q: %w", d, err)
		}
	}
	return out, nil
}

// task(canonical Uint8Array, index number) plans task index of the job
// whose canonical encoding is given: {job, name, tasks, program (hex
// digest), stdin (Uint8Array), seed (hex), memoryMiB, timeoutMs,
// maxStdoutBytes, inputs (the other files of the job, by hex digest),
// files (the files the task sees in /input: name -> hex digest), chunk
// (true when the task reads a chunk of a split input, which the page
// does not serve)}.
func task(args []js.Value) (any, error) {
	if err := need(args, 2); err != nil {
		return nil, err
	}
	canonical, err := bytesOf(args[0], "canonical")
	if err != nil {
		return nil, err
	}
	// The files are the page's, fetched by digest and checked, and
	// served to this program from memory under blobDir (join.js).
	j, err := job.FromCanonicalStored(canonical, func(d job.Digest) string { return blobDir + d.String() })
	if err != nil {
		return nil, err
	}
	index := int64(args[1].Int())
	if index < 0 || index >= j.NumTasks() {
		return nil, fmt.Errorf("task %d is not in job %s of %d tasks", index, j.ID, j.NumTasks())
	}
	t := j.Task(index)
	req := pool.TaskRequest(j, t, "", "")
	inputs := []any{}
	files := map[string]any{}
	for name, ref := range j.Inputs {
		inputs = append(inputs, ref.SHA256.String())
		if j.Manifest.Split.Rule == "chunks" && name == j.Manifest.Split.Input {
			continue // the task reads its chunk, not the whole file
		}
		files[name] = ref.SHA256.String()
	}
	timeout := req.Timeout
	if timeout == 0 {
		timeout = worker.DefaultTimeout
	}
	return map[string]any{
		"job": j.ID.String(), "name": j.Manifest.Name, "tasks": j.NumTasks(), "index": index,
		"program": j.Program.SHA256.String(), "stdin": jsBytes(req.Stdin), "seed": hex.EncodeToString(req.Seed[:]),
		"memoryMiB": cmpOr(req.MemoryLimitMiB, worker.DefaultMemoryLimitMiB), "timeoutMs": timeout.Milliseconds(),
		"maxStdoutBytes": cmpOr(req.MaxStdoutBytes, worker.DefaultMaxStdoutBytes), "inputs": inputs,
		"files": files, "chunk": t.Chunk != nil, "cost": j.Cost(t),
	}, nil
}

func cmpOr(v, def int) int {
	if v == 0 {
		return def
	}
	return v
}

// prepare(module Uint8Array, memoryMiB number) returns the module as a
// worker runs it, {module: Uint8Array}, metered (worker.MeterModule) and
// with its memory capped at memoryMiB; or {failure: {kind, message}}
// when a worker would refuse it (bad-module, out-of-memory), which is
// the task's outcome.
func prepare(args []js.Value) (any, error) {
	if err := need(args, 2); err != nil {
		return nil, err
	}
	bin, err := bytesOf(args[0], "module")
	if err != nil {
		return nil, err
	}
	fail := func(k worker.FailureKind, msg string) any {
		return map[string]any{"failure": map[string]any{"kind": string(k), "message": msg}}
	}
	if len(bin) > worker.MaxModuleBytes {
		return fail(worker.FailureBadModule, fmt.Sprintf("module file is larger than %d bytes", worker.MaxModuleBytes)), nil
	}
	metered, err := worker.MeterModule(bin)
	if err != nil {
		return fail(worker.FailureBadModule, err.Error()), nil
	}
	capped, err := capMemory(metered, uint32(args[1].Int())*16)
	if _, ok := err.(*overLimitError); ok {
		return fail(worker.FailureOutOfMemory, "module memory "+err.Error()), nil
	} else if err != nil {
		return fail(worker.FailureBadModule, "compile: "+err.Error()), nil
	}
	return map[string]any{"module": jsBytes(capped)}, nil
}

// outcome(end) turns how a task ended into what the device submits, as
// pool.RunTask does for a native worker: end is web/wasi.js's result,
// {output, stderr, failure, work (decimal string)}, with the task's
// {memoryMiB, maxStdoutBytes, timeoutMs}; or, for a failure of the
// machine or one found before the module ran, {failure: {kind,
// message}} alone. The answer is {machine, ok, submission (the JSON
// body of POST /v1/leases/{lease}/result), reason}.
func outcome(args []js.Value) (any, error) {
	if err := need(args, 1); err != nil {
		return nil, err
	}
	e := args[0]
	req := worker.Request{MemoryLimitMiB: e.Get("memoryMiB").Int(), MaxStdoutBytes: e.Get("maxStdoutBytes").Int(),
		Timeout: time.Duration(e.Get("timeoutMs").Int()) * time.Millisecond}
	var res worker.Result
	if f := e.Get("failure"); f.Type() == js.TypeObject {
		res.Failure = &worker.Failure{Kind: worker.FailureKind(f.Get("kind").String()), Message: f.Get("message").String()}
	}
	for _, b := range []struct {
		name string
		to   *[]byte
	}{{"output", &res.Stdout}, {"stderr", &res.Stderr}} {
		if v := e.Get(b.name); v.Truthy() {
			p, err := bytesOf(v, b.name)
			if err != nil {
				return nil, err
			}
			*b.to = p
		}
	}
	if w := e.Get("work"); w.Type() == js.TypeString {
		n, err := strconv.ParseUint(w.String(), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("work: %w", err)
		}
		res.Work = n
	} else if res.Failure == nil {
		return nil, errors.New("work: want a decimal string")
	}
	if res.Failure == nil && res.Stdout == nil {
		res.Stdout = []byte{}
	}
	o, err := pool.RunTask(context.Background(), fixed(res), req, nil)
	if err != nil {
		return nil, err
	}
	sub := o.Submission()
	type work struct {
		Rule  int    `json:"rule"`
		Count uint64 `json:"count"`
	}
	body := struct {
		Digest  string `json:"digest"`
		Result  []byte `json:"result,omitempty"`
		Failed  bool   `json:"failed,omitempty"`
		Reason  string `json:"reason,omitempty"`
		Machine bool   `json:"machine,omitempty"`
		Work    *work  `json:"work,omitempty"`
	}{Digest: sub.Digest.String(), Result: sub.Result, Failed: sub.Failed, Reason: sub.Reason}
	if o.MachineDependent() {
		body.Machine = true
	} else {
		body.Work = &work{Rule: sub.Work.Rule, Count: sub.Work.Count}
	}
	b, err := json.Marshal(body)
	if err != nil {
		return nil, err
	}
	return map[string]any{"machine": o.MachineDependent(), "ok": o.Status == pool.StatusOK,
		"submission": string(b), "reason": sub.Reason, "digest": sub.Digest.String()}, nil
}

// fixed is a pool.Executor that gives one result.
type fixed worker.Result

func (f fixed) Run(context.Context, worker.Request) (worker.Result, error) {
	return worker.Result(f), nil
}

// newRand(seed hex) returns the task's random source as a worker seeds
// it (math/rand/v2's ChaCha8 read as a stream): {read(n) Uint8Array}.
func newRand(args []js.Value) (any, error) {
	if err := need(args, 1); err != nil {
		return nil, err
	}
	seed, err := hex.DecodeString(args[0].String())
	if err != nil || len(seed) != 32 {
		return nil, fmt.Errorf("seed: want 64 hex digits")
	}
	src := mrand.NewChaCha8([32]byte(seed))
	obj := js.Global().Get("Object").New()
	obj.Set("read", js.FuncOf(func(_ js.Value, a []js.Value) any {
		b := make([]byte, a[0].Int())
		_, _ = src.Read(b)
		return jsBytes(b)
	}))
	return obj, nil
}

// offerCanonical(offer JSON string) returns the bytes a peer signs for
// its capacity offer (offers.Offer.Canonical) as a Uint8Array.
func offerCanonical(args []js.Value) (any, error) {
	if err := need(args, 1); err != nil {
		return nil, err
	}
	var o offers.Offer
	if err := json.Unmarshal([]byte(args[0].String()), &o); err != nil {
		return nil, fmt.Errorf("offer: %w", err)
	}
	return jsBytes(o.Canonical()), nil
}

// endorsement(device key Uint8Array) returns the message an owner key
// signs to endorse a device (pool.EndorsementMessage).
func endorsement(args []js.Value) (any, error) {
	if err := need(args, 1); err != nil {
		return nil, err
	}
	k, err := bytesOf(args[0], "key")
	if err != nil {
		return nil, err
	}
	return jsBytes(pool.EndorsementMessage(k)), nil
}

// peerID(key Uint8Array) returns identity.IDOf the public key.
func peerID(args []js.Value) (any, error) {
	if err := need(args, 1); err != nil {
		return nil, err
	}
	k, err := bytesOf(args[0], "key")
	if err != nil {
		return nil, err
	}
	if len(k) != ed25519.PublicKeySize {
		return nil, fmt.Errorf("key: want %d bytes, got %d", ed25519.PublicKeySize, len(k))
	}
	return identity.IDOf(k), nil
}

// The Ed25519 fallback for browsers whose WebCrypto has no Ed25519: the
// key is its 32-byte seed, kept by the page in IndexedDB.

func edGenerate([]js.Value) (any, error) {
	seed := make([]byte, ed25519.SeedSize)
	if _, err := rand.Read(seed); err != nil {
		return nil, err
	}
	return jsBytes(seed), nil
}

func edKey(v js.Value) (ed25519.PrivateKey, error) {
	seed, err := bytesOf(v, "seed")
	if err != nil {
		return nil, err
	}
	if len(seed) != ed25519.SeedSize {
		return nil, fmt.Errorf("seed: want %d bytes", ed25519.SeedSize)
	}
	return ed25519.NewKeyFromSeed(seed), nil
}

func edPublic(args []js.Value) (any, error) {
	if err := need(args, 1); err != nil {
		return nil, err
	}
	k, err := edKey(args[0])
	if err != nil {
		return nil, err
	}
	return jsBytes(k.Public().(ed25519.PublicKey)), nil
}

func edSign(args []js.Value) (any, error) {
	if err := need(args, 2); err != nil {
		return nil, err
	}
	k, err := edKey(args[0])
	if err != nil {
		return nil, err
	}
	msg, err := bytesOf(args[1], "message")
	if err != nil {
		return nil, err
	}
	return jsBytes(ed25519.Sign(k, msg)), nil
}

// edVerify(public key, message, signature as base64) reports whether the
// signature verifies: the page checks its receipts' coordinator
// signatures with it.
func edVerify(args []js.Value) (any, error) {
	if err := need(args, 3); err != nil {
		return nil, err
	}
	pub, err := bytesOf(args[0], "key")
	if err != nil {
		return nil, err
	}
	msg, err := bytesOf(args[1], "message")
	if err != nil {
		return nil, err
	}
	sig, err := base64.StdEncoding.DecodeString(args[2].String())
	if err != nil {
		return nil, fmt.Errorf("signature: %w", err)
	}
	return identity.Verify(pub, msg, sig) == nil, nil
}
