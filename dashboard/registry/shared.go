package registry

// The shared server: one managed `fw serve --model-repository DIR
// --model-control-mode explicit` child per dashboard that serves many
// registry versions side by side, as Triton and KServe ModelMesh serve many
// models from one runtime. A deployment with target "shared" places the
// version's file into DIR (Triton's layout, DIR/<model>/<version>/model.*,
// a hard link of the registry's file, or a copy) and loads the model
// through Triton's repository API with a configuration whose
// version_policy lists every version of that model deployed there;
// undeploying one reloads the model with the others, or unloads it.
//
// The records are the desired state: the server (kind shared_server, key
// "shared") and one record per deployed version (kind shared_deployment,
// listed with the other deployments). The server is reconciled to them
// when the dashboard adopts it on start, when it is started again, and
// when a replica takes it over (docs/replicas.md).

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fw-serve/fw/dashboard/fault"
	"github.com/fw-serve/fw/dashboard/store"
	"github.com/fw-serve/fw/engine"
)

// Deployment targets (DeployRequest.Target, Deployment.Target).
const (
	TargetProcess = "process" // a `fw serve --model FILE` of its own (the default)
	TargetShared  = "shared"  // a version on the shared server
)

// Shared server states besides DeployRunning and DeployGone.
const SharedStopped = "stopped" // there is none

const (
	kindSharedServer     = "shared_server"
	kindSharedDeployment = "shared_deployment"
	sharedKey            = "shared"
	// SharedLeasePrefix is the lease of the shared server with replicas:
	// its owner runs the process and makes every change to it.
	SharedLeasePrefix = "shared-server/"
	sharedLease       = SharedLeasePrefix + sharedKey
)

// SharedServer is the dashboard's shared model server.
type SharedServer struct {
	// State is running, gone (its process vanished, or could not be
	// started again) or stopped (there is none).
	State       string     `json:"state"`
	Port        int        `json:"port,omitempty"`
	GRPCPort    int        `json:"grpc_port,omitempty"`
	PID         int        `json:"pid,omitempty"`
	URL         string     `json:"url,omitempty"`
	GRPCAddress string     `json:"grpc_address,omitempty"`
	Device      string     `json:"device,omitempty"`
	Repository  string     `json:"repository,omitempty"` // its model repository, under the experiment dir
	Started     *time.Time `json:"started,omitempty"`
	Log         string     `json:"log,omitempty"`
	Replica     string     `json:"replica,omitempty"`
	Host        string     `json:"host,omitempty"`
	Restarts    int        `json:"restarts,omitempty"`
	Error       string     `json:"error,omitempty"`
	// Filled by SharedStatus.
	Healthy  bool            `json:"healthy"`
	Versions []SharedVersion `json:"versions"`
}

// SharedVersion is one model version the shared server knows: its state
// in the server's repository index (READY, LOADING, UNAVAILABLE with the
// reason, such as "unloaded") and the deployment that placed it there.
type SharedVersion struct {
	Model      string `json:"model"`
	Version    int    `json:"version"`
	State      string `json:"state"`
	Reason     string `json:"reason,omitempty"`
	Deployment string `json:"deployment,omitempty"`
}

// SharedRequest is the body of POST /api/shared-server; a shared deploy
// passes its port, grpc_port and device the same way.
type SharedRequest struct {
	Port     int    `json:"port,omitempty"`      // 0: the port it had, else a free one
	GRPCPort int    `json:"grpc_port,omitempty"` // 0: the port it had when free, else a free one
	Device   string `json:"device,omitempty"`    // "": the device it had, else cpu
}

// sharedDoc is a shared deployment as stored: whether the version's
// tensors have a batch axis is kept with it, so the model's configuration
// can be written again after the registry version is gone.
type sharedDoc struct {
	Deployment
	Batched bool `json:"batched"`
}

// sharedProc is what only this process knows about the shared server.
type sharedProc struct {
	mu   sync.Mutex // one change at a time: deploy, undeploy, start, stop, adopt
	done chan struct{}
	pid  int
}

// sharedHTTP talks to the shared server's repository API; a load waits
// for the model's warm-up, bounded by the caller's context.
var sharedHTTP = &http.Client{}

func (s *Service) sharedRecord(ctx context.Context) (*SharedServer, bool, error) {
	rec, err := s.st.GetRecord(ctx, kindSharedServer, sharedKey)
	if store.ErrorCode(err) == store.CodeNotFound {
		return &SharedServer{State: SharedStopped, Versions: []SharedVersion{}}, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	var srv SharedServer
	if err := json.Unmarshal(rec.Body, &srv); err != nil {
		return nil, false, fmt.Errorf("reading the shared server from the store: %w", err)
	}
	srv.Healthy, srv.Versions = false, []SharedVersion{}
	return &srv, true, nil
}

func (s *Service) putShared(ctx context.Context, srv *SharedServer) error {
	c := *srv
	c.Healthy, c.Versions = false, nil
	b, err := json.Marshal(c)
	if err != nil {
		return err
	}
	_, err = s.st.UpdateRecord(ctx, kindSharedServer, sharedKey, func(*store.Record) (json.RawMessage, error) { return b, nil })
	return err
}

// sharedDocs lists the shared deployments, oldest first.
func (s *Service) sharedDocs(ctx context.Context) ([]*sharedDoc, error) {
	recs, err := s.st.ListRecords(ctx, kindSharedDeployment)
	if err != nil {
		return nil, err
	}
	out := make([]*sharedDoc, 0, len(recs))
	for _, rec := range recs {
		var d sharedDoc
		if err := json.Unmarshal(rec.Body, &d); err != nil {
			return nil, fmt.Errorf("reading shared deployment %q from the store: %w", rec.Key, err)
		}
		d.Healthy, d.RequestRate = false, nil
		out = append(out, &d)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Started.Before(out[j].Started) })
	return out, nil
}

