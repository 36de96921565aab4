package replica

import (
	"context"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"sync"
	"testing"
	"time"

	"github.com/fw-serve/fw/dashboard/store"
	"github.com/fw-serve/fw/internal/testleak"
	"github.com/fw-serve/fw/internal/teststore"
)

// TestMain fails the package's tests when a goroutine outlives them.
func TestMain(m *testing.M) { testleak.Main(m) }

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// recorder is a Handler that records what it was given.
type recorder struct {
	mu        sync.Mutex
	takeovers map[string]Info
	lost      []string
	release   *Member
}

func (r *recorder) handler() Handler {
	return Handler{
		Takeover: func(ctx context.Context, l store.Lease, prev Info) error {
			r.mu.Lock()
			r.takeovers[l.Name] = prev
			r.mu.Unlock()
			return r.release.Release(ctx, l.Name)
		},
		Lost: func(name string) {
			r.mu.Lock()
			r.lost = append(r.lost, name)
			r.mu.Unlock()
		},
	}
}

func member(t *testing.T, st store.Store, id, host string, pid int, ttl time.Duration) (*Member, *recorder) {
	t.Helper()
	m := New(st, Info{ID: id, URL: "http://" + id, Host: host, PID: pid}, ttl, quiet)
	rec := &recorder{takeovers: map[string]Info{}, release: m}
	m.Handle("job/", rec.handler())
	if err := m.Join(context.Background()); err != nil {
		t.Fatal(err)
	}
	return m, rec
}

// TestTakeoverAfterExpiry: a replica on another host stops renewing; once
// its leases expire, the other takes over each of them (its handler gets
// the stopped owner), then forgets the stopped replica; the stopped one,
// coming back, learns it lost them and joins again.
func TestTakeoverAfterExpiry(t *testing.T) {
	teststore.ForEach(t, func(t *testing.T, cfg store.Config) {
		ctx := context.Background()
		sa, sb := teststore.Open(t, cfg), teststore.Open(t, cfg)
		ttl := 400 * time.Millisecond
		a, recA := member(t, sa, "a", "host-a", 1, ttl)
		b, recB := member(t, sb, "b", "host-b", 2, time.Hour)
		if _, ok, err := a.Claim(ctx, "job/r1"); !ok || err != nil {
			t.Fatalf("claim: %v %v", ok, err)
		}
		// b sees a own it and alive, and cannot claim it.
		if owner, alive, ok, err := b.Owner(ctx, "job/r1"); err != nil || !ok || !alive || owner.ID != "a" || owner.URL != "http://a" {
			t.Fatalf("owner: %+v %v %v %v", owner, alive, ok, err)
		}
		if owner, ok, err := b.Claim(ctx, "job/r1"); ok || err != nil || owner.ID != "a" {
			t.Fatalf("claimed from a live owner: %+v %v %v", owner, ok, err)
		}
		b.Sweep(ctx)
		if len(recB.takeovers) != 0 {
			t.Fatalf("took over from a live replica: %v", recB.takeovers)
		}
		// a stops renewing.
		time.Sleep(ttl + 100*time.Millisecond)
		if _, alive, _, _ := b.Owner(ctx, "job/r1"); alive {
			t.Fatal("an expired owner counts as alive")
		}
		b.Sweep(ctx)
		if prev, ok := recB.takeovers["job/r1"]; !ok || prev.ID != "a" || prev.Host != "host-a" {
			t.Fatalf("takeover: %+v", recB.takeovers)
		}
		reps, err := b.Replicas(ctx)
		if err != nil || len(reps) != 1 || reps[0].ID != "b" || !reps[0].Self {
			t.Fatalf("the stopped replica was not forgotten: %+v %v", reps, err)
		}
		// a comes back: it lost job/r1 (the handler hears it) and rejoins.
		a.Renew(ctx)
		if len(recA.lost) != 1 || recA.lost[0] != "job/r1" {
			t.Fatalf("lost: %v", recA.lost)
		}
		if reps, _ := b.Replicas(ctx); len(reps) != 2 {
			t.Fatalf("a did not rejoin: %+v", reps)
		}
	})
}

