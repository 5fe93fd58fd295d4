package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/clientcmd"
)

// The test binary is also the agent's launcher: `node-agent.test launch ...`.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "launch" {
		os.Exit(launchMain(os.Args[2:]))
	}
	os.Exit(m.Run())
}

func TestImageName(t *testing.T) {
	for in, want := range map[string]string{
		"registry.k8s.io/gateway-api/echo-basic:v1.5.1":          "registry.k8s.io/gateway-api/echo-basic",
		"registry.k8s.io/gateway-api/echo-basic@sha256:abc":      "registry.k8s.io/gateway-api/echo-basic",
		"localhost:5000/echo-basic":                              "localhost:5000/echo-basic",
		"localhost:5000/echo-basic:v1":                           "localhost:5000/echo-basic",
		"registry.k8s.io/coredns/coredns:v1.12.2":                "registry.k8s.io/coredns/coredns",
		"gcr.io/k8s-staging-gateway-api/echo-basic:v20240412-v1": "gcr.io/k8s-staging-gateway-api/echo-basic",
	} {
		if got := imageName(in); got != want {
			t.Errorf("imageName(%q) = %q, want %q", in, got, want)
		}
	}
	imgs := DefaultConfig().EchoImages
	if !runnable(&corev1.Container{Image: "registry.k8s.io/gateway-api/echo-basic:v1.6.0-dev.3"}, imgs) {
		t.Error("the conformance echo image is not runnable")
	}
	for _, img := range []string{"registry.k8s.io/gateway-api/conformance/echo-basic:v0.1.0", "registry.k8s.io/gateway-api/conformance/echo-basic:v0.2.0"} {
		if !runnable(&corev1.Container{Image: img}, imgs) {
			t.Errorf("v1.7's echo image %s is not runnable", img)
		}
	}
	if runnable(&corev1.Container{Image: "registry.k8s.io/coredns/coredns:v1.12.2"}, imgs) {
		t.Error("coredns is runnable")
	}
	if runnable(&corev1.Container{Image: "registry.k8s.io/gateway-api/echo-basic:v1", Command: []string{"sh"}}, imgs) {
		t.Error("a container with a command is runnable")
	}
}

func TestIPAM(t *testing.T) {
	m, err := newIPAM("10.9.0.0/29")
	if err != nil {
		t.Fatal(err)
	}
	if g := m.gateway().String(); g != "10.9.0.1" {
		t.Fatalf("gateway %s", g)
	}
	var got []string
	for i := 0; i < 5; i++ {
		a, err := m.allocate(fmt.Sprint(i))
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, a.String())
	}
	if strings.Join(got, ",") != "10.9.0.2,10.9.0.3,10.9.0.4,10.9.0.5,10.9.0.6" {
		t.Fatalf("allocated %v", got)
	}
	if _, err := m.allocate("x"); err == nil {
		t.Fatal("allocated past the broadcast address")
	}
	if a, _ := m.allocate("2"); a.String() != "10.9.0.4" {
		t.Fatalf("owner 2 got a new address %s", a)
	}
	m.release(netip.MustParseAddr("10.9.0.3"))
	if a, err := m.allocate("x"); err != nil || a.String() != "10.9.0.3" {
		t.Fatalf("reuse: %v %v", a, err)
	}
	if _, err := newIPAM("fd00::/64"); err == nil {
		t.Fatal("accepted IPv6")
	}
}

func TestContainerEnv(t *testing.T) {
	cs := fake.NewClientset(
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s", Namespace: "ns"}, Data: map[string][]byte{"k": []byte("secret-v")}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cm", Namespace: "ns"}, Data: map[string]string{"A": "1", "B": "2"}},
	)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u1", Labels: map[string]string{"app": "x"}},
		Spec:       corev1.PodSpec{NodeName: "n"},
	}
	c := &corev1.Container{
		EnvFrom: []corev1.EnvFromSource{{Prefix: "CM_", ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cm"}}}},
		Env: []corev1.EnvVar{
			{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
			{Name: "NAMESPACE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}},
			{Name: "IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"}}},
			{Name: "APP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.labels['app']"}}},
			{Name: "S", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "s"}, Key: "k"}}},
			{Name: "TLS_SERVER_CERT", Value: "/etc/secret-volume/crt"},
			{Name: "REF", Value: "$(POD_NAME).$(NAMESPACE) $$(POD_NAME) $(NOPE)"},
		},
	}
	env, err := containerEnv(context.Background(), cs, pod, c, "10.0.0.5", "10.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"HOSTNAME=p", "CM_A=1", "CM_B=2", "POD_NAME=p", "NAMESPACE=ns", "IP=10.0.0.5", "APP=x", "S=secret-v",
		"TLS_SERVER_CERT=/etc/secret-volume/crt", "REF=p.ns $(POD_NAME) $(NOPE)",
	}
	if got := strings.Join(env[1:], "|"); got != strings.Join(want, "|") {
		t.Fatalf("env\n got %s\nwant %s", got, strings.Join(want, "|"))
	}
}

