package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/retry"
	"k8s.io/client-go/util/workqueue"
)

// Config is the agent's configuration; see the flags in main.go.
type Config struct {
	Kubeconfig  string
	NodeName    string
	PodCIDR     string
	NodeIP      string
	Bridge      string
	NetnsPrefix string
	EchoBasic   string
	EchoImages  []string
	StateDir    string
	// Self is the binary run as `SELF launch ...` for Pod processes (default: os.Executable).
	Self string
	// StartTimeout bounds how long a started process may take to listen before the Pod is
	// reported Running but not Ready.
	StartTimeout time.Duration
	Workers      int
	// The kubelet endpoint for container logs (logs.go): served on NodeIP:KubeletPort when
	// KubeletCert is set, with clients verified against KubeletClientCA when that is set.
	KubeletPort     int
	KubeletCert     string
	KubeletKey      string
	KubeletClientCA string
}

// DefaultConfig has the defaults of the flags.
func DefaultConfig() Config {
	return Config{
		NodeName:    "pier-node",
		PodCIDR:     "10.244.0.0/24",
		Bridge:      "pier0",
		NetnsPrefix: "pierpod-",
		EchoImages: []string{
			// v1.7's manifests (echo-basic from the gateway-api-conformance-images module).
			"registry.k8s.io/gateway-api/conformance/echo-basic",
			"registry.k8s.io/gateway-api/echo-basic",
			"gcr.io/k8s-staging-gateway-api/echo-basic",
			"gcr.io/k8s-staging-gateway-api/echo-advanced",
		},
		StateDir:     filepath.Join(os.TempDir(), "pier-node-agent"),
		StartTimeout: 15 * time.Second,
		Workers:      4,
		KubeletPort:  10250,
	}
}

// Agent is the node agent. See the package docs.
type Agent struct {
	cfg    Config
	client kubernetes.Interface
	ipam   *ipam
	nodeIP string
	queue  workqueue.TypedRateLimitingInterface[string]
	pods   cache.Indexer

	mu       sync.Mutex
	runs     map[string]*podRun // by namespace/name
	mounts   map[string]int     // mountpoints the agent created -> Pods using them
	mountDir []string           // in creation order, so removal goes deepest first
	// servesLogs: the container log endpoint is up (set before the Node is registered).
	servesLogs bool
}

// podRun is what the agent holds for a Pod on its node.
type podRun struct {
	uid      types.UID
	ip       netip.Addr
	net      *podNet // nil for Pods that run no process
	dir      string
	started  metav1.Time
	procs    map[string]*proc // container name -> process
	restarts map[string]int32
	mounts   []string
	reported bool // a Ready status with all processes alive has been written
}

// New checks the configuration and builds a client.
func New(cfg Config) (*Agent, error) {
	rc, err := clientcmd.BuildConfigFromFlags("", cfg.Kubeconfig)
	if err != nil {
		return nil, err
	}
	rc.QPS, rc.Burst = 50, 100
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, err
	}
	return NewWithClient(cfg, cs)
}

// NewWithClient is New with a given client.
func NewWithClient(cfg Config, cs kubernetes.Interface) (*Agent, error) {
	m, err := newIPAM(cfg.PodCIDR)
	if err != nil {
		return nil, err
	}
	if cfg.Self == "" {
		if cfg.Self, err = os.Executable(); err != nil {
			return nil, err
		}
	}
	if cfg.EchoBasic, err = filepath.Abs(cfg.EchoBasic); err != nil {
		return nil, err
	}
	if st, err := os.Stat(cfg.EchoBasic); err != nil || st.IsDir() {
		return nil, fmt.Errorf("echo-basic binary %q not found", cfg.EchoBasic)
	}
	if cfg.Workers <= 0 {
		cfg.Workers = 1
	}
	nodeIP := cfg.NodeIP
	if nodeIP == "" {
		nodeIP = m.gateway().String()
	}
	return &Agent{
		cfg:    cfg,
		client: cs,
		ipam:   m,
		nodeIP: nodeIP,
		queue:  workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]()),
		runs:   map[string]*podRun{},
		mounts: map[string]int{},
	}, nil
}