// TestTakeoverDeadProcessSameHost: a replica of this host whose process is
// gone is taken over at once, without waiting for its leases to expire
// (a dashboard restarted on the same machine takes its deployments back).
func TestTakeoverDeadProcessSameHost(t *testing.T) {
	teststore.ForEach(t, func(t *testing.T, cfg store.Config) {
		ctx := context.Background()
		st := teststore.Open(t, cfg)
		host, _ := os.Hostname()
		dead := exec.Command("true")
		if err := dead.Run(); err != nil {
			t.Fatal(err)
		}
		old, _ := member(t, st, "old", host, dead.Process.Pid, time.Hour)
		if _, ok, err := old.Claim(ctx, "job/r1"); !ok || err != nil {
			t.Fatal(ok, err)
		}
		if _, ok, err := old.Claim(ctx, "other/x"); !ok || err != nil {
			t.Fatal(ok, err)
		}
		now, rec := member(t, st, "new", host, os.Getpid(), time.Hour)
		now.Sweep(ctx)
		if prev, ok := rec.takeovers["job/r1"]; !ok || prev.ID != "old" {
			t.Fatalf("not taken over at once: %+v", rec.takeovers)
		}
		// A lease no handler is registered for stays, and so does its
		// stopped owner's replica lease (so it is still known who held it).
		if l, err := st.GetLease(ctx, "other/x"); err != nil || l.Owner != "old" {
			t.Fatalf("unhandled lease: %+v %v", l, err)
		}
		reps, _ := now.Replicas(ctx)
		if len(reps) != 2 {
			t.Fatalf("replicas: %+v", reps)
		}
		for _, r := range reps {
			if r.ID == "old" && r.Alive {
				t.Fatal("a replica whose process is gone counts as alive")
			}
		}
		// Leave releases the replica lease: others see it stopped at once.
		now.Leave(ctx)
		if _, alive, _, _ := old.Owner(ctx, "job/none"); alive {
			t.Fatal("no lease, yet alive")
		}
	})
}

// TestRunRenews: Run keeps this member's leases alive past their TTL.
func TestRunRenews(t *testing.T) {
	teststore.ForEach(t, func(t *testing.T, cfg store.Config) {
		ctx, cancel := context.WithCancel(context.Background())
		st := teststore.Open(t, cfg)
		ttl := 300 * time.Millisecond
		a, _ := member(t, st, "a", "h", 1, ttl)
		if _, ok, err := a.Claim(ctx, "job/r1"); !ok || err != nil {
			t.Fatal(ok, err)
		}
		done := make(chan struct{})
		go func() { defer close(done); a.Run(ctx) }()
		time.Sleep(3 * ttl)
		l, err := st.GetLease(ctx, "job/r1")
		cancel()
		<-done
		if err != nil || l.Expired(time.Now()) || !a.Holds("job/r1") {
			t.Fatalf("lease after 3 TTLs of Run: %+v %v", l, err)
		}
	})
}

func TestNewID(t *testing.T) {
	a, b := NewID("my host/x", 42), NewID("my host/x", 42)
	if a == b || len(a) < 10 || store.ValidateKey(a) != nil {
		t.Fatalf("IDs %q %q", a, b)
	}
	for _, c := range a {
		if c == ' ' || c == '/' {
			t.Fatalf("ID %q keeps a character of the host name it should not", a)
		}
	}
}

// renewHook runs a function after the store renewed a member's leases and
// before the member looks at the answer.
type renewHook struct {
	store.Store
	after func()
}

func (r renewHook) RenewLeases(ctx context.Context, owner string, ttl time.Duration) ([]string, error) {
	names, err := r.Store.RenewLeases(ctx, owner, ttl)
	if r.after != nil {
		r.after()
	}
	return names, err
}

// TestClaimDuringRenew: a lease claimed while a renewal is on its way is
// not taken for lost because the renewal's answer predates it.
func TestClaimDuringRenew(t *testing.T) {
	ctx := context.Background()
	st := teststore.Open(t, store.Config{Dir: t.TempDir()})
	hook := &renewHook{Store: st}
	m := New(hook, Info{ID: "a", Host: "h", PID: 1}, time.Hour, quiet)
	lost := 0
	m.Handle("job/", Handler{Takeover: func(context.Context, store.Lease, Info) error { return nil }, Lost: func(string) { lost++ }})
	if err := m.Join(ctx); err != nil {
		t.Fatal(err)
	}
	hook.after = func() {
		hook.after = nil
		if _, ok, err := m.Claim(ctx, "job/new"); !ok || err != nil {
			t.Errorf("claim: %v %v", ok, err)
		}
	}
	m.Renew(ctx)
	if lost != 0 || !m.Holds("job/new") {
		t.Fatalf("a lease claimed during a renewal was taken for lost (lost %d, holds %v)", lost, m.Holds("job/new"))
	}
	// The next renewal sees it.
	m.Renew(ctx)
	if lost != 0 || !m.Holds("job/new") {
		t.Fatal("lost on the next renewal")
	}
}
