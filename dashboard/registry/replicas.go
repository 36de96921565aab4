package registry

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/fw-serve/fw/dashboard/replica"
	"github.com/fw-serve/fw/dashboard/store"
)

// Lease prefixes of the registry's things (replica.Member leases).
const (
	DeploymentLeasePrefix = "deployment/"
	ExportLeasePrefix     = "export/"
)

// Deployments and exports with replicas (Config.Member set; see
// docs/replicas.md). A deployment belongs to the replica that started it:
// it holds the lease "deployment/<id>" and is the one that probes, stops
// and restarts it. When that replica stops, the replica that takes the
// lease over adopts the `fw serve` child if it runs on its own host and
// still answers /health, and otherwise starts it again (same model
// version, same port, a new process) from the model file on the shared
// storage. An export belongs to the replica that runs its exporter
// process ("export/<id>"); one whose replica stopped is failed, since the
// exporter died with it.

// self is this replica's ID ("" without replicas).
func (s *Service) self() string {
	if s.cfg.Member == nil {
		return ""
	}
	return s.cfg.Member.Self().ID
}

// host is this replica's host name ("" without replicas).
func (s *Service) host() string {
	if s.cfg.Member == nil {
		return ""
	}
	return s.cfg.Member.Self().Host
}

// local reports whether d's process runs on this machine (so its pid means
// something here).
func (s *Service) local(d *Deployment) bool {
	return s.localHost(d.Host)
}

// localHost reports whether a process recorded on host runs on this machine.
func (s *Service) localHost(host string) bool {
	return host == "" || host == s.host()
}

// registerLeases hands the takeover of deployments and exports to s.
func (s *Service) registerLeases() {
	m := s.cfg.Member
	m.Handle(DeploymentLeasePrefix, replica.Handler{Takeover: s.takeoverDeployment, Lost: s.lostDeployment})
	m.Handle(ExportLeasePrefix, replica.Handler{Takeover: s.takeoverExport})
	m.Handle(SharedLeasePrefix, replica.Handler{Takeover: s.takeoverShared, Lost: s.lostShared})
}

// claimDeployment takes the lease of a new deployment for this replica
// and records the owner in dep.
func (s *Service) claimDeployment(ctx context.Context, dep *Deployment) error {
	if s.cfg.Member == nil {
		return nil
	}
	dep.Replica, dep.Host = s.self(), s.host()
	if _, ok, err := s.cfg.Member.Claim(ctx, DeploymentLeasePrefix+dep.ID); err != nil || !ok {
		return fmt.Errorf("taking the lease of deployment %s: %w", dep.ID, errors.Join(err, errors.New("held by another replica")))
	}
	return nil
}

func (s *Service) releaseDeployment(id string) {
	if s.cfg.Member == nil {
		return
	}
	if err := s.cfg.Member.Release(context.WithoutCancel(s.base), DeploymentLeasePrefix+id); err != nil && s.log != nil {
		s.log.Warn("releasing a deployment's lease", "id", id, "err", err)
	}
}

// ownDeployment makes sure this replica may act on deployment id: it holds
// its lease, or takes it from a replica that stopped. A deployment of
// another live replica is a *replica.NotOwnerError (the API forwards).
func (s *Service) ownDeployment(ctx context.Context, id string) error {
	return s.ownLease(ctx, DeploymentLeasePrefix+id)
}

// ownLease makes sure this replica holds lease name: held already, free,
// or taken from a replica that stopped; a live replica's is a
// *replica.NotOwnerError.
func (s *Service) ownLease(ctx context.Context, name string) error {
	if s.cfg.Member == nil {
		return nil
	}
	owner, ok, err := s.cfg.Member.Claim(ctx, name)
	if err != nil {
		return err
	}
	if !ok {
		return &replica.NotOwnerError{Name: name, Owner: owner}
	}
	return nil
}

// takeoverShared brings the shared server of a stopped replica under this
// one: adopted when its process runs here and answers, else started again
// here with every version deployed on it.
func (s *Service) takeoverShared(ctx context.Context, _ store.Lease, prev replica.Info) error {
	s.sh.mu.Lock()
	defer s.sh.mu.Unlock()
	srv, ok, err := s.sharedRecord(ctx)
	if err != nil {
		return err
	}
	if !ok || srv.State != DeployRunning {
		s.releaseShared() // stopped or gone: nothing to own
		return nil
	}
	return s.adoptOrRestartShared(ctx, srv, "its replica "+prev.ID+" stopped")
}