// Run registers the Node and runs until ctx is done, then stops every Pod it started.
func (a *Agent) Run(ctx context.Context) error {
	if err := ensureBridge(a.cfg.Bridge, a.ipam.gateway(), a.ipam.prefix.Bits()); err != nil {
		return err
	}
	if err := os.MkdirAll(a.cfg.StateDir, 0o755); err != nil {
		return err
	}
	// Listening before the Node publishes the port.
	srv, ln, err := a.logServer()
	if err != nil {
		return err
	}
	a.servesLogs = srv != nil
	if srv != nil {
		go runLogServer(ctx, srv, ln)
	}
	if err := a.registerNode(ctx); err != nil {
		return fmt.Errorf("registering node %s: %w", a.cfg.NodeName, err)
	}
	log.Printf("node %s registered (InternalIP %s, pod CIDR %s, bridge %s)", a.cfg.NodeName, a.nodeIP, a.ipam.prefix, a.cfg.Bridge)
	go a.heartbeat(ctx)

	factory := informers.NewSharedInformerFactory(a.client, 30*time.Second)
	inf := factory.Core().V1().Pods().Informer()
	enqueue := func(obj any) {
		if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
			a.queue.Add(key)
		}
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) },
		DeleteFunc: enqueue,
	}); err != nil {
		return err
	}
	a.pods = inf.GetIndexer()
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return errors.New("pod informer did not sync")
	}
	var wg sync.WaitGroup
	for i := 0; i < a.cfg.Workers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for a.processNext(ctx) {
			}
		}()
	}
	<-ctx.Done()
	a.queue.ShutDown()
	wg.Wait()
	factory.Shutdown()
	a.stopAll()
	return nil
}

func (a *Agent) processNext(ctx context.Context) bool {
	key, quit := a.queue.Get()
	if quit {
		return false
	}
	defer a.queue.Done(key)
	requeue, err := a.reconcile(ctx, key)
	switch {
	case err != nil && ctx.Err() == nil:
		log.Printf("pod %s: %v (retrying)", key, err)
		a.queue.AddRateLimited(key)
	case requeue > 0:
		a.queue.Forget(key)
		a.queue.AddAfter(key, requeue)
	default:
		a.queue.Forget(key)
	}
	return true
}

// reconcile brings one Pod towards its desired state. A positive duration asks to look again.
func (a *Agent) reconcile(ctx context.Context, key string) (time.Duration, error) {
	obj, exists, err := a.pods.GetByKey(key)
	if err != nil {
		return 0, err
	}
	if !exists {
		a.stop(key, nil, 0)
		return 0, nil
	}
	pod := obj.(*corev1.Pod)
	if run := a.run(key); run != nil && run.uid != pod.UID {
		a.stop(key, run, 0) // a new Pod with the same name
	}
	if pod.Spec.NodeName == "" {
		if pod.DeletionTimestamp != nil || (pod.Spec.SchedulerName != "" && pod.Spec.SchedulerName != corev1.DefaultSchedulerName) {
			return 0, nil
		}
		return 0, a.bind(ctx, pod)
	}
	if pod.Spec.NodeName != a.cfg.NodeName {
		return 0, nil
	}
	if pod.DeletionTimestamp != nil {
		grace := 5 * time.Second
		if g := pod.DeletionGracePeriodSeconds; g != nil && time.Duration(*g)*time.Second < grace {
			grace = time.Duration(*g) * time.Second
		}
		a.stop(key, a.run(key), grace)
		zero := int64(0)
		err := a.client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
			GracePeriodSeconds: &zero,
			Preconditions:      &metav1.Preconditions{UID: &pod.UID},
		})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return 0, err
		}
		log.Printf("pod %s: stopped and deleted", key)
		return 0, nil
	}
	if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		return 0, nil
	}
	run := a.run(key)
	if run == nil {
		if run, err = a.start(ctx, key, pod); err != nil {
			return 0, err
		}
	}
	return a.report(ctx, pod, run)
}

func (a *Agent) run(key string) *podRun {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.runs[key]
}

// bind schedules pod onto the agent's node through the pods/binding subresource.
func (a *Agent) bind(ctx context.Context, pod *corev1.Pod) error {
	err := a.client.CoreV1().Pods(pod.Namespace).Bind(ctx, &corev1.Binding{
		ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace, UID: pod.UID},
		Target:     corev1.ObjectReference{Kind: "Node", Name: a.cfg.NodeName},
	}, metav1.CreateOptions{})
	if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
		return nil // already bound, or gone
	}
	if err == nil {
		log.Printf("pod %s/%s: bound to %s", pod.Namespace, pod.Name, a.cfg.NodeName)
	}
	return err
}

// netName is the Pod's network namespace and host veth name, from its UID (veth names are at
// most 15 bytes).
func (a *Agent) netName(uid types.UID) podNet {
	h := sha256.Sum256([]byte(uid))
	id := hex.EncodeToString(h[:])
	return podNet{netns: a.cfg.NetnsPrefix + id[:12], veth: "pv" + id[:12]}
}

