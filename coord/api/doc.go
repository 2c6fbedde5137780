// Package api is the wire format of the coordinator's HTTP API
// (docs/api.md): the JSON bodies of its requests and answers, its version,
// headers, error codes and limits, and request signing (SignRequest). The
// coordinator (package coord) serves it; its clients, the donor agent and
// `idlepool submit`, speak it.
//
// It is apart from package coord so that a client links only the API, not
// the server and what the server links (SQLite's coordinator state, the
// cluster's NATS server, the metrics): the tray app, which runs all day on
// a donor's machine, imports the agent, and the agent imports this
// package, never coord (deps_test.go checks it).
//
// Binary values are standard base64 ([]byte), digests and job IDs 64
// lowercase hex digits (HexDigest), times RFC 3339.
//
//	req, _ := http.NewRequest("POST", poolURL+"/v1/work", bytes.NewReader(body))
//	req.Header.Set(api.APIHeader, strconv.Itoa(api.APIVersion))
//	api.SignRequest(req, body, deviceKey, time.Now())
//
// The package holds types, constants and pure functions; nothing in it
// keeps state, and everything is safe for concurrent use.
package api
