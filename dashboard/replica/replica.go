// Package replica lets dashboards that share one database work as replicas
// of one service (docs/replicas.md). Each process is a Member with an ID
// and a lease in the store ("replica/<id>", saying where its API is) that
// it renews every TTL/3, together with the leases of what it owns (a
// training job "job/<run id>", a deployment "deployment/<id>"). A member
// also sweeps: a lease whose owner stopped (its leases expired, or it ran
// on this host and its process is gone) is taken over and handed to the
// Handler registered for its prefix, which adopts, restarts or ends the
// thing. When a member finds that a lease it held was taken over (it was
// cut off from the database for longer than the TTL), the handler's Lost
// is called so that it stops acting on it.
package replica

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/fw-serve/fw/dashboard/store"
)

// Prefix of the replicas' own leases.
const Prefix = "replica/"

// DefaultTTL is a lease's time to live unless configured (--lease-ttl):
// what a takeover waits at most after an owner on another host stopped.
const DefaultTTL = 15 * time.Second

// Info is what a replica says about itself in its lease.
type Info struct {
	ID string `json:"id"`
	// URL is where the other replicas reach its API (forwarded requests).
	URL     string    `json:"url"`
	Host    string    `json:"host"`
	PID     int       `json:"pid"`
	Version string    `json:"version,omitempty"`
	Started time.Time `json:"started"`
}

// Replica is a replica as listed: its Info and whether it is alive.
type Replica struct {
	Info
	Alive   bool      `json:"alive"`
	Expires time.Time `json:"lease_expires"`
	Self    bool      `json:"self"`
}

// NotOwnerError says that another live replica owns what a request is
// about (a job, a deployment): the API forwards the request to Owner.URL.
type NotOwnerError struct {
	Name  string
	Owner Info
}

func (e *NotOwnerError) Error() string {
	return fmt.Sprintf("%s belongs to dashboard replica %s (%s)", e.Name, e.Owner.ID, e.Owner.URL)
}

// Handler brings the things of one lease prefix under a new owner.
type Handler struct {
	// Takeover is called when this member took the lease l from owner prev
	// (who stopped; prev.ID is empty when its replica lease is gone too).
	// It adopts, restarts or ends the thing; when nothing is left to own it
	// releases the lease (Member.Release). An error is logged and the lease
	// kept: the next sweep does not call it again for this lease.
	Takeover func(ctx context.Context, l store.Lease, prev Info) error
	// Lost is called when a lease this member held was taken over.
	Lost func(name string)
}

// Member is this process as a replica.
type Member struct {
	st   store.Leases
	self Info
	ttl  time.Duration
	log  *slog.Logger

	mu       sync.Mutex
	handlers map[string]Handler // by prefix
	held     map[string]bool    // the leases this member holds
}

// New makes the member self.ID for st; ttl <= 0 is DefaultTTL.
func New(st store.Leases, self Info, ttl time.Duration, log *slog.Logger) *Member {
	if ttl <= 0 {
		ttl = DefaultTTL
	}
	if self.Started.IsZero() {
		self.Started = time.Now().UTC()
	}
	return &Member{st: st, self: self, ttl: ttl, log: log, handlers: map[string]Handler{}, held: map[string]bool{}}
}

// NewID makes a replica ID: the host name, the process ID and random
// characters (a restarted process is a new replica).
func NewID(host string, pid int) string {
	h := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '.' {
			return r
		}
		return '-'
	}, host)
	if len(h) > 64 {
		h = h[:64]
	}
	return fmt.Sprintf("%s-%d-%s", h, pid, store.NewID()[10:])
}

// Self is this member's Info.
func (m *Member) Self() Info { return m.self }

// TTL is the leases' time to live.
func (m *Member) TTL() time.Duration { return m.ttl }

// Handle registers h for the leases whose name starts with prefix.
func (m *Member) Handle(prefix string, h Handler) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.handlers[prefix] = h
}

// Join takes this member's replica lease.
func (m *Member) Join(ctx context.Context) error {
	info, _ := json.Marshal(m.self)
	_, ok, err := m.st.AcquireLease(ctx, Prefix+m.self.ID, m.self.ID, m.ttl, info, nil)
	if err != nil {
		return fmt.Errorf("joining as replica %s: %w", m.self.ID, err)
	}
	if !ok {
		return fmt.Errorf("joining as replica %s: another process holds that replica ID", m.self.ID)
	}
	m.setHeld(Prefix+m.self.ID, true)
	return nil
}