// start gives pod an address and, for each container the agent can run, a process in the
// Pod's own network namespace.
func (a *Agent) start(ctx context.Context, key string, pod *corev1.Pod) (run *podRun, err error) {
	ip, err := a.ipam.allocate(string(pod.UID))
	if err != nil {
		return nil, err
	}
	run = &podRun{
		uid:      pod.UID,
		ip:       ip,
		dir:      filepath.Join(a.cfg.StateDir, "pods", pod.Namespace+"_"+pod.Name+"_"+string(pod.UID)),
		started:  metav1.Now(),
		procs:    map[string]*proc{},
		restarts: map[string]int32{},
	}
	defer func() {
		if err != nil {
			a.cleanup(run)
		}
	}()
	var containers []*corev1.Container
	for i := range pod.Spec.Containers {
		if runnable(&pod.Spec.Containers[i], a.cfg.EchoImages) {
			containers = append(containers, &pod.Spec.Containers[i])
		}
	}
	if len(containers) > 0 {
		n := a.netName(pod.UID)
		if err = setupPodNet(n, a.cfg.Bridge, ip, a.ipam.gateway(), a.ipam.prefix.Bits()); err != nil {
			return run, err
		}
		run.net = &n
		if err = os.MkdirAll(run.dir, 0o755); err != nil {
			return run, err
		}
		for _, c := range containers {
			if err = a.startContainer(ctx, pod, run, c); err != nil {
				return run, fmt.Errorf("container %s: %w", c.Name, err)
			}
		}
	}
	a.mu.Lock()
	a.runs[key] = run
	a.mu.Unlock()
	if len(containers) > 0 {
		log.Printf("pod %s: running on %s in netns %s", key, ip, run.net.netns)
	} else {
		log.Printf("pod %s: no runnable image, reported Ready without a process on %s", key, ip)
	}
	return run, nil
}

// startContainer materialises c's volumes (once per Pod) and starts echo-basic for it.
func (a *Agent) startContainer(ctx context.Context, pod *corev1.Pod, run *podRun, c *corev1.Container) error {
	env, err := containerEnv(ctx, a.client, pod, c, run.ip.String(), a.nodeIP)
	if err != nil {
		return err
	}
	vols, err := writeVolumes(ctx, a.client, pod, filepath.Join(run.dir, "volumes"))
	if err != nil {
		return err
	}
	var binds [][2]string
	for _, m := range c.VolumeMounts {
		src, ok := vols[m.Name]
		if !ok {
			continue
		}
		if m.SubPath != "" {
			src = filepath.Join(src, filepath.Clean("/"+m.SubPath))
		}
		if err := a.mountpoint(run, m.MountPath, src); err != nil {
			return err
		}
		binds = append(binds, [2]string{src, m.MountPath})
	}
	p, err := startProc(a.cfg.Self, run.net.netns, binds, append([]string{a.cfg.EchoBasic}, c.Args...), env,
		filepath.Join(run.dir, c.Name+".log"))
	if err != nil {
		return err
	}
	// Under the lock: the container log endpoint reads procs from its own goroutines.
	a.mu.Lock()
	run.procs[c.Name] = p
	a.mu.Unlock()
	return nil
}

// mountpoint makes sure path exists to bind-mount src on, remembering what it created so the
// last Pod using it removes it again.
func (a *Agent) mountpoint(run *podRun, path, src string) error {
	path = filepath.Clean(path)
	st, err := os.Stat(src)
	if err != nil {
		return err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, err := os.Stat(path); err == nil {
		if a.mounts[path] > 0 {
			a.mounts[path]++
			run.mounts = append(run.mounts, path)
		}
		return nil
	}
	// Create the missing directories, from the top.
	var missing []string
	for p := path; ; p = filepath.Dir(p) {
		if _, err := os.Stat(p); err == nil {
			break
		}
		missing = append([]string{p}, missing...)
	}
	for i, p := range missing {
		if i == len(missing)-1 && !st.IsDir() {
			f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY, 0o644)
			if err != nil {
				return err
			}
			f.Close()
		} else if err := os.Mkdir(p, 0o755); err != nil {
			return err
		}
		a.mountDir = append(a.mountDir, p)
		a.mounts[p]++
		run.mounts = append(run.mounts, p)
	}
	return nil
}