func (s *Service) putSharedDoc(ctx context.Context, d *sharedDoc) error {
	c := *d
	c.Healthy, c.RequestRate, c.ModelState, c.Reason = false, nil, "", ""
	c.PID, c.URL, c.Port, c.GRPCPort, c.GRPCAddress, c.Log, c.State = 0, "", 0, 0, "", "", ""
	b, err := json.Marshal(c)
	if err != nil {
		return err
	}
	_, err = s.st.UpdateRecord(ctx, kindSharedDeployment, d.ID, func(*store.Record) (json.RawMessage, error) { return b, nil })
	return err
}

// withServer fills the process fields of a shared deployment from its
// server's record.
func withServer(d Deployment, srv *SharedServer) Deployment {
	d.Target = TargetShared
	d.State, d.Port, d.GRPCPort, d.PID, d.URL, d.GRPCAddress = srv.State, srv.Port, srv.GRPCPort, srv.PID, srv.URL, srv.GRPCAddress
	d.Device, d.Log, d.Replica, d.Host = srv.Device, srv.Log, srv.Replica, srv.Host
	if srv.State == SharedStopped {
		d.State = DeployGone
	}
	if d.Error == "" && srv.State == DeployGone {
		d.Error = "the shared server is gone: " + srv.Error
	}
	return d
}

// sharedDeploymentRecords lists the shared deployments as recorded, with
// their server's process fields.
func (s *Service) sharedDeploymentRecords(ctx context.Context) ([]*Deployment, *SharedServer, error) {
	docs, err := s.sharedDocs(ctx)
	if err != nil || len(docs) == 0 {
		return nil, nil, err
	}
	srv, _, err := s.sharedRecord(ctx)
	if err != nil {
		return nil, nil, err
	}
	out := make([]*Deployment, len(docs))
	for i, d := range docs {
		x := withServer(d.Deployment, srv)
		out[i] = &x
	}
	return out, srv, nil
}

// sharedRepoDir is the shared server's model repository on this host:
// serving/shared under the experiment dir (serving/shared-<host> with
// replicas, whose experiment dir may be shared storage).
func (s *Service) sharedRepoDir() string {
	name := "shared"
	if h := s.host(); h != "" {
		name += "-" + regexp.MustCompile(`[^A-Za-z0-9.-]`).ReplaceAllString(h, "-")
	}
	return filepath.Join(s.cfg.ExperimentDir, "serving", name)
}

// repoFileName is a version's file name in the repository: Triton's
// default names, which fw finds without a default_model_filename.
func repoFileName(format string) string {
	switch format {
	case string(engine.FormatONNX), string(engine.FormatONNXInt8):
		return "model.onnx"
	case string(engine.FormatAOTI):
		return "model.pt2"
	}
	return "model.pt"
}

// versionDir is dir/<name>/<version>; name must be a valid registry name
// (no separator, no leading dot), so the path stays inside dir.
func versionDir(dir, name string, version int) (string, error) {
	if err := ValidName("model name", name); err != nil {
		return "", err
	}
	if version < 1 {
		return "", invalid("version %d is not a version number", version)
	}
	rel := filepath.Join(name, strconv.Itoa(version))
	if !filepath.IsLocal(rel) {
		return "", invalid("model %q version %d does not name a directory inside the repository", name, version)
	}
	return filepath.Join(dir, rel), nil
}