// Leave releases this member's replica lease (on a graceful stop): the
// others take over what it still owns at their next sweep instead of after
// the TTL.
func (m *Member) Leave(ctx context.Context) {
	if _, err := m.st.ReleaseLease(ctx, Prefix+m.self.ID, m.self.ID); err != nil && m.log != nil {
		m.log.Warn("replica: releasing the replica lease", "err", err)
	}
	m.setHeld(Prefix+m.self.ID, false)
}

func (m *Member) setHeld(name string, held bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if held {
		m.held[name] = true
	} else {
		delete(m.held, name)
	}
}

// Holds reports whether this member holds the lease name (as of its last
// renewal).
func (m *Member) Holds(name string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.held[name]
}

// Claim takes the lease name for this member: for something it starts (a
// job, a deployment). When a live replica holds it, ok is false and owner
// says which.
func (m *Member) Claim(ctx context.Context, name string) (owner Info, ok bool, err error) {
	stopped, _, err := m.stopped(ctx)
	if err != nil {
		return Info{}, false, err
	}
	l, ok, err := m.st.AcquireLease(ctx, name, m.self.ID, m.ttl, nil, func(cur store.Lease) bool { return stopped(cur.Owner) })
	if err != nil {
		return Info{}, false, fmt.Errorf("claiming %s: %w", name, err)
	}
	if ok {
		m.setHeld(name, true)
		return m.self, true, nil
	}
	info, _, err := m.replicaOf(ctx, l.Owner)
	return info, false, err
}

// Release gives up the lease name (the thing ended).
func (m *Member) Release(ctx context.Context, name string) error {
	m.setHeld(name, false)
	_, err := m.st.ReleaseLease(ctx, name, m.self.ID)
	return err
}

// Owner says which replica holds the lease name: ok is false when no
// one does; alive is false when its owner stopped (the lease is about to be
// taken over).
func (m *Member) Owner(ctx context.Context, name string) (owner Info, alive, ok bool, err error) {
	l, err := m.st.GetLease(ctx, name)
	if store.ErrorCode(err) == store.CodeNotFound {
		return Info{}, false, false, nil
	}
	if err != nil {
		return Info{}, false, false, err
	}
	info, alive, err := m.replicaOf(ctx, l.Owner)
	if err != nil {
		return Info{}, false, false, err
	}
	return info, alive && !l.Expired(time.Now()), true, nil
}

// replicaOf reads the replica lease of id.
func (m *Member) replicaOf(ctx context.Context, id string) (Info, bool, error) {
	if id == m.self.ID {
		return m.self, true, nil
	}
	l, err := m.st.GetLease(ctx, Prefix+id)
	if store.ErrorCode(err) == store.CodeNotFound {
		return Info{ID: id}, false, nil
	}
	if err != nil {
		return Info{}, false, err
	}
	var info Info
	_ = json.Unmarshal(l.Info, &info)
	info.ID = id
	return info, m.alive(l, info), nil
}

// alive judges a replica by its lease: not expired, and, when it runs on
// this host, its process exists.
func (m *Member) alive(l store.Lease, info Info) bool {
	if l.Expired(time.Now()) {
		return false
	}
	if info.Host == m.self.Host && info.PID > 0 && info.PID != m.self.PID {
		return processAlive(info.PID)
	}
	return true
}

// Replicas lists the replicas with a lease (live ones, and stopped ones
// whose lease was not swept yet), by ID.
func (m *Member) Replicas(ctx context.Context) ([]Replica, error) {
	ls, err := m.st.ListLeases(ctx, Prefix)
	if err != nil {
		return nil, err
	}
	out := make([]Replica, 0, len(ls))
	for _, l := range ls {
		var info Info
		_ = json.Unmarshal(l.Info, &info)
		info.ID = strings.TrimPrefix(l.Name, Prefix)
		out = append(out, Replica{Info: info, Alive: info.ID == m.self.ID || m.alive(l, info), Expires: l.Expires, Self: info.ID == m.self.ID})
	}
	return out, nil
}

// stopped returns a test for owner IDs whose replica stopped: no live
// replica lease (expired, released, or of this host with its process gone).
func (m *Member) stopped(ctx context.Context) (func(owner string) bool, map[string]Info, error) {
	reps, err := m.Replicas(ctx)
	if err != nil {
		return nil, nil, err
	}
	live := map[string]bool{m.self.ID: true}
	infos := map[string]Info{}
	for _, r := range reps {
		infos[r.ID] = r.Info
		if r.Alive {
			live[r.ID] = true
		}
	}
	return func(owner string) bool { return !live[owner] }, infos, nil
}

