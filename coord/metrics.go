package coord

import (
	"maps"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"idlepool/pool"
)

// metrics are the coordinator's Prometheus metrics, registered in a
// registry of their own (no global state), served at /metrics. Names:
//
//	idlepool_coord_leases_granted_total                       leases handed out
//	idlepool_coord_leases_expired_total                       heartbeats, results or releases that found their lease expired (410)
//	idlepool_coord_submissions_total{result}                  result submissions: "taken" or "refused"
//	idlepool_coord_tasks{outcome}                             tasks with a final outcome, over the jobs the pool holds: "ok", "failed" (including unverified)
//	idlepool_coord_jobs                                       jobs the pool holds
//	idlepool_coord_ledger_entries_total{kind}                 ledger entries: "receipt", "deviation", "unverified" (one per replica)
//	idlepool_coord_store_commits_total                        group commits since the coordinator started (commitCollector)
//	idlepool_coord_store_commit_seconds_total                 their time in the store, failed tries and backoff included
//	idlepool_coord_store_committed_records_total{kind}        what they held: "replica", "outcome", "entry"
//	idlepool_coord_peers_registered_total                     successful registrations
//	idlepool_coord_offers_live                                capacity offers not yet expired (gauge)
//	idlepool_coord_http_requests_total{route,code}            requests by route pattern and status code
//	idlepool_coord_http_request_duration_seconds{route}       request latency, until the handler returns
//	idlepool_coord_connections                                open client connections (gauge)
//	idlepool_coord_connections_shed_total                     idle or slow connections closed to make room at the limit
//	idlepool_coord_connections_refused_total                  new connections refused (503) at the limit, all being busy
//	idlepool_coord_body_memory_bytes                          request body bytes in memory (gauge)
//	idlepool_coord_body_spool_bytes                           unauthenticated body bytes in temporary files (gauge)
//	idlepool_coord_bytes_served_total{kind}                   bytes of files sent: "program" (whole or in chunks), "input" (whole files), "input_chunk", "result", "job" (canonical encodings)
//	idlepool_coord_tracker_chunks                             chunk holdings the tracker lists (gauge)
//	idlepool_coord_result_bytes_total{how}                    bytes of results submitted and taken: "inline" (the coordinator received them), "kept" (the devices kept them and sent a reference)
//
// plus the Go runtime and process collectors (go_*, process_*), which give
// the coordinator's CPU time for throughput figures.
type metrics struct {
	reg         *prometheus.Registry
	leases      prometheus.Counter
	expired     prometheus.Counter
	submissions *prometheus.CounterVec
	registered  prometheus.Counter
	requests    *prometheus.CounterVec
	latency     *prometheus.HistogramVec
	served      *prometheus.CounterVec
	resultBytes *prometheus.CounterVec
}

func newMetrics(jobs func() []pool.JobStatus, ledgerCounts func() map[string]uint64, commits func() pool.CommitCounts) *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		leases: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "idlepool_coord_leases_granted_total", Help: "Leases handed out to peers.",
		}),
		expired: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "idlepool_coord_leases_expired_total",
			Help: "Heartbeats, results and releases that found their lease expired (answered 410).",
		}),
		submissions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "idlepool_coord_submissions_total",
			Help: "Result submissions for leases, by whether the pool took them.",
		}, []string{"result"}),
		registered: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "idlepool_coord_peers_registered_total", Help: "Successful peer registrations.",
		}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "idlepool_coord_http_requests_total", Help: "HTTP requests by route pattern and status code.",
		}, []string{"route", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "idlepool_coord_http_request_duration_seconds",
			Help:    "Time from a request's arrival until its handler returned, by route pattern.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 10},
		}, []string{"route"}),
		served: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "idlepool_coord_bytes_served_total",
			Help: "Bytes of files the coordinator sent, by kind: program, input (whole files), input_chunk, result, job (canonical encodings).",
		}, []string{"kind"}),
		resultBytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "idlepool_coord_result_bytes_total",
			Help: "Bytes of the results submitted and taken, by how they came: inline (sent to the coordinator) or kept (kept by the device, which sent a reference).",
		}, []string{"how"}),
	}
	m.resultBytes.WithLabelValues("inline")
	m.resultBytes.WithLabelValues("kept")
	for _, k := range []string{servedProgram, servedInput, servedInputChunk, servedResult, servedJob} {
		m.served.WithLabelValues(k)
	}
	m.submissions.WithLabelValues("taken")
	m.submissions.WithLabelValues("refused")
	m.reg.MustRegister(m.leases, m.expired, m.submissions, m.registered, m.requests, m.latency, m.served, m.resultBytes,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		&jobCollector{jobs: jobs}, &ledgerCollector{counts: ledgerCounts}, &commitCollector{counts: commits})
	return m
}

// limits registers the gauges and counters of what clients hold: open
// connections, connections closed to make room or refused, and request
// body bytes in memory and in temporary files.
func (m *metrics) limits(conns *connLimiter, mem, spool *budget) {
	m.reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "idlepool_coord_connections", Help: "Open client connections.",
		}, func() float64 { return float64(conns.count()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "idlepool_coord_connections_shed_total",
			Help: "Idle or slow connections closed to make room for new ones at the connection limit.",
		}, func() float64 { return float64(conns.shed.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "idlepool_coord_connections_refused_total",
			Help: "New connections answered 503 at the connection limit because every connection was busy.",
		}, func() float64 { return float64(conns.refused.Load()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "idlepool_coord_body_memory_bytes", Help: "Request body bytes held in memory.",
		}, func() float64 { return float64(mem.used.Load()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "idlepool_coord_body_spool_bytes", Help: "Bytes of request bodies not yet authenticated held in temporary files.",
		}, func() float64 { return float64(spool.used.Load()) }),
	)
}

// handler serves the registry in the Prometheus text format.
func (m *metrics) handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}