// report writes the Pod's status: Running, Ready when every process it runs listens.
func (a *Agent) report(ctx context.Context, pod *corev1.Pod, run *podRun) (time.Duration, error) {
	ready := map[string]bool{}
	var requeue time.Duration
	for _, c := range pod.Spec.Containers {
		p, ok := run.procs[c.Name]
		if !ok {
			ready[c.Name] = true // not run: reported Ready, as KWOK does
			continue
		}
		if p.exited() {
			// Back off like the kubelet (shorter): 1 s per restart so far, at most 10 s.
			backoff := min(time.Duration(run.restarts[c.Name]+1)*time.Second, 10*time.Second)
			if wait := time.Until(p.started.Add(backoff)); wait > 0 {
				return wait, nil
			}
			log.Printf("pod %s/%s: container %s exited with %d; restarting. Its log ends:\n%s", pod.Namespace, pod.Name,
				c.Name, p.exitCode(), tail(p.logPath, 5))
			run.restarts[c.Name]++
			run.reported = false
			if err := a.startContainer(ctx, pod, run, &c); err != nil {
				return 0, err
			}
			p = run.procs[c.Name]
		}
		ready[c.Name] = p.waitListening(run.net.netns, a.cfg.StartTimeout)
		if !ready[c.Name] {
			requeue = 2 * time.Second
		}
	}
	if requeue == 0 {
		// Look again later, to notice a process that exits.
		requeue = 10 * time.Second
		if run.reported && podIsReady(pod) && pod.Status.PodIP == run.ip.String() {
			return requeue, nil
		}
	}
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := a.client.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if cur.UID != run.uid {
			return apierrors.NewNotFound(corev1.Resource("pods"), pod.Name)
		}
		cur.Status = podStatus(cur, run.ip, a.nodeIP, run.started, ready, run.restarts)
		_, err = a.client.CoreV1().Pods(pod.Namespace).UpdateStatus(ctx, cur, metav1.UpdateOptions{})
		return err
	})
	if apierrors.IsNotFound(err) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	allReady := true
	for _, r := range ready {
		allReady = allReady && r
	}
	run.reported = allReady
	return requeue, nil
}

func podIsReady(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// stop ends the Pod's processes (SIGTERM, SIGKILL after grace) and removes its network
// namespace, address, volumes and mountpoints. run nil means whatever is held under key.
func (a *Agent) stop(key string, run *podRun, grace time.Duration) {
	a.mu.Lock()
	if run == nil {
		run = a.runs[key]
	}
	if run != nil && a.runs[key] == run {
		delete(a.runs, key)
	}
	a.mu.Unlock()
	if run == nil {
		return
	}
	if grace <= 0 {
		grace = time.Second
	}
	a.cleanupWith(run, grace)
	log.Printf("pod %s: stopped", key)
}

func (a *Agent) cleanup(run *podRun) { a.cleanupWith(run, time.Second) }

func (a *Agent) cleanupWith(run *podRun, grace time.Duration) {
	var wg sync.WaitGroup
	for _, p := range run.procs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.stop(grace)
		}()
	}
	wg.Wait()
	if run.net != nil {
		teardownPodNet(*run.net)
	}
	a.ipam.release(run.ip)
	if run.dir != "" {
		_ = os.RemoveAll(run.dir)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, m := range run.mounts {
		a.mounts[m]--
	}
	run.mounts = nil
	// Deepest first: the reverse of creation order.
	kept := a.mountDir[:0]
	for i := len(a.mountDir) - 1; i >= 0; i-- {
		p := a.mountDir[i]
		if a.mounts[p] <= 0 {
			delete(a.mounts, p)
			_ = os.Remove(p)
		}
	}
	for _, p := range a.mountDir {
		if a.mounts[p] > 0 {
			kept = append(kept, p)
		}
	}
	a.mountDir = kept
}

func (a *Agent) stopAll() {
	a.mu.Lock()
	keys := make([]string, 0, len(a.runs))
	for k := range a.runs {
		keys = append(keys, k)
	}
	a.mu.Unlock()
	sort.Strings(keys)
	var wg sync.WaitGroup
	for _, k := range keys {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a.stop(k, nil, time.Second)
		}()
	}
	wg.Wait()
}

// registerNode creates the Node (or takes over an existing one) and marks it Ready.
func (a *Agent) registerNode(ctx context.Context) error {
	nodes := a.client.CoreV1().Nodes()
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name: a.cfg.NodeName,
			Labels: map[string]string{
				"kubernetes.io/hostname": a.cfg.NodeName,
				"kubernetes.io/os":       "linux",
				"kubernetes.io/arch":     "amd64",
				"type":                   "pier-node-agent",
			},
		},
		Spec: corev1.NodeSpec{PodCIDR: a.ipam.prefix.String(), PodCIDRs: []string{a.ipam.prefix.String()}},
	}
	if _, err := nodes.Create(ctx, node, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return a.updateNodeStatus(ctx)
}