func TestWriteVolumes(t *testing.T) {
	cs := fake.NewClientset(&corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "tls", Namespace: "ns"},
		Data:       map[string][]byte{"tls.crt": []byte("CRT"), "tls.key": []byte("KEY")},
	})
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns"}, Spec: corev1.PodSpec{Volumes: []corev1.Volume{
		{Name: "v", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "tls", Items: []corev1.KeyToPath{
			{Key: "tls.crt", Path: "crt"}, {Key: "tls.key", Path: "sub/key"},
		}}}},
		{Name: "all", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "tls"}}},
		{Name: "e", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
	}}}
	dir := t.TempDir()
	vols, err := writeVolumes(context.Background(), cs, pod, dir)
	if err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]string{
		vols["v"] + "/crt": "CRT", vols["v"] + "/sub/key": "KEY", vols["all"] + "/tls.crt": "CRT", vols["all"] + "/tls.key": "KEY",
	} {
		if b, err := os.ReadFile(path); err != nil || string(b) != want {
			t.Errorf("%s: %q %v, want %q", path, b, err, want)
		}
	}
	if st, err := os.Stat(vols["e"]); err != nil || !st.IsDir() {
		t.Errorf("emptyDir: %v", err)
	}
}

// TestAgentLifecycle runs the agent against a real API server: it binds a Pod, runs echo-basic
// for it in the Pod's own network namespace with the Pod's env and Secret volume, reports it
// Running and Ready with its podIP, reports a Pod with an image it cannot run Ready without a
// process, and on graceful deletion stops the process, removes the namespace and deletes the
// Pod. It needs root, iproute2, PIER_NODE_AGENT_KUBECONFIG (an admin kubeconfig) and
// PIER_ECHO_BASIC (the echo-basic binary); scripts/conformance.sh selftest provides them,
// inside a network namespace of its own. With PIER_NODE_AGENT_KUBELET_{CERT,KEY,CLIENT_CA}
// (the selftest sets them, and the API server's --kubelet-* flags) it also reads the Pod's log
// through the API server's pods/log, which calls the agent's container log endpoint.
func TestAgentLifecycle(t *testing.T) {
	kubeconfig, echo := os.Getenv("PIER_NODE_AGENT_KUBECONFIG"), os.Getenv("PIER_ECHO_BASIC")
	if kubeconfig == "" || echo == "" || os.Geteuid() != 0 {
		t.Skip("needs root, PIER_NODE_AGENT_KUBECONFIG and PIER_ECHO_BASIC (run scripts/conformance.sh selftest)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	rc, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cs := kubernetes.NewForConfigOrDie(rc)

	cfg := DefaultConfig()
	cfg.NodeName = "agent-test"
	cfg.PodCIDR = "10.246.0.0/24"
	cfg.Bridge = "piertest0"
	cfg.NetnsPrefix = "piertest-"
	cfg.EchoBasic = echo
	cfg.StateDir = t.TempDir()
	cfg.KubeletCert = os.Getenv("PIER_NODE_AGENT_KUBELET_CERT")
	cfg.KubeletKey = os.Getenv("PIER_NODE_AGENT_KUBELET_KEY")
	cfg.KubeletClientCA = os.Getenv("PIER_NODE_AGENT_KUBELET_CLIENT_CA")
	agent, err := NewWithClient(cfg, cs)
	if err != nil {
		t.Fatal(err)
	}
	agentCtx, stopAgent := context.WithCancel(ctx)
	agentDone := make(chan error, 1)
	go func() { agentDone <- agent.Run(agentCtx) }()
	defer func() {
		stopAgent()
		if err := <-agentDone; err != nil {
			t.Errorf("agent: %v", err)
		}
	}()

	ns := fmt.Sprintf("agent-test-%d", time.Now().UnixNano()%100000)
	mustCreate(t, func() error {
		_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
		return err
	})
	crt, key := selfSigned(t)
	mustCreate(t, func() error {
		_, err := cs.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: "tls"},
			Type:       corev1.SecretTypeTLS,
			Data:       map[string][]byte{"tls.crt": crt, "tls.key": key},
		}, metav1.CreateOptions{})
		return err
	})
	fieldEnv := func(name, path string) corev1.EnvVar {
		return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: path}}}
	}
	echoPod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "echo"},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{
				Name:  "echo",
				Image: "registry.k8s.io/gateway-api/echo-basic:v1.5.1",
				Env: []corev1.EnvVar{
					fieldEnv("POD_NAME", "metadata.name"), fieldEnv("NAMESPACE", "metadata.namespace"),
					{Name: "TLS_SERVER_CERT", Value: "/etc/pier-agent-test-secret/crt"},
					{Name: "TLS_SERVER_PRIVKEY", Value: "/etc/pier-agent-test-secret/key"},
				},
				VolumeMounts: []corev1.VolumeMount{{Name: "certs", MountPath: "/etc/pier-agent-test-secret"}},
			}},
			Volumes: []corev1.Volume{{Name: "certs", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
				SecretName: "tls", Items: []corev1.KeyToPath{{Key: "tls.crt", Path: "crt"}, {Key: "tls.key", Path: "key"}},
			}}}},
		},
	}
	dnsPod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "coredns"},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "coredns", Image: "registry.k8s.io/coredns/coredns:v1.12.2"}}},
	}
	for _, p := range []*corev1.Pod{echoPod, dnsPod} {
		mustCreate(t, func() error {
			_, err := cs.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
			return err
		})
	}

	started := time.Now()
	echo1 := waitPod(t, ctx, cs, ns, "echo", func(p *corev1.Pod) bool { return podIsReady(p) })
	t.Logf("echo Pod Ready in %v: node %s, podIP %s", time.Since(started).Round(time.Millisecond), echo1.Spec.NodeName, echo1.Status.PodIP)
	if echo1.Spec.NodeName != cfg.NodeName {
		t.Fatalf("bound to %q", echo1.Spec.NodeName)
	}
	if echo1.Status.Phase != corev1.PodRunning || len(echo1.Status.ContainerStatuses) != 1 || !echo1.Status.ContainerStatuses[0].Ready {
		t.Fatalf("status %+v", echo1.Status)
	}
	ip, err := netip.ParseAddr(echo1.Status.PodIP)
	if err != nil || !netip.MustParsePrefix(cfg.PodCIDR).Contains(ip) {
		t.Fatalf("podIP %q not in %s", echo1.Status.PodIP, cfg.PodCIDR)
	}
	for _, ct := range []corev1.PodConditionType{corev1.PodScheduled, corev1.PodInitialized, corev1.ContainersReady, corev1.PodReady} {
		if !hasCondition(echo1, ct) {
			t.Errorf("condition %s is not True", ct)
		}
	}
	nsName := agent.netName(echo1.UID).netns
	if _, err := os.Stat("/run/netns/" + nsName); err != nil {
		t.Fatalf("pod netns: %v", err)
	}

	// The Pod's own echo-basic answers on its podIP, with the downward-API env.
	var echoed struct{ Pod, Namespace string }
	body := httpGet(t, "http://"+net.JoinHostPort(ip.String(), "3000")+"/hello", nil)
	if err := json.Unmarshal(body, &echoed); err != nil || echoed.Pod != "echo" || echoed.Namespace != ns {
		t.Fatalf("echo answered %s (%v)", body, err)
	}
	if cfg.KubeletCert != "" {
		checkLogs(t, ctx, cs, ns)
	}
	// HTTPS on 8443 with the certificate from the Secret volume, bind-mounted at its mountPath.
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(crt)
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "echo.example"}}
	body = httpGet(t, "https://"+net.JoinHostPort(ip.String(), "8443")+"/tls", tr)
	if !strings.Contains(string(body), `"echo"`) {
		t.Fatalf("https echo answered %s", body)
	}
	// The mountpoint was only visible to the Pod: the agent created it and will remove it.
	if _, err := os.Stat("/etc/pier-agent-test-secret/crt"); err == nil {
		t.Error("the Secret volume is visible outside the Pod's mount namespace")
	}

	dns := waitPod(t, ctx, cs, ns, "coredns", func(p *corev1.Pod) bool { return podIsReady(p) })
	if dns.Status.PodIP == "" || dns.Status.PodIP == echo1.Status.PodIP {
		t.Errorf("coredns podIP %q", dns.Status.PodIP)
	}

	// Graceful deletion: the agent stops the process and finishes the deletion.
	started = time.Now()
	if err := cs.CoreV1().Pods(ns).Delete(ctx, "echo", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitGone(t, ctx, cs, ns, "echo")
	t.Logf("echo Pod deleted in %v", time.Since(started).Round(time.Millisecond))
	if _, err := os.Stat("/run/netns/" + nsName); err == nil {
		t.Error("pod netns still there")
	}
	if _, err := os.Stat("/etc/pier-agent-test-secret"); err == nil {
		t.Error("mountpoint still there")
	}
	c, err := net.DialTimeout("tcp", net.JoinHostPort(ip.String(), "3000"), time.Second)
	if err == nil {
		c.Close()
		t.Error("echo still answers after deletion")
	}
	if err := cs.CoreV1().Pods(ns).Delete(ctx, "coredns", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitGone(t, ctx, cs, ns, "coredns")
	_ = cs.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{})
}

