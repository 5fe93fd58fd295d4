package main

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
)

// launchMain is a Pod process's first step. The agent starts it as
// `ip netns exec NETNS node-agent launch --bind SRC=DST... -- PROGRAM ARGS...`: `ip netns exec`
// has already entered the Pod's network namespace and a private mount namespace (mounts there
// do not propagate back), so here the Pod's volumes are bind-mounted at their mountPaths and
// the process image is replaced by the container's program, keeping the pid the agent waits on.
// --outside-mntns names the agent's own mount namespace (/proc/self/ns/mnt), which launch
// refuses to mount in.
func launchMain(args []string) int {
	var binds [][2]string
	outside := ""
	i := 0
	for ; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			i++
			break
		}
		if a == "--outside-mntns" && i+1 < len(args) {
			i++
			outside = args[i]
			continue
		}
		if a == "--bind" && i+1 < len(args) {
			i++
			src, dst, ok := strings.Cut(args[i], "=")
			if !ok || src == "" || dst == "" {
				fmt.Fprintf(os.Stderr, "launch: bad --bind %q (want SRC=DST)\n", args[i])
				return 2
			}
			binds = append(binds, [2]string{src, dst})
			continue
		}
		fmt.Fprintf(os.Stderr, "launch: unexpected argument %q\n", a)
		return 2
	}
	if i >= len(args) {
		fmt.Fprintln(os.Stderr, "launch: no program after --")
		return 2
	}
	prog := args[i:]
	if len(binds) > 0 {
		// Never mount into the agent's own mount namespace (--outside-mntns): only in the
		// private one `ip netns exec` made.
		self, err := os.Readlink("/proc/self/ns/mnt")
		if err != nil || outside == "" || self == outside {
			fmt.Fprintln(os.Stderr, "launch: not in a private mount namespace; refusing to bind-mount")
			return 1
		}
	}
	for _, b := range binds {
		if err := syscall.Mount(b[0], b[1], "", syscall.MS_BIND|syscall.MS_REC, ""); err != nil {
			fmt.Fprintf(os.Stderr, "launch: bind %s at %s: %v\n", b[0], b[1], err)
			return 1
		}
	}
	path, err := exec.LookPath(prog[0])
	if err != nil {
		fmt.Fprintf(os.Stderr, "launch: %v\n", err)
		return 127
	}
	err = syscall.Exec(path, prog, os.Environ())
	fmt.Fprintf(os.Stderr, "launch: exec %s: %v\n", path, err)
	return 126
}
