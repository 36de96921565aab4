package sharedmem

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// object creates a shared memory object of size bytes (0, 1, 2, ...) in
// dir, as shm_open + ftruncate would, and returns its key.
func object(t *testing.T, dir, name string, size int) string {
	t.Helper()
	b := make([]byte, size)
	for i := range b {
		b[i] = byte(i)
	}
	if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
		t.Fatal(err)
	}
	return "/" + name
}

func TestRegisterAcquireUnregister(t *testing.T) {
	dir := t.TempDir()
	r := New(dir, true)
	defer r.Close()
	key := object(t, dir, "in", 10000)
	if err := r.Register("in", key, 5000, 100); err != nil {
		t.Fatal(err)
	}
	st, err := r.Status("")
	if err != nil || len(st) != 1 || st[0] != (Status{Name: "in", Key: key, Offset: 5000, ByteSize: 100}) {
		t.Fatalf("status %+v %v", st, err)
	}
	sp, err := r.Acquire("in", 10, 20)
	if err != nil {
		t.Fatal(err)
	}
	if sp.Bytes[0] != byte(5010%256) || len(sp.Bytes) != 20 || cap(sp.Bytes) != 20 {
		t.Fatalf("span %v", sp.Bytes[:4])
	}
	// Writes reach the object, which the client reads.
	sp.Bytes[0] = 0xAB
	sp.Release()
	b, _ := os.ReadFile(filepath.Join(dir, "in"))
	if b[5010] != 0xAB {
		t.Fatalf("write did not reach the shared object")
	}
	// Bounds: nothing outside the registered window.
	for _, c := range [][2]uint64{{0, 101}, {100, 1}, {101, 0}, {math.MaxUint64, 2}, {1, math.MaxUint64}} {
		if _, err := r.Acquire("in", c[0], c[1]); !errors.Is(err, ErrInvalid) {
			t.Errorf("offset %d size %d: %v", c[0], c[1], err)
		}
	}
	if _, err := r.Acquire("nope", 0, 1); !errors.Is(err, ErrNotFound) {
		t.Errorf("unknown region: %v", err)
	}
	if err := r.Register("in", key, 0, 1); err == nil || !strings.Contains(err.Error(), "already in manager") {
		t.Errorf("double register: %v", err)
	}
	if err := r.Unregister("in"); err != nil {
		t.Fatal(err)
	}
	if err := r.Unregister("in"); err != nil { // not registered: fine, as Triton's clients expect
		t.Fatal(err)
	}
	if st, _ := r.Status(""); len(st) != 0 {
		t.Fatalf("after unregister: %+v", st)
	}
	if _, err := r.Status("in"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("status of an unregistered region: %v", err)
	}
}

func TestRegisterRefusals(t *testing.T) {
	dir := t.TempDir()
	r := New(dir, true)
	defer r.Close()
	key := object(t, dir, "obj", 4096)
	os.Mkdir(filepath.Join(dir, "adir"), 0o700)
	for _, c := range []struct {
		name, key    string
		offset, size uint64
		want         string
	}{
		{"a", key, 0, 4097, "failed to register shared memory region 'a': invalid args: offset 0 + byte_size 4097 is beyond the object's 4096 bytes"},
		{"a", key, 4096, 1, "failed to register shared memory region 'a': invalid args"},
		{"a", key, math.MaxUint64, 1, "failed to register shared memory region 'a': invalid args"},
		{"a", key, 4097, 0, "failed to register shared memory region 'a': invalid args: offset 4097"}, // Triton's order: the window first
		{"a", key, 0, 0, "failed to register shared memory region 'a': invalid args: byte_size 0"},
		{"a", key, 0, math.MaxUint64, "failed to register shared memory region 'a': invalid args"},
		{"a", "/../etc/passwd", 0, 1, "invalid shm key '/../etc/passwd': a POSIX shared memory name"},
		{"a", "/a/b", 0, 1, "invalid shm key '/a/b'"},
		{"a", "/", 0, 1, "cannot register shared memory region 'a' - invalid shm key '/'"},
		{"a", "///", 0, 1, "cannot register shared memory region 'a' - invalid shm key '///'"},
		{"a", "", 0, 1, "cannot register shared memory region 'a' - invalid shm key ''"},
		{"a", "//" + ReservedKeyPrefix + "x", 0, 1, "cannot register shared memory region 'a' with key '//" + ReservedKeyPrefix + "x' as the key contains the reserved prefix '" + ReservedKeyPrefix + "'"},
		{"", key, 0, 1, "name"},
	} {
		err := r.Register(c.name, c.key, c.offset, c.size)
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("register %q %q %d %d: %v, want %q", c.name, c.key, c.offset, c.size, err, c.want)
		}
	}
	// A key that opens no object is Triton's "Unable to open", checked
	// before the window (byte_size 0 included), as Triton checks it.
	for _, c := range []struct {
		key  string
		size uint64
	}{{"/missing", 1}, {"/adir", 1}, {"/missing", 0}} {
		err := r.Register("a", c.key, 0, c.size)
		if want := "Unable to open shared memory region: '" + c.key + "'"; !errors.Is(err, ErrOpen) || !strings.HasPrefix(Message(err), want) {
			t.Errorf("register %q byte_size %d: %v, want ErrOpen and %q first", c.key, c.size, err, want)
		}
	}
}

