// Package sharedmem is Triton's system shared memory extension: clients on
// the same machine register POSIX shared memory regions (shm_open keys,
// /dev/shm/<key>) by name, then send inputs and receive outputs through
// them instead of the request body. A Registry maps each registered window
// [offset, offset+byte_size) of its object once; every read and write is
// bounds-checked against that window, so no request reaches outside the
// region it names. A request holds the regions it names (Holds) until it
// has answered; a region unregistered meanwhile stays registered, listed
// and usable, as Triton keeps it "awaiting unregister", and is removed and
// unmapped when the last holder lets go.
package sharedmem

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// Limits bound what clients may register.
const (
	// MaxRegions is the most regions registered at once.
	MaxRegions = 1024
	// MaxRegionBytes is the largest region (16 GiB).
	MaxRegionBytes = 16 << 30
)

// Error kinds, for the transports' status codes.
var (
	// ErrNotFound: no region of that name is registered.
	ErrNotFound = errors.New("shared memory region not found")
	// ErrInvalid: the request is wrong (bad key, bounds, duplicate name).
	ErrInvalid = errors.New("invalid shared memory request")
	// ErrOpen: the key names no shared memory object this server can open
	// (Triton reports it as INTERNAL: HTTP 500, gRPC INTERNAL).
	ErrOpen = errors.New("shared memory object not opened")
	// ErrDisabled: clients may not register or unregister regions on this
	// server (Triton reports it as UNSUPPORTED: HTTP 501, gRPC
	// UNIMPLEMENTED). Its message is DisabledMessage.
	ErrDisabled = errors.New("client shared memory disabled")
)

// DisabledMessage is Triton's sentence for a register or unregister call
// when client shared memory is off (tritonserver's --allow-client-shm,
// false by default since Triton 2.73), which clients and tests match.
const DisabledMessage = "Client shared memory is disabled. Start the server with '--allow-client-shm=true' to enable."

// Message is err's message without the kind it is wrapped in.
func Message(err error) string {
	msg := err.Error()
	for _, kind := range []error{ErrNotFound, ErrInvalid, ErrOpen, ErrDisabled} {
		if errors.Is(err, kind) {
			return strings.TrimPrefix(msg, kind.Error()+": ")
		}
	}
	return msg
}

// Status is a registered region as the status calls report it.
type Status struct {
	Name     string `json:"name"`
	Key      string `json:"key"`
	Offset   uint64 `json:"offset"`
	ByteSize uint64 `json:"byte_size"`
}

// Registry holds the registered system shared memory regions. Its methods
// are safe for concurrent use. The zero value is not usable: use New.
type Registry struct {
	dir     string // where shm_open keys live: /dev/shm
	clients bool   // clients may register and unregister regions

	mu      sync.Mutex
	regions map[string]*region
}

// ReservedKeyPrefix begins the keys of the shared memory Triton's Python
// backend makes for itself; clients may not register them (Triton's rule).
const ReservedKeyPrefix = "triton_python_backend_shm_region_"

// region is one registered window of a shared memory object.
type region struct {
	st   Status
	mem  []byte // the mmap'd pages
	data []byte // the window [offset, offset+byte_size) within mem

	// refs counts the requests using the region; unregistered marks it
	// awaiting removal: the last of them removes it from the registry and
	// unmaps it. Guarded by Registry.mu.
	refs         int
	unregistered bool
}

// New returns an empty registry whose keys name files in dir (/dev/shm on
// Linux, where shm_open creates them). Unless clients is true, Register
// and Unregister refuse with ErrDisabled and no region is ever registered
// (tritonserver's --allow-client-shm): a client that can register a region
// makes the server map and write a file of its choosing under dir.
func New(dir string, clients bool) *Registry {
	if dir == "" {
		dir = "/dev/shm"
	}
	return &Registry{dir: dir, clients: clients, regions: map[string]*region{}}
}

// ClientsAllowed reports whether clients may register regions.
func (r *Registry) ClientsAllowed() bool { return r.clients }

func disabled() error { return fmt.Errorf("%w: %s", ErrDisabled, DisabledMessage) }

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
}

// keyPath maps a shm_open key ("/input_data"; leading slashes are
// dropped, as glibc's shm_open drops them) to its file, refusing, with
// Triton's sentences, a key of slashes only and one of Triton's reserved
// keys, and with fw's a key that is not one plain name.
func (r *Registry) keyPath(name, key string) (string, error) {
	base := strings.TrimLeft(key, "/")
	if base == "" {
		return "", invalid("cannot register shared memory region '%s' - invalid shm key '%s'", name, key)
	}
	if strings.HasPrefix(base, ReservedKeyPrefix) {
		return "", invalid("cannot register shared memory region '%s' with key '%s' as the key contains the reserved prefix '%s'", name, key, ReservedKeyPrefix)
	}
	if strings.ContainsAny(base, "/\\\x00") || base == "." || base == ".." || len(base) > 255 {
		return "", invalid("cannot register shared memory region '%s' - invalid shm key '%s': a POSIX shared memory name like \"/input_data\" (a name without '/' after the leading ones)", name, key)
	}
	return filepath.Join(r.dir, base), nil
}