// placeVersion puts v's file at dir/<name>/<version>/model.<ext>: a hard
// link of the registry's file (its local copy for a bucket), or a copy
// where linking is not possible. The version directory is written afresh.
func (s *Service) placeVersion(ctx context.Context, dir, name string, v *Version) error {
	vdir, err := versionDir(dir, name, v.Version)
	if err != nil {
		return err
	}
	if !v.Servable() {
		return invalid("model %q version %d (format %s) is not a file fw serve loads; export it or register a file first", name, v.Version, v.Format)
	}
	src, err := s.Reg.ModelFile(ctx, v)
	if err != nil {
		return err
	}
	if err := os.RemoveAll(vdir); err != nil {
		return err
	}
	if err := os.MkdirAll(vdir, 0o755); err != nil {
		return err
	}
	tmp := filepath.Join(vdir, ".placing") // hidden: fw serve never takes it for the model
	if err := os.Link(src, tmp); err != nil {
		if err := copyFile(src, tmp); err != nil {
			return fmt.Errorf("placing %s version %d in the shared repository: %w", name, v.Version, err)
		}
	}
	return os.Rename(tmp, filepath.Join(vdir, repoFileName(v.Format)))
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// removeVersion takes a version out of the repository, and its model's
// directory when no version is left.
func removeVersion(dir, name string, version int) {
	vdir, err := versionDir(dir, name, version)
	if err != nil {
		return
	}
	_ = os.RemoveAll(vdir)
	mdir := filepath.Dir(vdir)
	if entries, err := os.ReadDir(mdir); err == nil && len(entries) == 0 {
		_ = os.Remove(mdir)
	}
}

// batched reports whether every input and output of v has a variable first
// axis (a batch axis the server may join requests on).
func batched(v *Version) bool {
	specs := append(slices.Clone(v.Inputs), v.Outputs...)
	for _, sp := range specs {
		if len(sp.Shape) == 0 || sp.Shape[0] >= 0 {
			return false
		}
	}
	return len(specs) > 0
}

// modelConfig is the configuration a model is loaded with on the shared
// server: its deployed versions (version_policy specific) and, when every
// one has a batch axis, the batching of its deployments (the fw serve
// defaults when they set none: 64 rows, 1 ms).
func modelConfig(docs []*sharedDoc) ([]byte, error) {
	versions := make([]int, 0, len(docs))
	all := len(docs) > 0
	for _, d := range docs {
		versions = append(versions, d.Version)
		all = all && d.Batched
	}
	sort.Ints(versions)
	cfg := map[string]any{"version_policy": map[string]any{"specific": map[string]any{"versions": versions}}}
	if all {
		mbs, delayUS := 64, 1000
		if d := docs[0]; d.MaxBatchSize > 0 {
			mbs = d.MaxBatchSize
		}
		if d := docs[0]; d.MaxDelayMS != nil {
			delayUS = *d.MaxDelayMS * 1000
		}
		cfg["max_batch_size"] = mbs
		cfg["dynamic_batching"] = map[string]any{"max_queue_delay_microseconds": delayUS}
		// fw serve's batching, as a deployment of its own gets: an idle
		// engine never waits (a repository's default is Triton's holding).
		cfg["parameters"] = map[string]any{"fw_hold_when_idle": map[string]any{"string_value": "false"}}
	} else {
		cfg["max_batch_size"] = 0
	}
	return json.Marshal(cfg)
}

// repositoryCall posts to the shared server's repository API (path under
// /v2/repository) and decodes a 200 answer into out; another status is an
// error with the server's message.
func repositoryCall(ctx context.Context, base, path string, body any, out any) error {
	b, err := json.Marshal(body)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, "POST", base+"/v2/repository"+path, bytes.NewReader(b))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := sharedHTTP.Do(req)
	if err != nil {
		return fault.New(fault.Unavailable, "unavailable", fmt.Sprintf("the shared server at %s did not answer POST /v2/repository%s: %v", base, path, err))
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode != 200 {
		var e struct {
			Error json.RawMessage `json:"error"`
		}
		msg := strings.TrimSpace(string(raw))
		if json.Unmarshal(raw, &e) == nil && len(e.Error) > 0 {
			var str string
			if json.Unmarshal(e.Error, &str) == nil {
				msg = str
			}
		}
		return fault.New(fault.Unprocessable, "deploy_failed", fmt.Sprintf("the shared server answered POST /v2/repository%s with %d: %s", path, resp.StatusCode, msg))
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(raw, out)
}

// loadModel loads (or reloads) model name on srv with the versions of docs,
// or unloads it when docs is empty; a load (the versions' warm-up) is
// bounded by the deployments' ready timeout.
func (s *Service) loadModel(ctx context.Context, srv *SharedServer, name string, docs []*sharedDoc) error {
	if err := ValidName("model name", name); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.ReadyTimeout)
	defer cancel()
	path := "/models/" + url.PathEscape(name)
	if len(docs) == 0 {
		return repositoryCall(ctx, srv.URL, path+"/unload", map[string]any{}, nil)
	}
	cfg, err := modelConfig(docs)
	if err != nil {
		return err
	}
	return repositoryCall(ctx, srv.URL, path+"/load", map[string]any{"parameters": map[string]any{"config": string(cfg)}}, nil)
}

// indexEntry is one row of Triton's repository index.
type indexEntry struct {
	Name    string `json:"name"`
	Version string `json:"version"`
	State   string `json:"state"`
	Reason  string `json:"reason"`
}

// indexTimeout bounds a read of the shared server's repository index (on
// the path of GET /api/deployments).
const indexTimeout = 5 * time.Second

func repositoryIndex(ctx context.Context, srv *SharedServer) ([]indexEntry, error) {
	ctx, cancel := context.WithTimeout(ctx, indexTimeout)
	defer cancel()
	var out []indexEntry
	err := repositoryCall(ctx, srv.URL, "/index", map[string]any{}, &out)
	return out, err
}

// ownShared makes sure this replica may act on the shared server (see
// ownDeployment).
func (s *Service) ownShared(ctx context.Context) error {
	return s.ownLease(ctx, sharedLease)
}

func (s *Service) releaseShared() {
	if s.cfg.Member == nil {
		return
	}
	if err := s.cfg.Member.Release(context.WithoutCancel(s.base), sharedLease); err != nil && s.log != nil {
		s.log.Warn("releasing the shared server's lease", "err", err)
	}
}

// sharedAnswers reports whether srv's process runs here and answers.
func (s *Service) sharedAnswers(srv *SharedServer) bool {
	return srv.State == DeployRunning && s.localHost(srv.Host) && srv.PID > 0 && alive(srv.PID) && probe(srv.URL+"/v2/health/live")
}

// portUsers names the running deployments and the shared server by the
// ports they hold.
func (s *Service) portUsers(ctx context.Context) (map[int]string, error) {
	out := map[int]string{}
	list, err := s.listDeployments(ctx, kindDeployment)
	if err != nil {
		return nil, err
	}
	for _, x := range list {
		if x.State == DeployRunning {
			who := fmt.Sprintf("deployment %s (%s version %d); choose another port or DELETE /api/deployments/%s", x.ID, x.Model, x.Version, x.ID)
			out[x.Port], out[x.GRPCPort] = who, who
		}
	}
	srv, ok, err := s.sharedRecord(ctx)
	if err != nil {
		return nil, err
	}
	if ok && srv.State == DeployRunning {
		who := "the shared server (GET /api/shared-server); deploy with \"target\": \"shared\" to serve there, or choose another port"
		out[srv.Port], out[srv.GRPCPort] = who, who
	}
	delete(out, 0)
	return out, nil
}

// StartShared starts the shared server (or answers the running one when
// req agrees with it: started is false).
func (s *Service) StartShared(ctx context.Context, req SharedRequest) (srv *SharedServer, started bool, err error) {
	if err := checkSharedRequest(req); err != nil {
		return nil, false, err
	}
	s.sh.mu.Lock()
	defer s.sh.mu.Unlock()
	return s.ensureShared(ctx, req)
}

func checkSharedRequest(req SharedRequest) error {
	if req.Port < 0 || req.Port > 65535 {
		return invalid("port %d must be within 1..65535, or 0 (or absent) for the shared server's own or a free one", req.Port)
	}
	if req.GRPCPort < 0 || req.GRPCPort > 65535 || (req.GRPCPort != 0 && req.GRPCPort == req.Port) {
		return invalid("grpc_port %d must be within 1..65535 and differ from port, or 0 (or absent) to pick a free one", req.GRPCPort)
	}
	if req.Device != "" && req.Device != "cpu" && req.Device != "cuda" && !strings.HasPrefix(req.Device, "cuda:") {
		return invalid("device %q is not cpu, cuda or cuda:N", req.Device)
	}
	return nil
}

// ensureShared returns the running shared server, starting it (again)
// when there is none or its process is gone; s.sh.mu is held.
func (s *Service) ensureShared(ctx context.Context, req SharedRequest) (*SharedServer, bool, error) {
	if err := s.ownShared(ctx); err != nil {
		return nil, false, err
	}
	srv, ok, err := s.sharedRecord(ctx)
	if err != nil {
		return nil, false, err
	}
	if ok && s.sharedAnswers(srv) {
		switch {
		case req.Port != 0 && req.Port != srv.Port:
			return nil, false, conflict("the shared server listens on port %d, not %d; leave port out, or DELETE /api/shared-server first", srv.Port, req.Port)
		case req.GRPCPort != 0 && req.GRPCPort != srv.GRPCPort:
			return nil, false, conflict("the shared server's gRPC port is %d, not %d; leave grpc_port out, or DELETE /api/shared-server first", srv.GRPCPort, req.GRPCPort)
		case req.Device != "" && req.Device != srv.Device:
			return nil, false, conflict("the shared server runs on %s, not %s; leave device out, or DELETE /api/shared-server first", srv.Device, req.Device)
		}
		return srv, false, nil
	}
	var prev *SharedServer
	if ok {
		prev = srv
	}
	srv, err = s.startShared(ctx, req, prev)
	if err != nil {
		if !ok {
			s.releaseShared() // nothing of it is left to own
		}
		return nil, false, err
	}
	return srv, true, nil
}

// startShared starts `fw serve --model-repository` (prev: the record of a
// server that is gone, whose port, gRPC port and device it keeps unless
// req says otherwise), places and loads every recorded shared deployment,
// and records it. s.sh.mu and the lease are held.
func (s *Service) startShared(ctx context.Context, req SharedRequest, prev *SharedServer) (*SharedServer, error) {
	srv := &SharedServer{Port: req.Port, GRPCPort: req.GRPCPort, Device: req.Device, Repository: s.sharedRepoDir()}
	if prev != nil {
		srv.Restarts = prev.Restarts
		if prev.PID > 0 {
			srv.Restarts++
		}
		if srv.Port == 0 {
			srv.Port = prev.Port
		}
		if srv.GRPCPort == 0 {
			if _, err := pickPort(prev.GRPCPort); err == nil {
				srv.GRPCPort = prev.GRPCPort
			}
		}
		if srv.Device == "" {
			srv.Device = prev.Device
		}
	}
	if srv.Device == "" {
		srv.Device = "cpu"
	}
	users, err := s.portUsers(ctx)
	if err != nil {
		return nil, err
	}
	for _, p := range []int{srv.Port, srv.GRPCPort} {
		if who, ok := users[p]; ok && p != 0 && (prev == nil || prev.State != DeployRunning || (p != prev.Port && p != prev.GRPCPort)) {
			return nil, conflict("port %d is already used by %s", p, who)
		}
	}
	if srv.Port == 0 {
		if srv.Port, err = pickPort(0); err != nil {
			return nil, err
		}
	} else if _, err := pickPort(srv.Port); err != nil {
		return nil, conflict("port %d on 127.0.0.1 is in use by another process; choose another port for the shared server", srv.Port)
	}
	docs, err := s.sharedDocs(ctx)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(srv.Repository, 0o755); err != nil {
		return nil, err
	}
	placed := s.syncRepository(ctx, srv.Repository, docs)
	c, err := s.spawn(ctx, "shared-server", srv.Port, srv.GRPCPort, srv.Device,
		[]string{"--model-repository", srv.Repository, "--model-control-mode", "explicit"}, "/v2/health/ready")
	if err != nil {
		return nil, err
	}
	started := c.started
	srv.State, srv.PID, srv.URL, srv.GRPCPort, srv.GRPCAddress, srv.Started, srv.Log = DeployRunning, c.pid, c.url, c.grpcPort, c.grpcAddress, &started, c.log
	srv.Replica, srv.Host = s.self(), s.host()
	if err := s.putShared(ctx, srv); err != nil {
		_ = signalGroup(c.pid, sigKill)
		<-c.done
		return nil, err
	}
	s.sh.done, s.sh.pid = c.done, c.pid
	s.loadAll(ctx, srv, placed)
	if s.log != nil {
		s.log.Info("shared server started", "url", srv.URL, "pid", srv.PID, "repository", srv.Repository, "versions", len(placed))
	}
	s.publish("deploy", sharedKey, map[string]any{"id": sharedKey, "state": DeployRunning, "url": srv.URL, "target": TargetShared})
	return srv, nil
}

// syncRepository makes dir hold exactly the versions of docs, placing the
// missing ones from the registry; it returns the docs whose file is there.
// A version that cannot be placed (deleted from the registry since) is
// left out, the reason in its record.
func (s *Service) syncRepository(ctx context.Context, dir string, docs []*sharedDoc) []*sharedDoc {
	want := map[string]bool{}
	var placed []*sharedDoc
	for _, d := range docs {
		vdir, err := versionDir(dir, d.Model, d.Version)
		if err != nil {
			continue
		}
		want[vdir] = true
		if entries, err := os.ReadDir(vdir); err == nil && slices.ContainsFunc(entries, func(e os.DirEntry) bool { return strings.HasPrefix(e.Name(), "model.") }) {
			placed = append(placed, d)
			continue
		}
		v, err := s.Reg.Resolve(ctx, d.Model, strconv.Itoa(d.Version))
		if err == nil {
			err = s.placeVersion(ctx, dir, d.Model, v)
		}
		if err != nil {
			d.Error = "its file could not be placed in the shared server's repository: " + err.Error()
			if perr := s.putSharedDoc(ctx, d); perr != nil && s.log != nil {
				s.log.Warn("recording a shared deployment's error", "id", d.ID, "err", perr)
			}
			continue
		}
		placed = append(placed, d)
	}
	models, _ := os.ReadDir(dir)
	for _, m := range models {
		versions, _ := os.ReadDir(filepath.Join(dir, m.Name()))
		for _, v := range versions {
			if p := filepath.Join(dir, m.Name(), v.Name()); !want[p] {
				_ = os.RemoveAll(p)
			}
		}
		if left, err := os.ReadDir(filepath.Join(dir, m.Name())); err == nil && len(left) == 0 {
			_ = os.Remove(filepath.Join(dir, m.Name()))
		}
	}
	return placed
}

// byModel groups docs by model name.
func byModel(docs []*sharedDoc) map[string][]*sharedDoc {
	out := map[string][]*sharedDoc{}
	for _, d := range docs {
		out[d.Model] = append(out[d.Model], d)
	}
	return out
}

// loadAll loads every model of docs on srv; a model that fails to load is
// logged (its versions show the reason in the index).
func (s *Service) loadAll(ctx context.Context, srv *SharedServer, docs []*sharedDoc) {
	for name, list := range byModel(docs) {
		if err := s.loadModel(ctx, srv, name, list); err != nil && s.log != nil {
			s.log.Error("shared server: loading a model", "model", name, "err", err)
		}
	}
}

// reconcile brings an adopted server in line with the records: a model
// whose READY versions are not exactly its deployed ones is loaded again
// (or unloaded when none is deployed).
func (s *Service) reconcile(ctx context.Context, srv *SharedServer) {
	docs, err := s.sharedDocs(ctx)
	if err != nil {
		return
	}
	idx, err := repositoryIndex(ctx, srv)
	if err != nil {
		if s.log != nil {
			s.log.Warn("shared server: reading its repository index", "err", err)
		}
		return
	}
	ready := map[string][]int{}
	for _, e := range idx {
		if v, err := strconv.Atoi(e.Version); err == nil && e.State == "READY" {
			ready[e.Name] = append(ready[e.Name], v)
		}
	}
	want := byModel(s.syncRepository(ctx, srv.Repository, docs))
	for name, list := range want {
		var vs []int
		for _, d := range list {
			vs = append(vs, d.Version)
		}
		sort.Ints(vs)
		got := ready[name]
		sort.Ints(got)
		if !slices.Equal(vs, got) {
			if err := s.loadModel(ctx, srv, name, list); err != nil && s.log != nil {
				s.log.Error("shared server: loading a model", "model", name, "err", err)
			}
		}
	}
	for name := range ready {
		if _, ok := want[name]; !ok {
			_ = s.loadModel(ctx, srv, name, nil)
		}
	}
}

// deployShared deploys version v of model name to the shared server,
// starting it when there is none.
func (s *Service) deployShared(ctx context.Context, name string, v *Version, req DeployRequest) (*Deployment, error) {
	if err := checkSharedRequest(SharedRequest{Port: req.Port, GRPCPort: req.GRPCPort, Device: req.Device}); err != nil {
		return nil, err
	}
	s.sh.mu.Lock()
	defer s.sh.mu.Unlock()
	if err := s.ownShared(ctx); err != nil {
		return nil, err
	}
	docs, err := s.sharedDocs(ctx)
	if err != nil {
		return nil, err
	}
	same := byModel(docs)[name]
	for _, d := range same {
		if d.Version == v.Version {
			return nil, conflict("model %q version %d is already on the shared server as deployment %s; DELETE /api/deployments/%s first to deploy it again", name, v.Version, d.ID, d.ID)
		}
	}
	mbs, delay := req.MaxBatchSize, req.MaxDelayMS
	if len(same) > 0 {
		cur := same[0]
		if (mbs != 0 && mbs != cur.MaxBatchSize) || (delay != nil && (cur.MaxDelayMS == nil || *delay != *cur.MaxDelayMS)) {
			return nil, conflict("model %q is on the shared server with max_batch_size %d and max_delay_ms %s (deployment %s): one configuration serves all its versions there; deploy with the same values or leave them out",
				name, cur.MaxBatchSize, fmtDelay(cur.MaxDelayMS), cur.ID)
		}
		mbs, delay = cur.MaxBatchSize, cur.MaxDelayMS
	}
	srv, _, err := s.ensureShared(ctx, SharedRequest{Port: req.Port, GRPCPort: req.GRPCPort, Device: req.Device})
	if err != nil {
		return nil, err
	}
	if err := s.placeVersion(ctx, srv.Repository, name, v); err != nil {
		return nil, err
	}
	doc := &sharedDoc{Deployment: Deployment{ID: "dep-" + store.NewID(), Target: TargetShared, Model: name, Version: v.Version,
		MaxBatchSize: mbs, MaxDelayMS: delay, Started: time.Now().UTC()}, Batched: batched(v)}
	s.publish("deploy", doc.ID, map[string]any{"id": doc.ID, "state": "starting", "model": name, "version": v.Version, "url": srv.URL, "target": TargetShared})
	if err := s.loadModel(ctx, srv, name, append(slices.Clone(same), doc)); err != nil {
		removeVersion(srv.Repository, name, v.Version)
		return nil, err
	}
	if err := s.putSharedDoc(ctx, doc); err != nil {
		_ = s.loadModel(context.WithoutCancel(ctx), srv, name, same) // as it was
		removeVersion(srv.Repository, name, v.Version)
		return nil, err
	}
	d := withServer(doc.Deployment, srv)
	d.Healthy, d.ModelState = true, "READY"
	s.publish("deploy", d.ID, map[string]any{"id": d.ID, "state": DeployRunning, "model": name, "version": v.Version, "url": d.URL, "target": TargetShared})
	return &d, nil
}

func fmtDelay(ms *int) string {
	if ms == nil {
		return "unset"
	}
	return strconv.Itoa(*ms)
}

// sharedDoc returns one shared deployment; false when there is none.
func (s *Service) sharedDoc(ctx context.Context, id string) (*sharedDoc, bool, error) {
	if store.ValidateKey(id) != nil {
		return nil, false, nil
	}
	rec, err := s.st.GetRecord(ctx, kindSharedDeployment, id)
	if store.ErrorCode(err) == store.CodeNotFound {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	var d sharedDoc
	if err := json.Unmarshal(rec.Body, &d); err != nil {
		return nil, false, err
	}
	return &d, true, nil
}

// undeployShared takes shared deployment id off the shared server: its
// model is loaded again with its other versions there, or unloaded when it
// was the last; the server keeps running (DELETE /api/shared-server stops it).
func (s *Service) undeployShared(ctx context.Context, id string) (*Deployment, error) {
	s.sh.mu.Lock()
	defer s.sh.mu.Unlock()
	doc, ok, err := s.sharedDoc(ctx, id)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, notFound("no deployment %s; GET /api/deployments lists them", id)
	}
	if err := s.ownShared(ctx); err != nil {
		return nil, err
	}
	srv, _, err := s.sharedRecord(ctx)
	if err != nil {
		return nil, err
	}
	docs, err := s.sharedDocs(ctx)
	if err != nil {
		return nil, err
	}
	var rest []*sharedDoc
	for _, d := range byModel(docs)[doc.Model] {
		if d.ID != id {
			rest = append(rest, d)
		}
	}
	if s.sharedAnswers(srv) {
		if err := s.loadModel(ctx, srv, doc.Model, rest); err != nil {
			return nil, err
		}
	}
	wctx := context.WithoutCancel(ctx)
	if _, err := s.st.DeleteRecord(wctx, kindSharedDeployment, id); err != nil {
		return nil, err
	}
	if srv.Repository != "" && s.localHost(srv.Host) {
		removeVersion(srv.Repository, doc.Model, doc.Version)
	}
	c := withServer(doc.Deployment, srv)
	c.State, c.Error = "stopped", ""
	now := time.Now().UTC()
	c.Stopped = &now
	if err := s.recordEnded(wctx, c); err != nil && s.log != nil {
		s.log.Warn("recording an ended deployment", "id", id, "err", err)
	}
	s.publish("deploy", id, map[string]any{"id": id, "state": "stopped", "model": c.Model, "version": c.Version, "target": TargetShared})
	return &c, nil
}

// StopShared stops the shared server (SIGTERM, SIGKILL after the grace
// period) and ends every deployment on it.
func (s *Service) StopShared(ctx context.Context) (*SharedServer, error) {
	s.sh.mu.Lock()
	defer s.sh.mu.Unlock()
	srv, ok, err := s.sharedRecord(ctx)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, notFound("no shared server is running; a deploy with \"target\": \"shared\" or POST /api/shared-server starts it")
	}
	if err := s.ownShared(ctx); err != nil {
		return nil, err
	}
	if srv.State == DeployRunning && s.localHost(srv.Host) && alive(srv.PID) {
		s.terminate(ctx, srv.PID, s.sh.done)
	}
	s.sh.done, s.sh.pid = nil, 0
	wctx := context.WithoutCancel(ctx)
	docs, err := s.sharedDocs(wctx)
	if err != nil {
		return nil, err
	}
	now := time.Now().UTC()
	for _, d := range docs {
		c := withServer(d.Deployment, srv)
		c.State, c.Stopped = "stopped", &now
		if _, err := s.st.DeleteRecord(wctx, kindSharedDeployment, d.ID); err != nil {
			return nil, err
		}
		if err := s.recordEnded(wctx, c); err != nil && s.log != nil {
			s.log.Warn("recording an ended deployment", "id", d.ID, "err", err)
		}
		s.publish("deploy", d.ID, map[string]any{"id": d.ID, "state": "stopped", "model": d.Model, "version": d.Version, "target": TargetShared})
	}
	if _, err := s.st.DeleteRecord(wctx, kindSharedServer, sharedKey); err != nil {
		return nil, err
	}
	if srv.Repository != "" && s.localHost(srv.Host) {
		_ = os.RemoveAll(srv.Repository)
	}
	s.releaseShared()
	s.publish("deploy", sharedKey, map[string]any{"id": sharedKey, "state": "stopped", "target": TargetShared})
	srv.State = SharedStopped
	return srv, nil
}

