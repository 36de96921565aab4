package registry

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fw-serve/fw/dashboard/fault"
	"github.com/fw-serve/fw/dashboard/store"
)

// Deployment states.
const (
	DeployRunning = "running"
	DeployGone    = "gone" // its process vanished (found on start or since)
)

// DeployRequest is the body of POST /api/models/{name}/deploy.
type DeployRequest struct {
	// Version is a version number or an alias ("production"); "" is the
	// latest version.
	Version json.RawMessage `json:"version,omitempty"`
	// Target is "process" (the default: a `fw serve --model FILE` of its
	// own on Port) or "shared" (the dashboard's shared server, shared.go:
	// Port, GRPCPort and Device apply when it has to be started).
	Target string `json:"target,omitempty"`
	Port   int    `json:"port"`
	// GRPCPort is the deployment's gRPC port (fw serve --grpc-port); 0
	// picks a free one.
	GRPCPort     int    `json:"grpc_port,omitempty"`
	Device       string `json:"device,omitempty"`
	MaxBatchSize int    `json:"max_batch_size,omitempty"`
	MaxDelayMS   *int   `json:"max_delay_ms,omitempty"`
}

// Deployment is a managed `fw serve` child, or a version on the shared
// server (Target "shared": the process fields are the server's).
type Deployment struct {
	ID      string `json:"id"`
	Target  string `json:"target,omitempty"` // "process" ("" in older records) or "shared"
	Model   string `json:"model"`
	Version int    `json:"version"`
	Port    int    `json:"port"`
	PID     int    `json:"pid"`
	URL     string `json:"url"`
	// GRPCPort and GRPCAddress are where the same model answers over gRPC
	// (the Open Inference Protocol, tritonclient.grpc); absent for
	// deployments made before fw served gRPC.
	GRPCPort     int       `json:"grpc_port,omitempty"`
	GRPCAddress  string    `json:"grpc_address,omitempty"`
	Device       string    `json:"device"`
	MaxBatchSize int       `json:"max_batch_size,omitempty"`
	MaxDelayMS   *int      `json:"max_delay_ms,omitempty"`
	Started      time.Time `json:"started"`
	State        string    `json:"state"`
	Log          string    `json:"log"`
	// Replica is the dashboard replica that owns it (starts, watches and
	// stops it), Host the machine its process runs on; Restarts counts the
	// times another replica started it again after its owner stopped
	// (docs/replicas.md). Empty and 0 for a dashboard without replicas.
	Replica  string `json:"replica,omitempty"`
	Host     string `json:"host,omitempty"`
	Restarts int    `json:"restarts,omitempty"`
	// Error says why a deployment is gone, when the dashboard knows.
	Error string `json:"error,omitempty"`
	// Stopped is when it was undeployed (only in EndedDeployments).
	Stopped *time.Time `json:"stopped,omitempty"`
	// Filled by List.
	Healthy     bool     `json:"healthy"`
	RequestRate *float64 `json:"request_rate,omitempty"` // requests per second since the previous sample
	// ModelState and Reason are a shared deployment's state in the shared
	// server's repository index (READY, LOADING, UNAVAILABLE); filled by
	// List.
	ModelState string `json:"model_state,omitempty"`
	Reason     string `json:"reason,omitempty"`
}

// Shared reports whether d is a version on the shared server.
func (d *Deployment) Shared() bool { return d.Target == TargetShared }

type sample struct {
	at    time.Time
	total float64
}

// deployer holds what only this process knows about deployments: the
// children it started (to wait for them) and the last request counters it
// sampled. The deployment records themselves are in the store.
type deployer struct {
	mu   sync.Mutex
	done map[string]chan struct{} // children started by this process: closed on exit
	pids map[string]int           // and their pids
	prev map[string]sample
}

const maxEndedDeployments = 200

func decodeDeployment(rec store.Record) (*Deployment, error) {
	var d Deployment
	if err := json.Unmarshal(rec.Body, &d); err != nil {
		return nil, fmt.Errorf("reading deployment %q from the store: %w", rec.Key, err)
	}
	return &d, nil
}