// Register maps [offset, offset+byteSize) of the shared memory object key
// under name. A name already registered is refused (unregister it first),
// as Triton does. As in Triton, the object is opened before the window is
// checked: a key that names no object says so, whatever the window.
func (r *Registry) Register(name, key string, offset, byteSize uint64) error {
	if !r.clients {
		return disabled()
	}
	if name == "" || len(name) > 255 {
		return invalid("a region needs a name of 1 to 255 bytes")
	}
	path, err := r.keyPath(name, key)
	if err != nil {
		return err
	}
	r.mu.Lock()
	_, dup := r.regions[name]
	full := len(r.regions) >= MaxRegions
	r.mu.Unlock()
	if dup {
		return invalid("shared memory region '%s' already in manager; unregister it first", name)
	}
	if full {
		return invalid("%d regions are registered already, the most fw keeps; unregister some", MaxRegions)
	}
	f, err := os.OpenFile(path, os.O_RDWR|unix.O_NONBLOCK|unix.O_NOFOLLOW, 0) // never blocks on a FIFO, never follows a link
	if err != nil {
		return fmt.Errorf("%w: Unable to open shared memory region: '%s' (region '%s': %v); create it first (tritonclient.utils.shared_memory.create_shared_memory_region) on this machine", ErrOpen, key, name, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil || !st.Mode().IsRegular() {
		return invalid("shared memory key %q is not a shared memory object", key)
	}
	size := uint64(max(st.Size(), 0))
	if offset > size || byteSize > size-offset { // no overflow
		return invalid("failed to register shared memory region '%s': invalid args: offset %d + byte_size %d is beyond the object's %d bytes", name, offset, byteSize, size)
	}
	if byteSize == 0 || byteSize > MaxRegionBytes {
		return invalid("failed to register shared memory region '%s': invalid args: byte_size %d is out of range 1..%d", name, byteSize, uint64(MaxRegionBytes))
	}
	end := offset + byteSize
	page := uint64(os.Getpagesize())
	start := offset / page * page
	mem, err := unix.Mmap(int(f.Fd()), int64(start), int(end-start), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return invalid("unable to map shared memory region '%s': %v", name, err)
	}
	reg := &region{st: Status{Name: name, Key: key, Offset: offset, ByteSize: byteSize}, mem: mem, data: mem[offset-start : end-start : end-start]}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, dup := r.regions[name]; dup { // registered meanwhile
		_ = unix.Munmap(mem)
		return invalid("shared memory region '%s' already in manager; unregister it first", name)
	}
	r.regions[name] = reg
	return nil
}

// Unregister removes the region name, or every region when name is "".
// Unregistering a name that is not registered is not an error (Triton's
// clients unregister before they register).
func (r *Registry) Unregister(name string) error {
	if !r.clients {
		return disabled()
	}
	r.unregister(name)
	return nil
}

func (r *Registry) unregister(name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for n, reg := range r.regions {
		if name != "" && n != name {
			continue
		}
		reg.unregistered = true
		if reg.refs == 0 {
			r.removeLocked(reg)
		}
	}
}

// removeLocked takes a region out of the registry and unmaps it.
func (r *Registry) removeLocked(reg *region) {
	if r.regions[reg.st.Name] == reg {
		delete(r.regions, reg.st.Name)
	}
	_ = unix.Munmap(reg.mem)
}

// releaseLocked ends one use of reg; the last use of a region
// unregistered meanwhile removes it.
func (r *Registry) releaseLocked(reg *region) {
	reg.refs--
	if reg.refs == 0 && reg.unregistered {
		r.removeLocked(reg)
	}
}

// Status lists the region name, or every region when name is "", sorted.
func (r *Registry) Status(name string) ([]Status, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if name != "" {
		reg, ok := r.regions[name]
		if !ok {
			return nil, fmt.Errorf("%w: Unable to find system shared memory region: '%s'", ErrNotFound, name)
		}
		return []Status{reg.st}, nil
	}
	out := make([]Status, 0, len(r.regions))
	for _, reg := range r.regions {
		out = append(out, reg.st)
	}
	slices.SortFunc(out, func(a, b Status) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// Close unmaps every region (when the server stops).
func (r *Registry) Close() { r.unregister("") }

// Span is a bounded window of a registered region that one request uses:
// Bytes stays mapped until Release, even if the region is unregistered
// meanwhile.
type Span struct {
	r   *Registry
	reg *region
	// Bytes is the window: offset..offset+size of the region.
	Bytes []byte
}

// Release ends the request's use of the span.
func (s *Span) Release() {
	if s == nil || s.reg == nil {
		return
	}
	s.r.mu.Lock()
	defer s.r.mu.Unlock()
	s.r.releaseLocked(s.reg)
	s.reg = nil
	s.Bytes = nil
}

// Acquire returns the window [offset, offset+size) of the region name for
// one request, checked against the region's bounds. Release it when the
// request is done.
func (r *Registry) Acquire(name string, offset, size uint64) (*Span, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	reg, ok := r.regions[name]
	if !ok {
		return nil, fmt.Errorf("%w: Unable to find shared memory region: '%s'; register it first", ErrNotFound, name)
	}
	if err := checkWindow(name, uint64(len(reg.data)), offset, size); err != nil {
		return nil, err
	}
	reg.refs++
	return &Span{r: r, reg: reg, Bytes: reg.data[offset : offset+size : offset+size]}, nil
}

// checkWindow checks [offset, offset+size) against a region of n bytes,
// with Triton's sentences (and checks) in Triton's order.
func checkWindow(name string, n, offset, size uint64) error {
	switch {
	case offset >= n:
		return invalid("Invalid offset for shared memory region: '%s' (offset %d, the region has %d bytes)", name, offset, n)
	case size > math.MaxUint64-offset:
		return invalid("Integer overflow detected: byte_size (%d) + offset (%d) exceeds maximum value (%d) for region '%s'", size, offset, uint64(math.MaxUint64), name)
	case offset+size > n:
		return invalid("Invalid offset + byte size for shared memory region: '%s' (offset %d + byte_size %d, the region has %d bytes)", name, offset, size, n)
	}
	return nil
}

// Holds are the regions one request names: each stays registered and
// mapped until Release, even when it is unregistered meanwhile. The zero
// value holds nothing.
type Holds struct {
	r    *Registry
	regs []*region
}

// Hold makes h hold the region ref names, checking ref's window against
// it, and returns the window, which stays mapped until h is released. A
// request holds each region it names from when it is read until it has
// answered.
func (r *Registry) Hold(h *Holds, ref Ref) ([]byte, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	reg, ok := r.regions[ref.Region]
	if !ok {
		return nil, fmt.Errorf("%w: Unable to find shared memory region: '%s'; register it first", ErrNotFound, ref.Region)
	}
	if err := checkWindow(ref.Region, uint64(len(reg.data)), ref.Offset, ref.Size); err != nil {
		return nil, err
	}
	if h.r != nil && h.r != r {
		return nil, errors.New("sharedmem: one Holds used with two registries") // a bug
	}
	h.r = r
	reg.refs++
	h.regs = append(h.regs, reg)
	return reg.data[ref.Offset : ref.Offset+ref.Size : ref.Offset+ref.Size], nil
}

// Release lets go of every region h holds. It may be called more than once.
func (h *Holds) Release() {
	if h == nil || h.r == nil || len(h.regs) == 0 {
		return
	}
	h.r.mu.Lock()
	defer h.r.mu.Unlock()
	for _, reg := range h.regs {
		h.r.releaseLocked(reg)
	}
	h.regs = nil
}

// Ref is the window of a registered region that one input or output of a
// request names (its shared_memory_region, shared_memory_offset and
// shared_memory_byte_size parameters).
type Ref struct {
	Region       string
	Offset, Size uint64
}

// ReadAll holds the region ref names in h (nil: only while it copies)
// and returns a copy of the window in a buffer of ref.Size bytes made by
// alloc (nil: make), which runs only once the window is known to lie
// inside its registered region: no request allocates more than the region
// it names holds, whatever size it claims.
func (r *Registry) ReadAll(h *Holds, ref Ref, alloc func(n int) []byte) ([]byte, error) {
	if h == nil {
		h = new(Holds)
		defer h.Release()
	}
	win, err := r.Hold(h, ref)
	if err != nil {
		return nil, err
	}
	var dst []byte
	if alloc != nil {
		dst = alloc(len(win))
	} else {
		dst = make([]byte, len(win))
	}
	copy(dst, win)
	return dst, nil
}

// Write copies src into the window ref names, refusing one smaller than src.
func (r *Registry) Write(ref Ref, src []byte) error {
	if uint64(len(src)) > ref.Size {
		return invalid("shared memory region '%s': the output needs %d bytes, more than shared_memory_byte_size %d", ref.Region, len(src), ref.Size)
	}
	sp, err := r.Acquire(ref.Region, ref.Offset, uint64(len(src)))
	if err != nil {
		return err
	}
	copy(sp.Bytes, src)
	sp.Release()
	return nil
}
