// Command node-agent is pier's stand-in for a kubelet, for the Gateway API conformance harness
// (scripts/conformance.sh). It registers one Node, schedules unscheduled Pods onto it, runs the
// upstream echo server (echo-basic) for Pods that use the echo image, each in its own network
// namespace joined to a bridge, reports them Running and Ready, and stops them when they are
// deleted. Pods whose image it cannot run are reported Ready without a process, as KWOK does.
//
//	node-agent --kubeconfig FILE --echo-basic PATH [flags]
//	node-agent launch [--bind SRC=DST]... -- PROGRAM [ARGS...]   (internal: a Pod's process)
//
// It needs root, iproute2 (`ip`), and is meant to run inside a network namespace of its own.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "launch" {
		os.Exit(launchMain(os.Args[2:]))
	}
	cfg := DefaultConfig()
	var echoImages string
	flag.StringVar(&cfg.Kubeconfig, "kubeconfig", "", "kubeconfig of the API server (required)")
	flag.StringVar(&cfg.NodeName, "node-name", cfg.NodeName, "name of the Node to register")
	flag.StringVar(&cfg.PodCIDR, "pod-cidr", cfg.PodCIDR, "Pod addresses; the first address is the bridge's (the Pods' gateway)")
	flag.StringVar(&cfg.NodeIP, "node-ip", "", "the Node's InternalIP (default: the bridge address)")
	flag.StringVar(&cfg.Bridge, "bridge", cfg.Bridge, "bridge that Pod veths join (created if missing)")
	flag.StringVar(&cfg.NetnsPrefix, "netns-prefix", cfg.NetnsPrefix, "prefix of the Pods' network namespace names")
	flag.StringVar(&cfg.EchoBasic, "echo-basic", "", "path of the upstream echo-basic binary (required)")
	flag.StringVar(&echoImages, "echo-images", strings.Join(cfg.EchoImages, ","), "comma-separated image names (without tag) run with echo-basic")
	flag.StringVar(&cfg.StateDir, "state-dir", cfg.StateDir, "where Pod volumes and logs go")
	flag.IntVar(&cfg.KubeletPort, "kubelet-port", cfg.KubeletPort, "port of the container log endpoint (the kubelet's), on the node IP")
	flag.StringVar(&cfg.KubeletCert, "kubelet-cert", "", "serving certificate of the container log endpoint (PEM); none: logs are not served")
	flag.StringVar(&cfg.KubeletKey, "kubelet-key", "", "its private key (PEM)")
	flag.StringVar(&cfg.KubeletClientCA, "kubelet-client-ca", "", "CA that the API server's client certificate must chain to (PEM)")
	flag.Parse()
	cfg.EchoImages = splitList(echoImages)
	if cfg.Kubeconfig == "" || cfg.EchoBasic == "" {
		fmt.Fprintln(os.Stderr, "node-agent: --kubeconfig and --echo-basic are required")
		flag.Usage()
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	a, err := New(cfg)
	if err != nil {
		fmt.Fprintf(os.Stderr, "node-agent: %v\n", err)
		os.Exit(1)
	}
	if err := a.Run(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "node-agent: %v\n", err)
		os.Exit(1)
	}
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