func (a *Agent) updateNodeStatus(ctx context.Context) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		node, err := a.client.CoreV1().Nodes().Get(ctx, a.cfg.NodeName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		now := metav1.Now()
		cond := func(t corev1.NodeConditionType, s corev1.ConditionStatus, reason string) corev1.NodeCondition {
			c := corev1.NodeCondition{Type: t, Status: s, Reason: reason, LastHeartbeatTime: now, LastTransitionTime: now}
			for _, old := range node.Status.Conditions {
				if old.Type == t && old.Status == s {
					c.LastTransitionTime = old.LastTransitionTime
				}
			}
			return c
		}
		res := corev1.ResourceList{
			corev1.ResourceCPU:    resource.MustParse("32"),
			corev1.ResourceMemory: resource.MustParse("64Gi"),
			corev1.ResourcePods:   resource.MustParse("250"),
		}
		node.Status = corev1.NodeStatus{
			Capacity:    res,
			Allocatable: res,
			Phase:       corev1.NodeRunning,
			Conditions: []corev1.NodeCondition{
				cond(corev1.NodeReady, corev1.ConditionTrue, "KubeletReady"),
				cond(corev1.NodeMemoryPressure, corev1.ConditionFalse, "KubeletHasSufficientMemory"),
				cond(corev1.NodeDiskPressure, corev1.ConditionFalse, "KubeletHasNoDiskPressure"),
				cond(corev1.NodePIDPressure, corev1.ConditionFalse, "KubeletHasSufficientPID"),
			},
			Addresses: []corev1.NodeAddress{
				{Type: corev1.NodeInternalIP, Address: a.nodeIP},
				{Type: corev1.NodeHostName, Address: a.cfg.NodeName},
			},
			NodeInfo: corev1.NodeSystemInfo{
				KubeletVersion:          "v0.0.0-pier-node-agent",
				OperatingSystem:         "linux",
				Architecture:            "amd64",
				ContainerRuntimeVersion: "pier-node-agent://0",
			},
			DaemonEndpoints: a.daemonEndpoints(),
		}
		_, err = a.client.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{})
		return err
	})
}

// daemonEndpoints publishes the container log endpoint's port, when the agent serves it.
func (a *Agent) daemonEndpoints() corev1.NodeDaemonEndpoints {
	var d corev1.NodeDaemonEndpoints
	if a.servesLogs {
		d.KubeletEndpoint.Port = int32(a.cfg.KubeletPort)
	}
	return d
}

// heartbeat keeps the Node Ready for kube-controller-manager's node lifecycle controller: the
// node Lease every 10 s and the status every 40 s, as the kubelet does.
func (a *Agent) heartbeat(ctx context.Context) {
	tick := time.NewTicker(10 * time.Second)
	defer tick.Stop()
	for n := 0; ; n++ {
		if err := a.renewLease(ctx); err != nil && ctx.Err() == nil {
			log.Printf("node lease: %v", err)
		}
		if n%4 == 3 {
			if err := a.updateNodeStatus(ctx); err != nil && ctx.Err() == nil {
				log.Printf("node status: %v", err)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

func (a *Agent) renewLease(ctx context.Context) error {
	leases := a.client.CoordinationV1().Leases(corev1.NamespaceNodeLease)
	now := metav1.NewMicroTime(time.Now())
	holder := a.cfg.NodeName
	dur := int32(40)
	l, err := leases.Get(ctx, a.cfg.NodeName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		_, err = leases.Create(ctx, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: a.cfg.NodeName, Namespace: corev1.NamespaceNodeLease},
			Spec:       coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &dur, RenewTime: &now},
		}, metav1.CreateOptions{})
		return err
	}
	if err != nil {
		return err
	}
	l.Spec.HolderIdentity, l.Spec.LeaseDurationSeconds, l.Spec.RenewTime = &holder, &dur, &now
	_, err = leases.Update(ctx, l, metav1.UpdateOptions{})
	return err
}

// String describes the configuration for logs.
func (c Config) String() string {
	return fmt.Sprintf("node=%s cidr=%s bridge=%s echo-images=%s", c.NodeName, c.PodCIDR, c.Bridge, strings.Join(c.EchoImages, ","))
}