// checkLogs reads the echo Pod's log through the API server (pods/log, as kubectl logs and the
// conformance suite's mirror tests do): the request just made is in it, and a sinceTime after
// it leaves it out.
func checkLogs(t *testing.T, ctx context.Context, cs kubernetes.Interface, ns string) {
	t.Helper()
	want := "Echoing back request made to /hello to client"
	read := func(since *metav1.Time) string {
		b, err := cs.CoreV1().Pods(ns).GetLogs("echo", &corev1.PodLogOptions{Container: "echo", SinceTime: since}).DoRaw(ctx)
		if err != nil {
			t.Fatalf("pods/log: %v", err)
		}
		return string(b)
	}
	var got string
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if got = read(nil); strings.Contains(got, want) {
			break
		}
	}
	if !strings.Contains(got, want) {
		t.Fatalf("the Pod's log through the API server has no %q: %q", want, got)
	}
	if strings.Contains(got, "Z Echoing") {
		t.Errorf("timestamps without timestamps=true: %q", got)
	}
	later := metav1.NewTime(time.Now().Add(2 * time.Second))
	if got := read(&later); strings.Contains(got, want) {
		t.Errorf("sinceTime after the request still returns it: %q", got)
	}
	if _, err := cs.CoreV1().Pods(ns).GetLogs("echo", &corev1.PodLogOptions{Container: "nothere"}).DoRaw(ctx); err == nil {
		t.Error("a container the Pod does not have has logs")
	}
}

