package coord

import (
	"fmt"
	"net"
	"net/http"
	"path/filepath"

	"github.com/prometheus/client_golang/prometheus"

	"idlepool/cluster"
	"idlepool/identity"
)

// frontBodyLimits is the largest request body each route of the API
// takes, as routes and its handlers apply them; a route not named here
// takes maxJSONBody. A cluster node's public port refuses a larger body
// itself (413, before forwarding anything), bounded like the
// coordinator's by Config.MaxBodyMemory (uploads of files excepted: they
// go to disk).
var frontBodyLimits = map[string]int64{
	"POST /v1/peers":                 maxRegistrationBody,
	"PUT /v1/blobs/{digest}":         maxBlobBody,
	"POST /v1/leases/{lease}/result": maxResultBody,
	"POST /v1/work":                  maxWorkBody,
	"POST /v1/signals":               maxSignalBody,
}

// frontLimitRoutes finds a request's entry of frontBodyLimits.
var frontLimitRoutes = func() *http.ServeMux {
	m := http.NewServeMux()
	for pattern := range frontBodyLimits {
		m.Handle(pattern, http.NotFoundHandler())
	}
	return m
}()

// frontBodyLimit returns the largest body r's route takes under cfg.
func frontBodyLimit(cfg *Config, r *http.Request) int64 {
	_, pattern := frontLimitRoutes.Handler(r)
	limit, ok := frontBodyLimits[pattern]
	if !ok {
		limit = maxJSONBody
	}
	if pattern == "PUT /v1/blobs/{digest}" {
		return limit
	}
	return min(limit, cfg.MaxBodyMemory)
}

// frontLimits applies to a cluster node's public port what a
// coordinator applies to its own (docs/api.md, "Limits"): the pace of
// bodies and answers (limitBodies) and each route's body size, a body
// announced larger answered 413 "too_large" at once, one sent without
// a length cut off at the limit. cfg is validated. The connection limit
// is the listener's (newConnLimiter).
func frontLimits(cfg *Config, h http.Handler) http.Handler {
	sized := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		limit := frontBodyLimit(cfg, r)
		if r.ContentLength > limit {
			w.Header().Set("Connection", "close") // the body is not read
			writeJSON(w, http.StatusRequestEntityTooLarge, ErrorBody{Code: "too_large",
				Error: fmt.Sprintf("request body larger than the limit of %d bytes for %s", limit, r.URL.Path)})
			return
		}
		if r.ContentLength < 0 && r.Body != nil {
			r.Body = http.MaxBytesReader(w, r.Body, limit)
		}
		h.ServeHTTP(w, r)
	})
	return limitBodies(cfg, sized)
}

// limitFront bounds a cluster node's public listener ln by cfg's
// connection limit and registers its counts in reg under the
// idlepool_cluster_ prefix (a coordinator's own are idlepool_coord_, and
// a node in charge shows both). cfg is validated.
func limitFront(ln net.Listener, cfg *Config, reg *prometheus.Registry) *connLimiter {
	cl := newConnLimiter(ln, cfg.MaxConns, cfg.Logger)
	reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "idlepool_cluster_connections", Help: "Open client connections to this node's public port.",
		}, func() float64 { return float64(cl.count()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "idlepool_cluster_connections_shed_total",
			Help: "Idle or slow connections to this node's public port closed to make room at the connection limit.",
		}, func() float64 { return float64(cl.shed.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "idlepool_cluster_connections_refused_total",
			Help: "New connections to this node's public port answered 503 at the connection limit because every connection was busy.",
		}, func() float64 { return float64(cl.refused.Load()) }),
	)
	return cl
}

// loadPoolKey reads a cluster node's pool key from its data directory
// (cluster.PoolKeyFile). A node never makes one: a missing or damaged
// key file is an error wrapping cluster.ErrPoolKey.
func loadPoolKey(dataDir string) (*identity.Key, error) {
	path := filepath.Join(dataDir, cluster.PoolKeyFile)
	k, err := identity.Load(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", cluster.ErrPoolKey, path, err)
	}
	return k, nil
}
