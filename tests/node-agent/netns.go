package main

import (
	"bufio"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"sync"
)

// ipam hands out Pod addresses from a prefix. The first host address is the bridge's.
type ipam struct {
	mu     sync.Mutex
	prefix netip.Prefix
	used   map[netip.Addr]string // address -> owner (Pod UID)
}

func newIPAM(cidr string) (*ipam, error) {
	p, err := netip.ParsePrefix(cidr)
	if err != nil {
		return nil, fmt.Errorf("pod CIDR %q: %w", cidr, err)
	}
	if !p.Addr().Is4() || p.Bits() > 30 {
		return nil, fmt.Errorf("pod CIDR %q: want an IPv4 prefix of /30 or larger", cidr)
	}
	return &ipam{prefix: p.Masked(), used: map[netip.Addr]string{}}, nil
}

// gateway is the bridge's address: the prefix's first host address.
func (m *ipam) gateway() netip.Addr { return m.prefix.Addr().Next() }

// allocate returns owner's address, allocating the lowest free one if it has none.
func (m *ipam) allocate(owner string) (netip.Addr, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for a, o := range m.used {
		if o == owner {
			return a, nil
		}
	}
	for a := m.gateway().Next(); m.prefix.Contains(a); a = a.Next() {
		if !m.prefix.Contains(a.Next()) { // broadcast
			break
		}
		if _, taken := m.used[a]; !taken {
			m.used[a] = owner
			return a, nil
		}
	}
	return netip.Addr{}, fmt.Errorf("pod CIDR %s is full", m.prefix)
}

func (m *ipam) release(a netip.Addr) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.used, a)
}

// ipCmd runs `ip ARGS...`, returning its output in the error.
func ipCmd(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// ensureBridge creates the bridge if missing and gives it the gateway address.
func ensureBridge(name string, gw netip.Addr, bits int) error {
	if _, err := os.Stat("/sys/class/net/" + name); err != nil {
		if err := ipCmd("link", "add", name, "type", "bridge"); err != nil {
			return err
		}
	}
	if err := ipCmd("addr", "replace", fmt.Sprintf("%s/%d", gw, bits), "dev", name); err != nil {
		return err
	}
	return ipCmd("link", "set", name, "up")
}

// podNet is one Pod's network namespace and the host end of its veth pair.
type podNet struct {
	netns string
	veth  string
}

// setupPodNet creates netns with loopback up, and eth0 (addr/bits, default route via gw) joined
// by a veth pair to the bridge.
func setupPodNet(n podNet, bridge string, addr, gw netip.Addr, bits int) error {
	teardownPodNet(n) // leftovers of an earlier run
	steps := [][]string{
		{"netns", "add", n.netns},
		{"link", "add", n.veth, "type", "veth", "peer", "name", "eth0", "netns", n.netns},
		{"link", "set", n.veth, "master", bridge},
		{"link", "set", n.veth, "up"},
		{"-n", n.netns, "link", "set", "lo", "up"},
		{"-n", n.netns, "addr", "add", fmt.Sprintf("%s/%d", addr, bits), "dev", "eth0"},
		{"-n", n.netns, "link", "set", "eth0", "up"},
		{"-n", n.netns, "route", "add", "default", "via", gw.String()},
		// The address may have been an earlier Pod's: forget that Pod's MAC here (where pier
		// and the agent run), or traffic to the new Pod goes to the old veth until the
		// neighbour entry expires (up to a minute: TCPRoute conformance tests saw it).
		{"neigh", "flush", "to", addr.String(), "dev", bridge},
	}
	for _, s := range steps {
		if err := ipCmd(s...); err != nil {
			teardownPodNet(n)
			return err
		}
	}
	return nil
}

// teardownPodNet removes the namespace (which removes eth0 and so its veth peer) and the
// host end in case the namespace was already gone. Errors mean it was not there.
func teardownPodNet(n podNet) {
	_ = ipCmd("netns", "del", n.netns)
	if _, err := os.Stat("/sys/class/net/" + n.veth); err == nil {
		_ = ipCmd("link", "del", n.veth)
	}
}

// netnsListening reports whether a socket of pid listens (TCP) or is bound (UDP), provided pid
// is already inside the network namespace netns (its /proc/PID/net is then that namespace's).
func netnsListening(pid int, netns string) bool {
	var a, b os.FileInfo
	var err error
	if a, err = os.Stat(fmt.Sprintf("/proc/%d/ns/net", pid)); err != nil {
		return false
	}
	if b, err = os.Stat("/run/netns/" + netns); err != nil || !os.SameFile(a, b) {
		return false
	}
	for _, f := range []string{"tcp", "tcp6", "udp", "udp6"} {
		if socketTableHas(fmt.Sprintf("/proc/%d/net/%s", pid, f), strings.HasPrefix(f, "tcp")) {
			return true
		}
	}
	return false
}

// socketTableHas reads a /proc/net/{tcp,udp}[6] table: any TCP socket in state LISTEN (0A),
// or any UDP socket.
func socketTableHas(path string, tcp bool) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	s.Scan() // header
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) < 4 {
			continue
		}
		if !tcp || fields[3] == "0A" {
			return true
		}
	}
	return false
}