// terminate stops a process group: SIGTERM, then SIGKILL after the grace
// period. done, when this process started it, is closed when it exits.
func (s *Service) terminate(ctx context.Context, pid int, done chan struct{}) {
	_ = signalGroup(pid, sigTerm)
	exited := func() bool {
		if done != nil {
			select {
			case <-done:
				return true
			default:
				return false
			}
		}
		return !alive(pid)
	}
	deadline := time.Now().Add(s.cfg.StopGrace)
	for !exited() && time.Now().Before(deadline) && ctx.Err() == nil {
		time.Sleep(50 * time.Millisecond)
	}
	if !exited() {
		_ = signalGroup(pid, sigKill)
		if done != nil {
			<-done
		}
	}
}

// SharedStatus answers GET /api/shared-server: the server as recorded,
// whether it is ready, and every version its repository index lists (with
// the deployment that placed it), plus recorded versions it does not list.
func (s *Service) SharedStatus(ctx context.Context) (*SharedServer, error) {
	srv, _, err := s.sharedRecord(ctx)
	if err != nil {
		return nil, err
	}
	docs, err := s.sharedDocs(ctx)
	if err != nil {
		return nil, err
	}
	s.checkSharedAlive(ctx, srv)
	listed := map[string]bool{}
	if srv.State == DeployRunning && s.localHost(srv.Host) {
		srv.Healthy = probe(srv.URL + "/v2/health/ready")
		if idx, err := repositoryIndex(ctx, srv); err == nil {
			byVersion := map[string]string{}
			for _, d := range docs {
				byVersion[d.Model+"/"+strconv.Itoa(d.Version)] = d.ID
			}
			for _, e := range idx {
				v, err := strconv.Atoi(e.Version)
				if err != nil {
					continue // a model directory never loaded
				}
				key := e.Name + "/" + e.Version
				listed[key] = true
				srv.Versions = append(srv.Versions, SharedVersion{Model: e.Name, Version: v, State: e.State, Reason: e.Reason, Deployment: byVersion[key]})
			}
		} else {
			srv.Healthy = false
		}
	}
	for _, d := range docs {
		if !listed[d.Model+"/"+strconv.Itoa(d.Version)] {
			why := "not loaded"
			if srv.State != DeployRunning {
				why = "the shared server is " + srv.State
			}
			if d.Error != "" {
				why = d.Error
			}
			srv.Versions = append(srv.Versions, SharedVersion{Model: d.Model, Version: d.Version, State: "UNAVAILABLE", Reason: why, Deployment: d.ID})
		}
	}
	return srv, nil
}

