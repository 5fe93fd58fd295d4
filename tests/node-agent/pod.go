package main

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// imageName is an image reference without its tag or digest.
func imageName(image string) string {
	if i := strings.Index(image, "@"); i >= 0 {
		image = image[:i]
	}
	// A ':' after the last '/' starts the tag (a ':' before it is a registry port).
	if i := strings.LastIndex(image, ":"); i > strings.LastIndex(image, "/") {
		image = image[:i]
	}
	return image
}

// runnable reports whether the container's image is one the agent runs with echo-basic.
// Containers that set a command are not: echo-basic would not do what they ask.
func runnable(c *corev1.Container, echoImages []string) bool {
	if len(c.Command) > 0 {
		return false
	}
	name := imageName(c.Image)
	for _, e := range echoImages {
		if name == e {
			return true
		}
	}
	return false
}

// fieldRef resolves a downward-API field of pod, as the kubelet does for env.
func fieldRef(pod *corev1.Pod, path string, podIP, hostIP string) (string, error) {
	switch path {
	case "metadata.name":
		return pod.Name, nil
	case "metadata.namespace":
		return pod.Namespace, nil
	case "metadata.uid":
		return string(pod.UID), nil
	case "spec.nodeName":
		return pod.Spec.NodeName, nil
	case "spec.serviceAccountName":
		return pod.Spec.ServiceAccountName, nil
	case "status.podIP", "status.podIPs":
		return podIP, nil
	case "status.hostIP", "status.hostIPs":
		return hostIP, nil
	}
	for prefix, m := range map[string]map[string]string{
		"metadata.labels":      pod.Labels,
		"metadata.annotations": pod.Annotations,
	} {
		if rest, ok := strings.CutPrefix(path, prefix+"['"); ok {
			if key, ok := strings.CutSuffix(rest, "']"); ok {
				return m[key], nil
			}
		}
	}
	return "", fmt.Errorf("unsupported fieldRef %q", path)
}