// Run renews this member's leases and sweeps every TTL/3 until ctx ends.
func (m *Member) Run(ctx context.Context) {
	tick := time.NewTicker(m.ttl / 3)
	defer tick.Stop()
	for {
		m.Renew(ctx)
		m.Sweep(ctx)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// Renew extends this member's leases, and calls Lost for each one another
// replica took over meanwhile.
func (m *Member) Renew(ctx context.Context) {
	// Only a lease held before the renewal began can have been lost: one
	// claimed meanwhile may be missing from the answer without being lost.
	m.mu.Lock()
	before := make(map[string]bool, len(m.held))
	for n := range m.held {
		before[n] = true
	}
	m.mu.Unlock()
	names, err := m.st.RenewLeases(ctx, m.self.ID, m.ttl)
	if err != nil {
		if ctx.Err() == nil && m.log != nil {
			m.log.Warn("replica: renewing the leases failed; retrying", "err", err, "ttl", m.ttl)
		}
		return
	}
	now := map[string]bool{}
	for _, n := range names {
		now[n] = true
	}
	m.mu.Lock()
	var lost []string
	for n := range m.held {
		if before[n] && !now[n] {
			lost = append(lost, n)
			delete(m.held, n)
		}
	}
	m.mu.Unlock()
	for _, n := range lost {
		if n == Prefix+m.self.ID {
			// Our own replica lease was swept as stopped (we were cut off):
			// take it back; what we owned is the others' now.
			if err := m.Join(ctx); err != nil && m.log != nil {
				m.log.Error("replica: this replica's lease was taken; rejoining failed", "err", err)
			}
			continue
		}
		if m.log != nil {
			m.log.Warn("replica: a lease was taken over by another replica (this one was cut off from the database for longer than the lease TTL)", "lease", n)
		}
		if h, ok := m.handler(n); ok && h.Lost != nil {
			h.Lost(n)
		}
	}
}

func (m *Member) handler(name string) (Handler, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	best := ""
	for p := range m.handlers {
		if strings.HasPrefix(name, p) && len(p) > len(best) {
			best = p
		}
	}
	h, ok := m.handlers[best]
	return h, ok && best != ""
}

// Sweep takes over the leases of stopped replicas that a handler is
// registered for, hands each to its handler, and removes the stopped
// replicas' own leases once nothing else of theirs is left.
func (m *Member) Sweep(ctx context.Context) {
	stopped, infos, err := m.stopped(ctx)
	if err != nil {
		if ctx.Err() == nil && m.log != nil {
			m.log.Warn("replica: reading the replicas failed", "err", err)
		}
		return
	}
	all, err := m.st.ListLeases(ctx, "")
	if err != nil {
		if ctx.Err() == nil && m.log != nil {
			m.log.Warn("replica: reading the leases failed", "err", err)
		}
		return
	}
	now := time.Now()
	left := map[string]bool{} // stopped owners that still hold something
	var replicas []store.Lease
	for _, l := range all {
		if strings.HasPrefix(l.Name, Prefix) {
			replicas = append(replicas, l)
			continue
		}
		if l.Owner == m.self.ID || (!stopped(l.Owner) && !l.Expired(now)) {
			continue
		}
		h, ok := m.handler(l.Name)
		if !ok {
			left[l.Owner] = true
			continue
		}
		got, ok, err := m.st.AcquireLease(ctx, l.Name, m.self.ID, m.ttl, nil, func(cur store.Lease) bool { return stopped(cur.Owner) })
		if err != nil || !ok {
			if err != nil && m.log != nil && ctx.Err() == nil {
				m.log.Warn("replica: taking over a lease failed", "lease", l.Name, "err", err)
			}
			continue // another replica was faster, or the owner renewed
		}
		m.setHeld(l.Name, true)
		prev := infos[l.Owner]
		prev.ID = l.Owner
		if m.log != nil {
			m.log.Warn("replica: took over from a stopped replica", "lease", l.Name, "from", l.Owner, "host", prev.Host, "its_lease_expired", l.Expires)
		}
		if err := h.Takeover(ctx, got, prev); err != nil && m.log != nil {
			m.log.Error("replica: taking over failed; the lease stays with this replica", "lease", l.Name, "err", err)
		}
	}
	for _, l := range replicas {
		id := strings.TrimPrefix(l.Name, Prefix)
		if id == m.self.ID || !stopped(id) || left[id] {
			continue
		}
		// Stopped and owning nothing a handler could take: forget it.
		if _, ok, err := m.st.AcquireLease(ctx, l.Name, m.self.ID, m.ttl, nil, func(cur store.Lease) bool { return stopped(cur.Owner) }); err == nil && ok {
			_, _ = m.st.ReleaseLease(ctx, l.Name, m.self.ID)
		}
	}
}