// checkSharedAlive marks a running shared server of this host whose
// process is gone.
func (s *Service) checkSharedAlive(ctx context.Context, srv *SharedServer) {
	if srv.State != DeployRunning || !s.localHost(srv.Host) || alive(srv.PID) {
		return
	}
	srv.State, srv.Error = DeployGone, "its fw serve process exited; POST /api/shared-server (or a deploy with \"target\": \"shared\") starts it again with every version deployed there"
	_, err := s.st.UpdateRecord(ctx, kindSharedServer, sharedKey, func(cur *store.Record) (json.RawMessage, error) {
		if cur == nil {
			return nil, store.ErrKeep
		}
		var x SharedServer
		if err := json.Unmarshal(cur.Body, &x); err != nil || x.State != DeployRunning || x.PID != srv.PID {
			return nil, store.ErrKeep
		}
		x.State, x.Error = srv.State, srv.Error
		return json.Marshal(x)
	})
	if err != nil && s.log != nil {
		s.log.Warn("marking the shared server gone", "err", err)
	}
}

// sharedDeployments fills the health of the shared deployments: READY in
// the server's index.
func (s *Service) sharedDeployments(ctx context.Context, list []*Deployment, srv *SharedServer) {
	if srv == nil || len(list) == 0 {
		return
	}
	s.checkSharedAlive(ctx, srv)
	if srv.State != DeployRunning || !s.localHost(srv.Host) {
		for _, d := range list {
			*d = withServer(*d, srv)
		}
		return
	}
	idx, err := repositoryIndex(ctx, srv)
	state := map[string]indexEntry{}
	if err == nil {
		for _, e := range idx {
			state[e.Name+"/"+e.Version] = e
		}
	}
	for _, d := range list {
		e, ok := state[d.Model+"/"+strconv.Itoa(d.Version)]
		if !ok {
			d.ModelState, d.Reason = "UNAVAILABLE", "not loaded"
			continue
		}
		d.ModelState, d.Reason = e.State, e.Reason
		d.Healthy = e.State == "READY"
	}
}

