package main

import (
	"bytes"
	"io"
	"os"
	"strings"
	"testing"
	"time"
)

type closeBuffer struct {
	bytes.Buffer
	closed bool
}

func (b *closeBuffer) Close() error { b.closed = true; return nil }

func TestStampLines(t *testing.T) {
	before := time.Now().UTC()
	var out closeBuffer
	stampLines(io.NopCloser(strings.NewReader("one\ntwo\nno newline")), &out)
	if !out.closed {
		t.Error("the log was not closed at the end")
	}
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(lines) != 3 {
		t.Fatalf("lines %q", lines)
	}
	for i, want := range []string{"one", "two", "no newline"} {
		stamp, rest, ok := strings.Cut(lines[i], " ")
		ts, err := time.Parse(time.RFC3339Nano, stamp)
		if !ok || err != nil || rest != want || ts.Before(before.Add(-time.Second)) {
			t.Errorf("line %d = %q (%v)", i, lines[i], err)
		}
	}
}

func TestSelectLogs(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 5, 0, 0, 0, time.UTC)
	stamped := []byte(
		t0.Format(time.RFC3339Nano) + " first\n" +
			t0.Add(1500*time.Millisecond).Format(time.RFC3339Nano) + " Echoing back request made to /mirror to client\n" +
			t0.Add(3*time.Second).Format(time.RFC3339Nano) + " third\n")
	opts := func(q map[string][]string) logOptions {
		t.Helper()
		o, err := parseLogOptions(q, t0.Add(4*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		return o
	}
	for _, c := range []struct {
		name string
		q    map[string][]string
		want string
	}{
		{"all", nil, "first\nEchoing back request made to /mirror to client\nthird\n"},
		// sinceTime has whole seconds (RFC 3339 as client-go sends it): 05:00:01 keeps 1.5 s on.
		{"sinceTime", map[string][]string{"sinceTime": {t0.Add(time.Second).Format(time.RFC3339)}}, "Echoing back request made to /mirror to client\nthird\n"},
		{"sinceSeconds", map[string][]string{"sinceSeconds": {"2"}}, "third\n"},
		{"tailLines", map[string][]string{"tailLines": {"1"}}, "third\n"},
		{"tailLines 0", map[string][]string{"tailLines": {"0"}}, ""},
		{"limitBytes", map[string][]string{"limitBytes": {"3"}}, "fir"},
		{"timestamps", map[string][]string{"timestamps": {"true"}, "tailLines": {"1"}}, t0.Add(3*time.Second).Format(time.RFC3339Nano) + " third\n"},
	} {
		if got := string(selectLogs(stamped, opts(c.q))); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
	for _, bad := range []map[string][]string{
		{"sinceTime": {"yesterday"}},
		{"sinceSeconds": {"-1"}},
		{"tailLines": {"x"}},
		{"limitBytes": {"0"}},
		{"timestamps": {"maybe"}},
		{"previous": {"true"}},
	} {
		if _, err := parseLogOptions(bad, t0); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
}

// The copy keeps what a process printed after the agent's pipe reader saw it, whatever the
// process does with its descriptors: a real pipe and a file.
func TestStampLinesThroughAPipe(t *testing.T) {
	dir := t.TempDir()
	f, err := os.Create(dir + "/c.log")
	if err != nil {
		t.Fatal(err)
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { stampLines(pr, f); close(done) }()
	_, _ = pw.WriteString("hello\n")
	_ = pw.Close()
	<-done
	b, _ := os.ReadFile(dir + "/c.log")
	if got := string(selectLogs(b, logOptions{tailLines: -1})); got != "hello\n" {
		t.Errorf("log %q", got)
	}
}