// instrument counts and times each request of the route pattern.
func (m *metrics) instrument(route string, h http.Handler) http.Handler {
	obs := m.latency.WithLabelValues(route)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w, code: http.StatusOK}
		h.ServeHTTP(sw, r)
		obs.Observe(time.Since(start).Seconds())
		m.requests.WithLabelValues(route, strconv.Itoa(sw.code)).Inc()
	})
}

// statusWriter remembers the status code a handler wrote.
type statusWriter struct {
	http.ResponseWriter
	code  int
	wrote bool
}

func (w *statusWriter) WriteHeader(code int) {
	if !w.wrote {
		w.code, w.wrote = code, true
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	w.wrote = true
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// jobCollector reports task outcomes and job counts from the scheduler's
// job table at scrape time.
type jobCollector struct {
	jobs func() []pool.JobStatus
}

var (
	tasksDesc = prometheus.NewDesc("idlepool_coord_tasks",
		"Tasks with a final outcome over the jobs the pool holds, by outcome (failed includes unverified).",
		[]string{"outcome"}, nil)
	jobsDesc = prometheus.NewDesc("idlepool_coord_jobs", "Jobs the pool holds.", nil, nil)
)

func (c *jobCollector) Describe(ch chan<- *prometheus.Desc) { ch <- tasksDesc; ch <- jobsDesc }

func (c *jobCollector) Collect(ch chan<- prometheus.Metric) {
	var ok, failed int64
	jobs := c.jobs()
	for _, j := range jobs {
		ok += j.Accepted
		failed += j.Failed
	}
	ch <- prometheus.MustNewConstMetric(tasksDesc, prometheus.GaugeValue, float64(ok), pool.OutcomeOK)
	ch <- prometheus.MustNewConstMetric(tasksDesc, prometheus.GaugeValue, float64(failed), pool.OutcomeFailed)
	ch <- prometheus.MustNewConstMetric(jobsDesc, prometheus.GaugeValue, float64(len(jobs)))
}

// ledgerCollector reports the ledger's entries by kind, as the Scheduler
// counts them when they commit (pool.Scheduler.LedgerCounts): a scrape
// reads no ledger entry, whatever the traffic since the last one.
type ledgerCollector struct {
	counts func() map[string]uint64
}

var ledgerDesc = prometheus.NewDesc("idlepool_coord_ledger_entries_total",
	"Ledger entries by kind: receipts, deviations and unverified replicas, and revocations and anchors once there are any.", []string{"kind"}, nil)

func (c *ledgerCollector) Describe(ch chan<- *prometheus.Desc) { ch <- ledgerDesc }

func (c *ledgerCollector) Collect(ch chan<- prometheus.Metric) {
	counts := c.counts()
	kinds := []string{pool.KindReceipt, pool.KindDeviation, pool.KindUnverified}
	for _, kind := range kinds {
		ch <- prometheus.MustNewConstMetric(ledgerDesc, prometheus.CounterValue, float64(counts[kind]), kind)
	}
	// The kinds a pool writes only in some cases (revocation, anchor),
	// once it has written one.
	for _, kind := range slices.Sorted(maps.Keys(counts)) {
		if !slices.Contains(kinds, kind) {
			ch <- prometheus.MustNewConstMetric(ledgerDesc, prometheus.CounterValue, float64(counts[kind]), kind)
		}
	}
}

// commitCollector reports the scheduler's group commits
// (pool.Scheduler.CommitCounts): how many, the time they took and what
// they held, counted as batches commit since the coordinator started.
// A commit's mean time is the rate of the seconds over the rate of the
// commits; the tasks decided per commit, the rate of the committed
// outcomes over that of the commits.
type commitCollector struct {
	counts func() pool.CommitCounts
}

var (
	commitsDesc = prometheus.NewDesc("idlepool_coord_store_commits_total",
		"Group commits: batches of the pool's changes the store committed.", nil, nil)
	commitSecondsDesc = prometheus.NewDesc("idlepool_coord_store_commit_seconds_total",
		"Seconds the committed batches took in the store, tries that found it unavailable included.", nil, nil)
	committedDesc = prometheus.NewDesc("idlepool_coord_store_committed_records_total",
		"Records the committed batches held, by kind: replica (a replica's changes in one batch count once), outcome (a task's final outcome), entry (a ledger entry).",
		[]string{"kind"}, nil)
)

func (c *commitCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- commitsDesc
	ch <- commitSecondsDesc
	ch <- committedDesc
}

func (c *commitCollector) Collect(ch chan<- prometheus.Metric) {
	n := c.counts()
	ch <- prometheus.MustNewConstMetric(commitsDesc, prometheus.CounterValue, float64(n.Commits))
	ch <- prometheus.MustNewConstMetric(commitSecondsDesc, prometheus.CounterValue, n.Time.Seconds())
	ch <- prometheus.MustNewConstMetric(committedDesc, prometheus.CounterValue, float64(n.Replicas), "replica")
	ch <- prometheus.MustNewConstMetric(committedDesc, prometheus.CounterValue, float64(n.Outcomes), "outcome")
	ch <- prometheus.MustNewConstMetric(committedDesc, prometheus.CounterValue, float64(n.Entries), "entry")
}

// took counts a submission the pool took, and its result's bytes by how
// they came.
func (m *metrics) took(sub pool.Submission) {
	m.submissions.WithLabelValues("taken").Inc()
	if sub.Ref != nil {
		m.resultBytes.WithLabelValues("kept").Add(float64(sub.Ref.Size))
	} else {
		m.resultBytes.WithLabelValues("inline").Add(float64(len(sub.Result)))
	}
}