// loadShared checks the recorded shared server on start: adopted (and
// brought in line with the records) when its process answers, else
// marked gone; with replicas, one that no replica owns is taken over.
func (s *Service) loadShared(ctx context.Context) error {
	s.sh.mu.Lock()
	defer s.sh.mu.Unlock()
	srv, ok, err := s.sharedRecord(ctx)
	if err != nil || !ok || srv.State != DeployRunning {
		return err
	}
	if s.cfg.Member != nil {
		if _, _, held, err := s.cfg.Member.Owner(ctx, sharedLease); err != nil || held {
			return err // the sweep takes over from a stopped owner
		}
		if _, ok, err := s.cfg.Member.Claim(ctx, sharedLease); err != nil || !ok {
			return err
		}
		return s.adoptOrRestartShared(ctx, srv, "the dashboard that started it is gone")
	}
	if s.sharedAnswers(srv) {
		s.sh.pid = srv.PID
		s.reconcile(ctx, srv)
		if s.log != nil {
			s.log.Info("shared server re-adopted", "url", srv.URL, "pid", srv.PID)
		}
		return nil
	}
	if s.log != nil {
		s.log.Warn("shared server gone", "pid", srv.PID, "url", srv.URL)
	}
	srv.State, srv.Error = DeployGone, "its fw serve process was gone when the dashboard started; POST /api/shared-server (or a deploy with \"target\": \"shared\") starts it again with every version deployed there"
	return s.putShared(ctx, srv)
}