func (s *Service) listDeployments(ctx context.Context, kind string) ([]*Deployment, error) {
	recs, err := s.st.ListRecords(ctx, kind)
	if err != nil {
		return nil, err
	}
	out := make([]*Deployment, 0, len(recs))
	for _, rec := range recs {
		d, err := decodeDeployment(rec)
		if err != nil {
			return nil, err
		}
		d.Healthy, d.RequestRate = false, nil
		out = append(out, d)
	}
	return out, nil
}

// EndedDeployments lists the deployments stopped through StopDeployment,
// newest first (the last 200).
func (s *Service) EndedDeployments(ctx context.Context) ([]Deployment, error) {
	list, err := s.listDeployments(ctx, kindEndedDeployment)
	if err != nil {
		return nil, err
	}
	sortEnded(list)
	out := make([]Deployment, len(list))
	for i, d := range list {
		out[i] = *d
	}
	return out, nil
}

func sortEnded(list []*Deployment) {
	stopped := func(d *Deployment) time.Time {
		if d.Stopped != nil {
			return *d.Stopped
		}
		return d.Started
	}
	sort.SliceStable(list, func(i, j int) bool { return stopped(list[i]).After(stopped(list[j])) })
}

// recordEnded keeps c in the ended list, dropping the oldest beyond
// maxEndedDeployments.
func (s *Service) recordEnded(ctx context.Context, c Deployment) error {
	if err := s.putDeployment(ctx, kindEndedDeployment, &c); err != nil {
		return err
	}
	list, err := s.listDeployments(ctx, kindEndedDeployment)
	if err != nil {
		return err
	}
	sortEnded(list)
	for _, d := range list[min(len(list), maxEndedDeployments):] {
		if _, err := s.st.DeleteRecord(ctx, kindEndedDeployment, d.ID); err != nil {
			return err
		}
	}
	return nil
}

func (s *Service) putDeployment(ctx context.Context, kind string, d *Deployment) error {
	c := *d
	c.Healthy, c.RequestRate = false, nil
	b, err := json.Marshal(c)
	if err != nil {
		return err
	}
	_, err = s.st.UpdateRecord(ctx, kind, d.ID, func(*store.Record) (json.RawMessage, error) { return b, nil })
	return err
}

// setDeploymentState changes the state of a recorded deployment (no-op when
// it is gone or already in that state).
func (s *Service) setDeploymentState(ctx context.Context, id, state string) error {
	_, err := s.st.UpdateRecord(ctx, kindDeployment, id, func(cur *store.Record) (json.RawMessage, error) {
		if cur == nil {
			return nil, store.ErrKeep
		}
		d, err := decodeDeployment(*cur)
		if err != nil || d.State == state {
			return nil, store.ErrKeep
		}
		d.State = state
		return json.Marshal(d)
	})
	return err
}

// loadDeployments checks the recorded deployments on start: those whose
// process is alive and whose /health answers are re-adopted, the others
// are marked gone.
func (s *Service) loadDeployments(ctx context.Context) error {
	d := &s.dep
	d.done, d.pids, d.prev = map[string]chan struct{}{}, map[string]int{}, map[string]sample{}
	if s.cfg.Member != nil {
		// Replicas: a deployment whose owner stopped is taken over by the
		// sweep; one that no replica owns (from a dashboard without
		// replicas) now.
		return s.adoptOrphans(ctx)
	}
	list, err := s.listDeployments(ctx, kindDeployment)
	if err != nil {
		return err
	}
	for _, x := range list {
		if x.State != DeployRunning {
			continue
		}
		if alive(x.PID) && probe(x.URL+"/health") {
			if s.log != nil {
				s.log.Info("deployment re-adopted", "id", x.ID, "model", x.Model, "version", x.Version, "url", x.URL, "pid", x.PID)
			}
			continue
		}
		if s.log != nil {
			s.log.Warn("deployment gone", "id", x.ID, "pid", x.PID, "url", x.URL)
		}
		if err := s.setDeploymentState(ctx, x.ID, DeployGone); err != nil {
			return err
		}
	}
	return nil
}