// expand substitutes $(VAR) references to earlier variables, as the kubelet does; $$ escapes.
func expand(s string, vars map[string]string) string {
	if !strings.Contains(s, "$") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '$' && i+1 < len(s) {
			if s[i+1] == '$' {
				b.WriteByte('$')
				i++
				continue
			}
			if s[i+1] == '(' {
				if end := strings.IndexByte(s[i+2:], ')'); end >= 0 {
					name := s[i+2 : i+2+end]
					if v, ok := vars[name]; ok {
						b.WriteString(v)
						i += end + 2
						continue
					}
				}
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// containerEnv is the environment of container c: the kubelet's HOSTNAME, then envFrom and env
// in order (later wins), with downward-API fields, Secret and ConfigMap keys resolved.
func containerEnv(ctx context.Context, cs kubernetes.Interface, pod *corev1.Pod, c *corev1.Container, podIP, hostIP string) ([]string, error) {
	vars := map[string]string{"HOSTNAME": pod.Name}
	order := []string{"HOSTNAME"}
	set := func(k, v string) {
		if _, ok := vars[k]; !ok {
			order = append(order, k)
		}
		vars[k] = v
	}
	for _, ef := range c.EnvFrom {
		var data map[string]string
		switch {
		case ef.SecretRef != nil:
			s, err := cs.CoreV1().Secrets(pod.Namespace).Get(ctx, ef.SecretRef.Name, metav1.GetOptions{})
			if err != nil {
				if ef.SecretRef.Optional != nil && *ef.SecretRef.Optional {
					continue
				}
				return nil, err
			}
			data = map[string]string{}
			for k, v := range s.Data {
				data[k] = string(v)
			}
		case ef.ConfigMapRef != nil:
			m, err := cs.CoreV1().ConfigMaps(pod.Namespace).Get(ctx, ef.ConfigMapRef.Name, metav1.GetOptions{})
			if err != nil {
				if ef.ConfigMapRef.Optional != nil && *ef.ConfigMapRef.Optional {
					continue
				}
				return nil, err
			}
			data = m.Data
		}
		keys := make([]string, 0, len(data))
		for k := range data {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			set(ef.Prefix+k, data[k])
		}
	}
	for _, e := range c.Env {
		v := expand(e.Value, vars)
		if vf := e.ValueFrom; vf != nil {
			var err error
			switch {
			case vf.FieldRef != nil:
				v, err = fieldRef(pod, vf.FieldRef.FieldPath, podIP, hostIP)
			case vf.SecretKeyRef != nil:
				var s *corev1.Secret
				if s, err = cs.CoreV1().Secrets(pod.Namespace).Get(ctx, vf.SecretKeyRef.Name, metav1.GetOptions{}); err == nil {
					v = string(s.Data[vf.SecretKeyRef.Key])
				} else if vf.SecretKeyRef.Optional != nil && *vf.SecretKeyRef.Optional {
					err = nil
				}
			case vf.ConfigMapKeyRef != nil:
				var m *corev1.ConfigMap
				if m, err = cs.CoreV1().ConfigMaps(pod.Namespace).Get(ctx, vf.ConfigMapKeyRef.Name, metav1.GetOptions{}); err == nil {
					v = m.Data[vf.ConfigMapKeyRef.Key]
				} else if vf.ConfigMapKeyRef.Optional != nil && *vf.ConfigMapKeyRef.Optional {
					err = nil
				}
			default:
				err = fmt.Errorf("env %s: unsupported valueFrom", e.Name)
			}
			if err != nil {
				return nil, fmt.Errorf("env %s: %w", e.Name, err)
			}
		}
		set(e.Name, v)
	}
	env := []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	for _, k := range order {
		env = append(env, k+"="+vars[k])
	}
	return env, nil
}

// writeVolumes materialises the Pod's Secret, ConfigMap and emptyDir volumes under dir, one
// directory per volume, and returns volume name -> directory. Other volume kinds are skipped
// (the projected service-account token, for one: echo-basic does not use it).
func writeVolumes(ctx context.Context, cs kubernetes.Interface, pod *corev1.Pod, dir string) (map[string]string, error) {
	out := map[string]string{}
	for _, v := range pod.Spec.Volumes {
		var data map[string][]byte
		var items []corev1.KeyToPath
		var mode *int32
		switch {
		case v.Secret != nil:
			s, err := cs.CoreV1().Secrets(pod.Namespace).Get(ctx, v.Secret.SecretName, metav1.GetOptions{})
			if err != nil {
				if v.Secret.Optional != nil && *v.Secret.Optional {
					break
				}
				return nil, fmt.Errorf("volume %s: secret %s: %w", v.Name, v.Secret.SecretName, err)
			}
			data, items, mode = s.Data, v.Secret.Items, v.Secret.DefaultMode
		case v.ConfigMap != nil:
			m, err := cs.CoreV1().ConfigMaps(pod.Namespace).Get(ctx, v.ConfigMap.Name, metav1.GetOptions{})
			if err != nil {
				if v.ConfigMap.Optional != nil && *v.ConfigMap.Optional {
					break
				}
				return nil, fmt.Errorf("volume %s: configmap %s: %w", v.Name, v.ConfigMap.Name, err)
			}
			data = map[string][]byte{}
			for k, s := range m.Data {
				data[k] = []byte(s)
			}
			for k, b := range m.BinaryData {
				data[k] = b
			}
			items, mode = v.ConfigMap.Items, v.ConfigMap.DefaultMode
		case v.EmptyDir != nil:
		default:
			continue
		}
		vdir := filepath.Join(dir, v.Name)
		if err := os.MkdirAll(vdir, 0o755); err != nil {
			return nil, err
		}
		out[v.Name] = vdir
		if len(items) == 0 {
			for k := range data {
				items = append(items, corev1.KeyToPath{Key: k, Path: k})
			}
		}
		for _, it := range items {
			b, ok := data[it.Key]
			if !ok {
				continue
			}
			perm := os.FileMode(0o644)
			if it.Mode != nil {
				perm = os.FileMode(*it.Mode)
			} else if mode != nil {
				perm = os.FileMode(*mode)
			}
			p := filepath.Join(vdir, filepath.Clean("/"+it.Path))
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				return nil, err
			}
			if err := os.WriteFile(p, b, perm); err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}

// proc is a running container process.
type proc struct {
	cmd     *exec.Cmd
	started time.Time
	done    chan struct{} // closed when it has exited
	logPath string
}

// startProc starts argv under `ip netns exec NETNS SELF launch --bind ...`, in its own process
// group, logging to logPath: stdout and stderr through one pipe, each line stamped with the
// time it was read (logs.go serves them).
func startProc(self, netns string, binds [][2]string, argv, env []string, logPath string) (*proc, error) {
	args := []string{"netns", "exec", netns, self, "launch"}
	if mntns, err := os.Readlink("/proc/self/ns/mnt"); err == nil {
		args = append(args, "--outside-mntns", mntns)
	}
	for _, b := range binds {
		args = append(args, "--bind", b[0]+"="+b[1])
	}
	args = append(append(args, "--"), argv...)
	log, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		log.Close()
		return nil, err
	}
	cmd := exec.Command("ip", args...)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = pw, pw
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		pr.Close()
		pw.Close()
		log.Close()
		return nil, err
	}
	pw.Close() // the child holds the write end; the copy ends when it exits
	go stampLines(pr, log)
	p := &proc{cmd: cmd, started: time.Now(), done: make(chan struct{}), logPath: logPath}
	go func() {
		_ = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func (p *proc) exitCode() int32 {
	if st := p.cmd.ProcessState; st != nil {
		return int32(st.ExitCode())
	}
	return -1
}

// stop sends SIGTERM to the process group, then SIGKILL after grace.
func (p *proc) stop(grace time.Duration) {
	if p.exited() {
		return
	}
	pgid := p.cmd.Process.Pid
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		<-p.done
	}
}

// waitListening waits until the process has a listening socket in netns, it exits, or timeout.
func (p *proc) waitListening(netns string, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if p.exited() {
			return false
		}
		if netnsListening(p.cmd.Process.Pid, netns) {
			return true
		}
		time.Sleep(50 * time.Millisecond)
	}
	return false
}

// podStatus is the status the agent reports for a Pod it runs.
func podStatus(pod *corev1.Pod, podIP netip.Addr, hostIP string, started metav1.Time, ready map[string]bool, restarts map[string]int32) corev1.PodStatus {
	allReady := true
	var cstat []corev1.ContainerStatus
	for _, c := range pod.Spec.Containers {
		r := ready[c.Name]
		allReady = allReady && r
		started := started
		cstat = append(cstat, corev1.ContainerStatus{
			Name:         c.Name,
			Image:        c.Image,
			ImageID:      c.Image,
			ContainerID:  "pier://" + string(pod.UID) + "/" + c.Name,
			Ready:        r,
			Started:      &r,
			RestartCount: restarts[c.Name],
			State:        corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: started}},
		})
	}
	cond := func(t corev1.PodConditionType, ok bool) corev1.PodCondition {
		s := corev1.ConditionTrue
		if !ok {
			s = corev1.ConditionFalse
		}
		return corev1.PodCondition{Type: t, Status: s, LastTransitionTime: started}
	}
	return corev1.PodStatus{
		Phase: corev1.PodRunning,
		Conditions: []corev1.PodCondition{
			cond(corev1.PodReadyToStartContainers, true),
			cond(corev1.PodInitialized, true),
			cond(corev1.PodReady, allReady),
			cond(corev1.ContainersReady, allReady),
			cond(corev1.PodScheduled, true),
		},
		HostIP:            hostIP,
		HostIPs:           []corev1.HostIP{{IP: hostIP}},
		PodIP:             podIP.String(),
		PodIPs:            []corev1.PodIP{{IP: podIP.String()}},
		StartTime:         &started,
		QOSClass:          pod.Status.QOSClass,
		ContainerStatuses: cstat,
	}
}

// tail is the last n lines of a file, for logs.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return "  " + strings.Join(lines, "\n  ")
}