// A region unregistered while requests use it stays mapped until the last
// one releases it: no request touches unmapped memory (run under -race).
func TestUnregisterWhileInUse(t *testing.T) {
	dir := t.TempDir()
	r := New(dir, true)
	defer r.Close()
	key := object(t, dir, "obj", 1<<16)
	var wg sync.WaitGroup
	for i := range 200 {
		name := "r"
		if err := r.Register(name, key, 0, 1<<16); err != nil && !strings.Contains(err.Error(), "already") {
			t.Fatal(err)
		}
		wg.Add(2)
		go func() {
			defer wg.Done()
			sp, err := r.Acquire(name, uint64(i), 100)
			if err != nil {
				return // unregistered first
			}
			sum := 0
			for _, b := range sp.Bytes {
				sum += int(b)
			}
			sp.Bytes[0] = byte(sum)
			sp.Release()
		}()
		go func() { defer wg.Done(); _ = r.Unregister(name) }()
	}
	wg.Wait()
}

// A real POSIX shared memory object in /dev/shm, as tritonclient's
// shared_memory module creates.
func TestDevShm(t *testing.T) {
	if st, err := os.Stat("/dev/shm"); err != nil || !st.IsDir() {
		t.Skip("no /dev/shm")
	}
	name := "fw_test_" + strings.ReplaceAll(t.Name(), "/", "_")
	key := object(t, "/dev/shm", name, 64)
	defer os.Remove("/dev/shm/" + name)
	r := New("", true)
	defer r.Close()
	if err := r.Register("x", key, 0, 64); err != nil {
		t.Fatal(err)
	}
	sp, err := r.Acquire("x", 0, 64)
	if err != nil || sp.Bytes[63] != 63 {
		t.Fatalf("%v", err)
	}
	sp.Release()
}

func FuzzAcquire(f *testing.F) {
	f.Add(uint64(0), uint64(1))
	f.Add(uint64(4095), uint64(2))
	f.Add(uint64(math.MaxUint64), uint64(math.MaxUint64))
	dir := f.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "o"), make([]byte, 8192), 0o600); err != nil {
		f.Fatal(err)
	}
	r := New(dir, true)
	defer r.Close()
	if err := r.Register("o", "/o", 100, 4096); err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, off, size uint64) {
		sp, err := r.Acquire("o", off, size)
		if err != nil {
			return
		}
		if uint64(len(sp.Bytes)) != size || off+size > 4096 {
			t.Fatalf("span of %d bytes at %d", len(sp.Bytes), off)
		}
		if size > 0 {
			sp.Bytes[size-1] ^= 1 // writable, inside the mapping
		}
		sp.Release()
	})
}

// ReadAll allocates only once the window is inside its region.
func TestReadAllChecksBeforeAllocating(t *testing.T) {
	dir := t.TempDir()
	r := New(dir, true)
	defer r.Close()
	key := object(t, dir, "in", 100)
	if err := r.Register("in", key, 0, 100); err != nil {
		t.Fatal(err)
	}
	b, err := r.ReadAll(nil, Ref{Region: "in", Offset: 10, Size: 5}, nil)
	if err != nil || string(b) != "\x0a\x0b\x0c\x0d\x0e" {
		t.Fatalf("ReadAll = %v, %v", b, err)
	}
	called := false
	alloc := func(n int) []byte { called = true; return make([]byte, n) }
	for _, ref := range []Ref{{"in", 0, 101}, {"in", 1 << 40, 1}, {"in", 0, math.MaxUint64}, {"nope", 0, 1}} {
		if _, err := r.ReadAll(nil, ref, alloc); err == nil || called {
			t.Errorf("ReadAll(%+v): %v, allocated %v", ref, err, called)
		}
	}
}