var httpc = &http.Client{Timeout: 2 * time.Second}

func probe(url string) bool {
	r, err := httpc.Get(url)
	if err != nil {
		return false
	}
	r.Body.Close()
	return r.StatusCode == 200
}

// requestsTotal sums fw_http_requests_total over its labels.
func requestsTotal(url string) (float64, bool) {
	r, err := httpc.Get(url + "/metrics")
	if err != nil {
		return 0, false
	}
	defer r.Body.Close()
	if r.StatusCode != 200 {
		return 0, false
	}
	total, found := 0.0, false
	sc := bufio.NewScanner(r.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "fw_http_requests_total") {
			continue
		}
		rest := strings.TrimPrefix(line, "fw_http_requests_total")
		if rest == "" || (rest[0] != '{' && rest[0] != ' ') {
			continue
		}
		f := strings.Fields(rest[strings.LastIndexByte(rest, '}')+1:])
		if len(f) == 0 {
			continue
		}
		if v, err := strconv.ParseFloat(f[0], 64); err == nil {
			total += v
			found = true
		}
	}
	return total, found
}

func (s *Service) resolveDeployVersion(ctx context.Context, name string, raw json.RawMessage) (*Version, error) {
	ref := strings.TrimSpace(string(raw))
	if ref == "" || ref == "null" {
		m, err := s.Reg.Get(ctx, name)
		if err != nil {
			return nil, err
		}
		for i := len(m.Versions) - 1; i >= 0; i-- {
			if m.Versions[i].Servable() {
				return m.Versions[i], nil
			}
		}
		return nil, invalid("model %q has no exported version to deploy; export one first (POST /api/models/export)", name)
	}
	var str string
	if json.Unmarshal(raw, &str) != nil {
		var n int
		if err := json.Unmarshal(raw, &n); err != nil {
			return nil, invalid("version must be a version number or an alias, not %s", ref)
		}
		str = strconv.Itoa(n)
	}
	return s.Reg.Resolve(ctx, name, str)
}

