package main

// Container logs the way a kubelet serves them: the API server's `pods/log` subresource calls
// https://NODE:PORT/containerLogs/NAMESPACE/POD/CONTAINER on the node the Pod is bound to
// (NODE from the Node's addresses, PORT from status.daemonEndpoints.kubeletEndpoint), so
// `kubectl logs` and client-go's GetLogs (the conformance suite's mirror tests read the mirror
// backends' logs this way) reach what the agent's Pods printed.
//
// Each line is stored with the time it was read, as `RFC3339Nano LINE`, so `sinceTime` and
// `sinceSeconds` select lines the way the kubelet's CRI logs do, and `timestamps=true` returns
// them with it. `tailLines` and `limitBytes` are honoured; `follow` returns what there is and
// ends (the harness never follows); `previous` is refused: a restarted container's lines stay
// in its one log.

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// stampLines copies r to w line by line, each line prefixed with the time it was read, until r
// ends; then it closes w.
func stampLines(r io.ReadCloser, w io.WriteCloser) {
	defer r.Close()
	defer w.Close()
	br := bufio.NewReaderSize(r, 64<<10)
	for {
		line, err := br.ReadBytes('\n')
		if len(line) > 0 {
			if line[len(line)-1] != '\n' {
				line = append(line, '\n')
			}
			stamp := time.Now().UTC().Format(time.RFC3339Nano)
			if _, werr := w.Write(append([]byte(stamp+" "), line...)); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// logOptions are the query parameters of containerLogs that the agent honours.
type logOptions struct {
	since      time.Time // zero: from the start
	timestamps bool
	tailLines  int // < 0: all
	limitBytes int // <= 0: no limit
}

func parseLogOptions(q map[string][]string, now time.Time) (logOptions, error) {
	get := func(k string) string {
		if v := q[k]; len(v) > 0 {
			return v[0]
		}
		return ""
	}
	o := logOptions{tailLines: -1}
	if v := get("sinceTime"); v != "" {
		t, err := time.Parse(time.RFC3339, v)
		if err != nil {
			return o, fmt.Errorf("sinceTime %q: %w", v, err)
		}
		o.since = t
	}
	if v := get("sinceSeconds"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			return o, fmt.Errorf("sinceSeconds %q: must be a positive integer", v)
		}
		o.since = now.Add(-time.Duration(n) * time.Second)
	}
	if v := get("timestamps"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return o, fmt.Errorf("timestamps %q: %w", v, err)
		}
		o.timestamps = b
	}
	if v := get("tailLines"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return o, fmt.Errorf("tailLines %q: must be a non-negative integer", v)
		}
		o.tailLines = n
	}
	if v := get("limitBytes"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			return o, fmt.Errorf("limitBytes %q: must be a positive integer", v)
		}
		o.limitBytes = n
	}
	if v := get("previous"); v == "true" || v == "1" {
		return o, errNoPrevious
	}
	return o, nil
}

var errNoPrevious = errors.New("previous terminated container not found (the agent keeps one log per container, restarts included)")

// selectLogs is the part of a stamped log that o asks for.
func selectLogs(stamped []byte, o logOptions) []byte {
	var lines [][]byte
	for _, line := range bytes.SplitAfter(stamped, []byte("\n")) {
		if len(line) == 0 {
			continue
		}
		stamp, rest, ok := bytes.Cut(line, []byte(" "))
		if !ok {
			continue
		}
		if !o.since.IsZero() {
			t, err := time.Parse(time.RFC3339Nano, string(stamp))
			if err != nil || t.Before(o.since) {
				continue
			}
		}
		if o.timestamps {
			lines = append(lines, line)
		} else {
			lines = append(lines, rest)
		}
	}
	if o.tailLines >= 0 && len(lines) > o.tailLines {
		lines = lines[len(lines)-o.tailLines:]
	}
	out := bytes.Join(lines, nil)
	if o.limitBytes > 0 && len(out) > o.limitBytes {
		out = out[:o.limitBytes]
	}
	return out
}

// logPath is the stamped log of a container of a Pod the agent runs.
func (a *Agent) logPath(ns, pod, container string) (string, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	run := a.runs[ns+"/"+pod]
	if run == nil {
		return "", false
	}
	if _, ok := run.procs[container]; !ok {
		return "", false
	}
	return filepath.Join(run.dir, container+".log"), true
}

func (a *Agent) containerLogs(w http.ResponseWriter, r *http.Request) {
	ns, pod, container := r.PathValue("ns"), r.PathValue("pod"), r.PathValue("container")
	o, err := parseLogOptions(r.URL.Query(), time.Now())
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	path, ok := a.logPath(ns, pod, container)
	if !ok {
		http.Error(w, fmt.Sprintf("container %q of pod %s/%s is not running on this node", container, ns, pod), http.StatusNotFound)
		return
	}
	b, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/plain")
	_, _ = w.Write(selectLogs(b, o))
}

// logServer listens for the API server on the node's address (TLS, clients verified against
// KubeletClientCA). Nil when no certificate is configured: then the Node publishes no port and
// `pods/log` fails, as for a kubelet that is unreachable.
func (a *Agent) logServer() (*http.Server, net.Listener, error) {
	if a.cfg.KubeletCert == "" {
		return nil, nil, nil
	}
	cert, err := tls.LoadX509KeyPair(a.cfg.KubeletCert, a.cfg.KubeletKey)
	if err != nil {
		return nil, nil, fmt.Errorf("kubelet serving certificate: %w", err)
	}
	tc := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if a.cfg.KubeletClientCA != "" {
		pem, err := os.ReadFile(a.cfg.KubeletClientCA)
		if err != nil {
			return nil, nil, err
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, nil, fmt.Errorf("no certificate in %s", a.cfg.KubeletClientCA)
		}
		tc.ClientCAs, tc.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	addr := net.JoinHostPort(a.nodeIP, strconv.Itoa(a.cfg.KubeletPort))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, nil, fmt.Errorf("kubelet endpoint %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /containerLogs/{ns}/{pod}/{container}", a.containerLogs)
	srv := &http.Server{Handler: mux, TLSConfig: tc, ReadHeaderTimeout: 10 * time.Second}
	return srv, ln, nil
}

// runLogServer serves until ctx is done.
func runLogServer(ctx context.Context, srv *http.Server, ln net.Listener) {
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	log.Printf("serving container logs on https://%s", ln.Addr())
	if err := srv.ServeTLS(ln, "", ""); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Printf("container log server: %v", err)
	}
}