// takeoverDeployment brings the deployment of a stopped replica under this
// one: adopted when its process runs here and answers, else started again.
func (s *Service) takeoverDeployment(ctx context.Context, l store.Lease, prev replica.Info) error {
	id := strings.TrimPrefix(l.Name, DeploymentLeasePrefix)
	d, ok, err := s.Record(ctx, id)
	if err != nil {
		return err
	}
	if !ok || d.State != DeployRunning {
		s.releaseDeployment(id) // undeployed or gone: nothing to own
		return nil
	}
	return s.adoptOrRestart(ctx, &d, "its replica "+prev.ID+" stopped")
}

// adoptOrRestart makes this replica the owner of running deployment d
// (its lease held): adopted when its process runs on this host and answers
// /health, else started again here.
func (s *Service) adoptOrRestart(ctx context.Context, d *Deployment, why string) error {
	if s.local(d) && d.PID > 0 && alive(d.PID) && probe(d.URL+"/health") {
		d.Replica, d.Host = s.self(), s.host()
		if err := s.putDeployment(ctx, kindDeployment, d); err != nil {
			return err
		}
		if s.log != nil {
			s.log.Info("deployment adopted", "id", d.ID, "model", d.Model, "version", d.Version, "pid", d.PID, "url", d.URL, "why", why)
		}
		return nil
	}
	v, err := s.Reg.Resolve(ctx, d.Model, fmt.Sprint(d.Version))
	if err == nil && !v.Servable() {
		err = invalid("version %d (format %s) is not a file fw serve loads", d.Version, v.Format)
	}
	var done chan struct{}
	if err == nil {
		prev := *d
		d.GRPCPort = 0
		if _, perr := pickPort(prev.GRPCPort); perr == nil {
			d.GRPCPort = prev.GRPCPort // keep its gRPC port when it is free here
		}
		var modelPath string
		if modelPath, err = s.Reg.ModelFile(ctx, v); err == nil {
			done, err = s.launch(ctx, d, modelPath)
		}
	}
	if err != nil {
		msg := fmt.Sprintf("%s and its fw serve process does not answer here; starting it again failed: %v", why, err)
		if s.log != nil {
			s.log.Error("deployment gone", "id", d.ID, "err", msg)
		}
		d.State, d.Error, d.Replica, d.Host = DeployGone, msg, s.self(), s.host()
		if perr := s.putDeployment(ctx, kindDeployment, d); perr != nil {
			return perr
		}
		s.releaseDeployment(d.ID)
		s.publish("deploy", d.ID, map[string]any{"id": d.ID, "state": DeployGone, "model": d.Model, "version": d.Version, "error": msg})
		return nil
	}
	d.Replica, d.Host, d.Error = s.self(), s.host(), ""
	d.Restarts++
	if err := s.putDeployment(ctx, kindDeployment, d); err != nil {
		_ = signalGroup(d.PID, sigKill)
		<-done
		return err
	}
	s.dep.mu.Lock()
	s.dep.done[d.ID], s.dep.pids[d.ID] = done, d.PID
	s.dep.mu.Unlock()
	if s.log != nil {
		s.log.Warn("deployment started again", "id", d.ID, "model", d.Model, "version", d.Version, "pid", d.PID, "url", d.URL, "why", why)
	}
	s.publish("deploy", d.ID, map[string]any{"id": d.ID, "state": DeployRunning, "model": d.Model, "version": d.Version, "url": d.URL})
	return nil
}

// lostDeployment: another replica took the lease of a deployment this one
// started (this one was cut off from the database). If it adopted this
// process's child, the child is its now; if it started the deployment
// again elsewhere, this child is stopped.
func (s *Service) lostDeployment(name string) {
	id := strings.TrimPrefix(name, DeploymentLeasePrefix)
	s.dep.mu.Lock()
	done, mine := s.dep.done[id]
	pid := s.dep.pids[id]
	delete(s.dep.done, id)
	delete(s.dep.pids, id)
	delete(s.dep.prev, id)
	s.dep.mu.Unlock()
	if !mine {
		return
	}
	select {
	case <-done:
		return // exited already
	default:
	}
	ctx, cancel := context.WithTimeout(s.base, 10*time.Second)
	defer cancel()
	d, ok, err := s.Record(ctx, id)
	if err != nil {
		return // cannot tell: leave the child alone
	}
	if ok && d.State == DeployRunning && d.Host == s.host() && d.PID == pid {
		return // adopted: the same process, the other replica's now
	}
	if s.log != nil {
		s.log.Warn("stopping a deployment process another replica replaced or removed", "id", id, "pid", pid)
	}
	_ = signalGroup(pid, sigTerm)
}