// adoptOrRestartShared makes this replica the shared server's owner (its
// lease held; s.sh.mu held): adopted when its process runs on this host and
// answers, else started again here with every recorded version.
func (s *Service) adoptOrRestartShared(ctx context.Context, srv *SharedServer, why string) error {
	if s.sharedAnswers(srv) {
		srv.Replica, srv.Host = s.self(), s.host()
		if err := s.putShared(ctx, srv); err != nil {
			return err
		}
		s.sh.pid = srv.PID
		s.reconcile(ctx, srv)
		if s.log != nil {
			s.log.Info("shared server adopted", "pid", srv.PID, "url", srv.URL, "why", why)
		}
		return nil
	}
	if _, err := s.startShared(ctx, SharedRequest{}, srv); err != nil {
		msg := fmt.Sprintf("%s and its fw serve process does not answer here; starting it again failed: %v", why, err)
		if s.log != nil {
			s.log.Error("shared server gone", "err", msg)
		}
		srv.State, srv.Error, srv.Replica, srv.Host = DeployGone, msg, s.self(), s.host()
		if perr := s.putShared(ctx, srv); perr != nil {
			return perr
		}
		s.releaseShared()
		return nil
	}
	if s.log != nil {
		s.log.Warn("shared server started again", "why", why)
	}
	return nil
}

// lostShared: another replica took the shared server's lease. If it
// adopted this process's child, the child is its now; else it is stopped.
func (s *Service) lostShared(string) {
	s.sh.mu.Lock()
	pid, done := s.sh.pid, s.sh.done
	s.sh.pid, s.sh.done = 0, nil
	s.sh.mu.Unlock()
	if pid == 0 || !alive(pid) {
		return
	}
	if done != nil {
		select {
		case <-done:
			return
		default:
		}
	}
	ctx, cancel := context.WithTimeout(s.base, 10*time.Second)
	defer cancel()
	srv, ok, err := s.sharedRecord(ctx)
	if err != nil {
		return // cannot tell: leave it alone
	}
	if ok && srv.State == DeployRunning && srv.Host == s.host() && srv.PID == pid {
		return // adopted
	}
	if s.log != nil {
		s.log.Warn("stopping a shared server another replica replaced", "pid", pid)
	}
	_ = signalGroup(pid, sigTerm)
}