// mustCreate retries for up to 30 s: in a new namespace, Pods are refused until the controller
// manager has created its `default` ServiceAccount.
func mustCreate(t *testing.T, f func() error) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal(err)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

func hasCondition(p *corev1.Pod, ct corev1.PodConditionType) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == ct {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func waitPod(t *testing.T, ctx context.Context, cs kubernetes.Interface, ns, name string, ok func(*corev1.Pod) bool) *corev1.Pod {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	var last *corev1.Pod
	for time.Now().Before(deadline) {
		p, err := cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err == nil {
			last = p
			if ok(p) {
				return p
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("pod %s/%s not as expected within 60s; last: %+v", ns, name, last)
	return nil
}

func waitGone(t *testing.T, ctx context.Context, cs kubernetes.Interface, ns, name string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		_, err := cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("pod %s/%s still there after 30s", ns, name)
}

func httpGet(t *testing.T, url string, tr *http.Transport) []byte {
	t.Helper()
	if tr == nil {
		tr = &http.Transport{}
	}
	client := &http.Client{Transport: tr, Timeout: 5 * time.Second}
	resp, err := client.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s: %s", url, resp.Status, b)
	}
	return b
}

func selfSigned(t *testing.T) (crtPEM, keyPEM []byte) {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "echo.example"},
		DNSNames:              []string{"echo.example"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	kd, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kd})
}