// adoptOrphans takes over the running deployments that no replica holds a
// lease for (recorded by a dashboard without replicas, or imported from
// its files): on start.
func (s *Service) adoptOrphans(ctx context.Context) error {
	list, err := s.listDeployments(ctx, kindDeployment)
	if err != nil {
		return err
	}
	for _, d := range list {
		if d.State != DeployRunning {
			continue
		}
		if _, _, held, err := s.cfg.Member.Owner(ctx, DeploymentLeasePrefix+d.ID); err != nil || held {
			continue // the sweep takes over from a stopped owner
		}
		if _, ok, err := s.cfg.Member.Claim(ctx, DeploymentLeasePrefix+d.ID); err != nil || !ok {
			continue
		}
		if err := s.adoptOrRestart(ctx, d, "the dashboard that started it is gone"); err != nil && s.log != nil {
			s.log.Error("taking over a deployment", "id", d.ID, "err", err)
		}
	}
	return nil
}

// claimExport takes the lease of a new export for this replica.
func (s *Service) claimExport(ctx context.Context, j *ExportJob) {
	if s.cfg.Member == nil {
		return
	}
	j.Replica = s.self()
	if _, ok, err := s.cfg.Member.Claim(ctx, ExportLeasePrefix+j.ID); (err != nil || !ok) && s.log != nil {
		s.log.Warn("export started without its lease", "id", j.ID, "err", err)
	}
}

func (s *Service) releaseExport(id string) {
	if s.cfg.Member == nil {
		return
	}
	_ = s.cfg.Member.Release(context.WithoutCancel(s.base), ExportLeasePrefix+id)
}

// ReplicaStoppedMsg is the error of an export whose dashboard replica
// stopped while it ran.
const ReplicaStoppedMsg = "the dashboard replica running this export stopped; start the export again"

// takeoverExport fails the export of a stopped replica (its exporter
// process died with it).
func (s *Service) takeoverExport(ctx context.Context, l store.Lease, prev replica.Info) error {
	id := strings.TrimPrefix(l.Name, ExportLeasePrefix)
	if err := s.failExport(ctx, id, ReplicaStoppedMsg+" ("+prev.ID+")"); err != nil {
		return err
	}
	if j, ok, err := s.Export(ctx, id); err == nil && ok {
		s.publish("export", id, j)
	}
	s.releaseExport(id)
	return nil
}

// Remote reports the replica that owns d when d's process runs on another
// host than this replica's: requests to the process go through it (its
// URL is that host's loopback). nil when the process is on this host, or
// when its owner stopped (then the next sweep takes it over).
func (s *Service) Remote(ctx context.Context, d Deployment) (*replica.NotOwnerError, error) {
	if s.cfg.Member == nil || s.local(&d) {
		return nil, nil
	}
	lease := DeploymentLeasePrefix + d.ID
	if d.Shared() {
		lease = sharedLease
	}
	return s.remoteOwner(ctx, lease)
}

// remoteOwner is the live replica other than this one that holds lease.
func (s *Service) remoteOwner(ctx context.Context, lease string) (*replica.NotOwnerError, error) {
	owner, alive, ok, err := s.cfg.Member.Owner(ctx, lease)
	if err != nil || !ok || !alive || owner.ID == s.self() {
		return nil, err
	}
	return &replica.NotOwnerError{Name: lease, Owner: owner}, nil
}

// RemoteShared reports the replica that owns the shared server when its
// process runs on another host (its URL is that host's loopback): GET
// /api/shared-server is answered there.
func (s *Service) RemoteShared(ctx context.Context) (*replica.NotOwnerError, error) {
	if s.cfg.Member == nil {
		return nil, nil
	}
	srv, ok, err := s.sharedRecord(ctx)
	if err != nil || !ok || s.localHost(srv.Host) {
		return nil, err
	}
	return s.remoteOwner(ctx, sharedLease)
}