// pickPort checks that port is free on 127.0.0.1, or with port 0 picks a
// free one (the kernel's choice; fw serve binds it right after).
func pickPort(port int) (int, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// Deploy starts `fw serve` on 127.0.0.1:port (and gRPC on grpc_port, or a
// free one) with a version's file and waits until its /health/ready
// answers.
func (s *Service) Deploy(ctx context.Context, name string, req DeployRequest) (*Deployment, error) {
	v, err := s.resolveDeployVersion(ctx, name, req.Version)
	if err != nil {
		return nil, err
	}
	if v.Exportable() {
		what := "a checkpoint"
		if v.Format == FormatProgram {
			what = "a torch.export program (an MLflow PyTorch model)"
		}
		return nil, invalid("model %q version %d is %s; export it first (POST /api/models/export with {\"model\": %q, \"version\": %d, \"format\": \"onnx\"}) and deploy the version that makes", name, v.Version, what, name, v.Version)
	}
	if !v.Servable() {
		return nil, invalid("model %q version %d is a reference to the MLflow model %s, registered through MLflow's API; register its exported file (ONNX, TorchScript or .pt2) as a version to deploy it", name, v.Version, v.Source.URI)
	}
	if req.MaxBatchSize < 0 || (req.MaxDelayMS != nil && *req.MaxDelayMS < 0) {
		return nil, invalid("max_batch_size and max_delay_ms must not be negative")
	}
	switch req.Target {
	case TargetShared:
		return s.deployShared(ctx, name, v, req)
	case "", TargetProcess:
	default:
		return nil, invalid("target %q is not process (a fw serve of its own, the default) or shared (the dashboard's shared server)", req.Target)
	}
	if req.Port < 1 || req.Port > 65535 {
		return nil, invalid("port %d must be within 1..65535", req.Port)
	}
	if req.GRPCPort < 0 || req.GRPCPort > 65535 || req.GRPCPort == req.Port {
		return nil, invalid("grpc_port %d must be within 1..65535 and differ from port, or 0 (or absent) to pick a free one", req.GRPCPort)
	}
	if req.Device == "" {
		req.Device = "cpu"
	}
	if req.Device != "cpu" && req.Device != "cuda" && !strings.HasPrefix(req.Device, "cuda:") {
		return nil, invalid("device %q is not cpu, cuda or cuda:N", req.Device)
	}
	users, err := s.portUsers(ctx)
	if err != nil {
		return nil, err
	}
	for _, p := range []int{req.Port, req.GRPCPort} {
		if who, ok := users[p]; ok {
			return nil, conflict("port %d is already used by %s", p, who)
		}
	}
	if _, err := pickPort(req.Port); err != nil {
		return nil, conflict("port %d on 127.0.0.1 is in use by another process; choose another port", req.Port)
	}
	if req.GRPCPort != 0 {
		if _, err := pickPort(req.GRPCPort); err != nil {
			return nil, conflict("grpc_port %d on 127.0.0.1 is in use by another process; choose another, or leave it out to pick a free one", req.GRPCPort)
		}
	}
	dep := &Deployment{ID: "dep-" + store.NewID(), Target: TargetProcess, Model: name, Version: v.Version, Port: req.Port, GRPCPort: req.GRPCPort,
		Device: req.Device, MaxBatchSize: req.MaxBatchSize, MaxDelayMS: req.MaxDelayMS}
	if err := s.claimDeployment(ctx, dep); err != nil {
		return nil, err
	}
	s.publish("deploy", dep.ID, map[string]any{"id": dep.ID, "state": "starting", "model": name, "version": v.Version, "url": "http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(req.Port))})
	modelPath, err := s.Reg.ModelFile(ctx, v)
	var done chan struct{}
	if err == nil {
		done, err = s.launch(ctx, dep, modelPath)
	}
	if err == nil {
		if err = s.putDeployment(ctx, kindDeployment, dep); err != nil {
			_ = signalGroup(dep.PID, sigKill)
			<-done
		}
	}
	if err != nil {
		s.releaseDeployment(dep.ID)
		return nil, err
	}
	d := &s.dep
	d.mu.Lock()
	d.done[dep.ID], d.pids[dep.ID] = done, dep.PID
	d.mu.Unlock()
	s.publish("deploy", dep.ID, map[string]any{"id": dep.ID, "state": DeployRunning, "model": name, "version": v.Version, "url": dep.URL})
	c := *dep
	c.Healthy = true
	return &c, nil
}

// launch starts `fw serve` for dep with the model file at modelPath on
// 127.0.0.1:dep.Port (gRPC on dep.GRPCPort, or a free port when 0), waits
// until its /health/ready answers and fills in the process fields of dep
// (PID, URL, gRPC address, Started, State, Log). The returned channel is
// closed when the child exits.
func (s *Service) launch(ctx context.Context, dep *Deployment, modelPath string) (chan struct{}, error) {
	args := []string{"--model", modelPath}
	if dep.MaxBatchSize > 0 {
		args = append(args, "--max-batch-size", strconv.Itoa(dep.MaxBatchSize))
	}
	if dep.MaxDelayMS != nil {
		args = append(args, "--max-delay", strconv.Itoa(*dep.MaxDelayMS)+"ms")
	}
	c, err := s.spawn(ctx, dep.ID, dep.Port, dep.GRPCPort, dep.Device, args, "/health/ready")
	if err != nil {
		return nil, err
	}
	dep.PID, dep.URL, dep.GRPCPort, dep.GRPCAddress = c.pid, c.url, c.grpcPort, c.grpcAddress
	dep.Started, dep.State, dep.Log = c.started, DeployRunning, c.log
	return c.done, nil
}

// child is a started `fw serve` process.
type child struct {
	pid         int
	url         string
	grpcPort    int
	grpcAddress string
	started     time.Time
	log         string        // its output
	done        chan struct{} // closed when it exits
}

// spawn starts `fw serve` with args (what it serves and how) on
// 127.0.0.1:port, gRPC on grpcPort (a free port when 0), in its own session
// (it outlives the dashboard), its output in deployments/<id>.log, and waits
// until readyPath answers 200. A child that exits or is not ready in time
// is an error with its last log lines.
func (s *Service) spawn(ctx context.Context, id string, port, grpcPort int, device string, args []string, readyPath string) (*child, error) {
	wanted := grpcPort
	grpcPort, err := pickPort(wanted)
	if err != nil {
		return nil, conflict("grpc_port %d on 127.0.0.1 is in use by another process; choose another, or leave it out to pick a free one", wanted)
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	logDir := filepath.Join(s.cfg.ExperimentDir, "deployments")
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		return nil, err
	}
	logPath := filepath.Join(logDir, id+".log")
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	args = append(append([]string{"serve"}, args...), "--host", "127.0.0.1", "--port", strconv.Itoa(port),
		"--grpc-port", strconv.Itoa(grpcPort), "--device", device)
	cmd := exec.Command(s.cfg.Executable, args...)
	cmd.Env = append(os.Environ(), s.cfg.ExtraEnv...)
	if s.cfg.Traces != nil {
		cmd.Env = append(cmd.Env, s.cfg.Traces.env(id)...)
	}
	if s.cfg.Payloads != nil {
		cmd.Env = append(cmd.Env, s.cfg.Payloads.env(id)...)
	}
	cmd.Stdout, cmd.Stderr, cmd.Stdin = logf, logf, nil
	setGroup(cmd, true)
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s serve: %w", s.cfg.Executable, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	c := &child{pid: cmd.Process.Pid, url: "http://" + addr, grpcPort: grpcPort, grpcAddress: net.JoinHostPort("127.0.0.1", strconv.Itoa(grpcPort)),
		started: time.Now().UTC(), log: logPath, done: done}

	deadline := time.Now().Add(s.cfg.ReadyTimeout)
	for !probe(c.url + readyPath) {
		select {
		case <-done:
			msg := lastLines(readTail(logPath), 5)
			if strings.Contains(msg, "address already in use") || strings.Contains(msg, "in use") {
				return nil, conflict("port %d is in use: %s", port, msg)
			}
			return nil, fault.New(fault.Unprocessable, "deploy_failed", "fw serve exited before it was ready: "+msg)
		case <-ctx.Done():
			_ = signalGroup(c.pid, sigKill)
			<-done
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			_ = signalGroup(c.pid, sigKill)
			<-done
			return nil, fault.New(fault.Unprocessable, "deploy_failed", fmt.Sprintf("fw serve was not ready within %s: %s", s.cfg.ReadyTimeout, lastLines(readTail(logPath), 5)))
		}
	}
	return c, nil
}

func readTail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	if len(b) > 4096 {
		b = b[len(b)-4096:]
	}
	return string(b)
}

// Records lists the deployments as recorded, without probing their health
// or sampling their request rate (Deployments does both): for callers that
// only need who is deployed where. Oldest first.
func (s *Service) Records(ctx context.Context) ([]*Deployment, error) {
	list, _, err := s.records(ctx)
	return list, err
}

// records is Records, with the shared server's record when a shared
// deployment is listed.
func (s *Service) records(ctx context.Context) ([]*Deployment, *SharedServer, error) {
	list, err := s.listDeployments(ctx, kindDeployment)
	if err != nil {
		return nil, nil, err
	}
	shared, srv, err := s.sharedDeploymentRecords(ctx)
	if err != nil {
		return nil, nil, err
	}
	list = append(list, shared...)
	sort.SliceStable(list, func(i, j int) bool { return list[i].Started.Before(list[j].Started) })
	return list, srv, nil
}

// Record returns one deployment as recorded (see Records); false when there
// is none.
func (s *Service) Record(ctx context.Context, id string) (Deployment, bool, error) {
	if store.ValidateKey(id) != nil {
		return Deployment{}, false, nil
	}
	rec, err := s.st.GetRecord(ctx, kindDeployment, id)
	if store.ErrorCode(err) == store.CodeNotFound {
		doc, ok, err := s.sharedDoc(ctx, id)
		if err != nil || !ok {
			return Deployment{}, false, err
		}
		srv, _, err := s.sharedRecord(ctx)
		if err != nil {
			return Deployment{}, false, err
		}
		return withServer(doc.Deployment, srv), true, nil
	}
	if err != nil {
		return Deployment{}, false, err
	}
	d, err := decodeDeployment(rec)
	if err != nil {
		return Deployment{}, false, err
	}
	d.Healthy, d.RequestRate = false, nil
	return *d, true, nil
}

// Deployments lists the deployments with their health and request rate.
func (s *Service) Deployments(ctx context.Context) ([]*Deployment, error) {
	d := &s.dep
	list, srv, err := s.records(ctx)
	if err != nil {
		return nil, err
	}
	var shared []*Deployment
	for _, x := range list {
		if x.Shared() {
			shared = append(shared, x)
			continue
		}
		if x.State != DeployRunning {
			continue
		}
		if !s.local(x) {
			// Its URL is another machine's loopback: its owner replica
			// probes it; here it is listed as recorded (healthy false).
			continue
		}
		if !alive(x.PID) {
			x.State = DeployGone
			if err := s.setDeploymentState(ctx, x.ID, DeployGone); err != nil && s.log != nil {
				s.log.Warn("marking a deployment gone", "id", x.ID, "err", err)
			}
			continue
		}
		x.Healthy = probe(x.URL + "/health/ready")
		if total, ok := requestsTotal(x.URL); ok {
			now := sample{at: time.Now(), total: total}
			d.mu.Lock()
			prev, had := d.prev[x.ID]
			d.prev[x.ID] = now
			d.mu.Unlock()
			if had && now.at.Sub(prev.at) > 0 {
				r := max(0, now.total-prev.total) / now.at.Sub(prev.at).Seconds()
				x.RequestRate = &r
			}
		}
	}
	s.sharedDeployments(ctx, shared, srv)
	return list, nil
}

// StopDeployment stops a deployment (SIGTERM to its process group, then
// SIGKILL after the grace period) and forgets it.
func (s *Service) StopDeployment(ctx context.Context, id string) (*Deployment, error) {
	c, ok, err := s.Record(ctx, id)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, notFound("no deployment %s; GET /api/deployments lists them", id)
	}
	if c.Shared() {
		return s.undeployShared(ctx, id)
	}
	if err := s.ownDeployment(ctx, id); err != nil {
		return nil, err
	}
	d := &s.dep
	d.mu.Lock()
	done := d.done[id]
	d.mu.Unlock()
	if c.State == DeployRunning && s.local(&c) && alive(c.PID) {
		s.terminate(ctx, c.PID, done)
	}
	c.State = "stopped"
	now := time.Now().UTC()
	c.Stopped = &now
	d.mu.Lock()
	delete(d.done, id)
	delete(d.pids, id)
	delete(d.prev, id)
	d.mu.Unlock()
	// The process is gone: record that whatever ctx says.
	wctx := context.WithoutCancel(ctx)
	if _, err := s.st.DeleteRecord(wctx, kindDeployment, id); err != nil {
		return nil, err
	}
	if err := s.recordEnded(wctx, c); err != nil && s.log != nil {
		s.log.Warn("recording an ended deployment", "id", id, "err", err)
	}
	s.releaseDeployment(id)
	s.publish("deploy", id, map[string]any{"id": id, "state": "stopped", "model": c.Model, "version": c.Version})
	return &c, nil
}

// DeploymentCounts reports the deployments by state (e.g. {"running": 2});
// nil when the store cannot be read.
func (s *Service) DeploymentCounts() map[string]int {
	ctx, cancel := context.WithTimeout(s.base, 5*time.Second)
	defer cancel()
	list, err := s.Records(ctx)
	if err != nil {
		if s.log != nil {
			s.log.Warn("counting deployments", "err", err)
		}
		return nil
	}
	out := map[string]int{}
	for _, x := range list {
		out[x.State]++
	}
	return out
}