// Without clients allowed (tritonserver's --allow-client-shm default),
// registering and unregistering are refused with Triton's sentence, no
// file is opened, and the status lists nothing.
func TestClientsNotAllowed(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "in"), make([]byte, 64), 0o600); err != nil {
		t.Fatal(err)
	}
	r := New(dir, false)
	defer r.Close()
	if r.ClientsAllowed() {
		t.Fatal("ClientsAllowed")
	}
	for _, err := range []error{r.Register("in", "/in", 0, 64), r.Unregister("in"), r.Unregister("")} {
		if !errors.Is(err, ErrDisabled) || Message(err) != DisabledMessage {
			t.Errorf("%v (%q), want ErrDisabled with %q", err, Message(err), DisabledMessage)
		}
	}
	if st, err := r.Status(""); err != nil || len(st) != 0 {
		t.Fatalf("status: %+v %v", st, err)
	}
}

// A region a request holds stays registered when it is unregistered, as
// Triton keeps it "awaiting unregister": listed, usable, its name taken,
// until the last holder lets go; then it is gone.
func TestUnregisterWhileHeld(t *testing.T) {
	dir := t.TempDir()
	r := New(dir, true)
	defer r.Close()
	key := object(t, dir, "in", 64)
	// Leading slashes are dropped, as glibc's shm_open drops them.
	if err := r.Register("in", "///"+key[1:], 0, 64); err != nil {
		t.Fatal(err)
	}
	var h Holds
	if _, err := r.Hold(&h, Ref{Region: "in", Offset: 0, Size: 64}); err != nil {
		t.Fatal(err)
	}
	if err := r.Unregister(""); err != nil {
		t.Fatal(err)
	}
	if st, _ := r.Status(""); len(st) != 1 {
		t.Fatalf("a held region unregistered: status %+v, want it listed until released", st)
	}
	if err := r.Write(Ref{Region: "in", Size: 4}, []byte{1, 2, 3, 4}); err != nil {
		t.Fatalf("writing into a held region after unregister: %v", err)
	}
	if err := r.Register("in", key, 0, 64); err == nil || !strings.Contains(err.Error(), "already in manager") {
		t.Fatalf("registering the name of a region awaiting unregister: %v", err)
	}
	h.Release()
	h.Release() // twice: nothing more
	if st, _ := r.Status(""); len(st) != 0 {
		t.Fatalf("after the last holder: %+v", st)
	}
	if err := r.Register("in", key, 0, 64); err != nil {
		t.Fatalf("the name is free again: %v", err)
	}
}

// A window is checked with Triton's sentences, in Triton's order.
func TestWindowSentences(t *testing.T) {
	dir := t.TempDir()
	r := New(dir, true)
	defer r.Close()
	if err := r.Register("out", object(t, dir, "out", 64), 0, 64); err != nil {
		t.Fatal(err)
	}
	var h Holds
	defer h.Release()
	for _, c := range []struct {
		offset, size uint64
		want         string
	}{
		{64, 0, "Invalid offset for shared memory region: 'out'"},
		{math.MaxUint64 - 31, 1, "Invalid offset for shared memory region: 'out'"},
		{32, math.MaxUint64 - 31, "Integer overflow detected: byte_size (18446744073709551584) + offset (32) exceeds maximum value (18446744073709551615) for region 'out'"},
		{1, 64, "Invalid offset + byte size for shared memory region: 'out'"},
	} {
		_, err := r.Hold(&h, Ref{Region: "out", Offset: c.offset, Size: c.size})
		if !errors.Is(err, ErrInvalid) || !strings.HasPrefix(Message(err), c.want) {
			t.Errorf("offset %d size %d: %v, want %q", c.offset, c.size, err, c.want)
		}
		if _, err := r.Acquire("out", c.offset, c.size); !errors.Is(err, ErrInvalid) || !strings.HasPrefix(Message(err), c.want) {
			t.Errorf("Acquire offset %d size %d: %v, want %q", c.offset, c.size, err, c.want)
		}
	}
	if st, _ := r.Status(""); len(st) != 1 || len(h.regs) != 0 {
		t.Fatalf("refused holds hold nothing: %+v %d", st, len(h.regs))
	}
}
