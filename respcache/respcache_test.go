package respcache

import (
	"sync"
	"testing"

	"github.com/fw-serve/fw/engine"
)

func tensor(n int, b byte) engine.Tensor {
	d := make([]byte, n)
	for i := range d {
		d[i] = b
	}
	return engine.Tensor{DType: engine.Uint8, Shape: []int64{int64(n)}, Data: d}
}

func key(parts ...string) Key {
	k := NewKey("m", "1")
	for _, p := range parts {
		k.String(p)
	}
	return k.Sum()
}

func TestKeysTellRequestsApart(t *testing.T) {
	a := NewKey("m", "1")
	a.Tensors([]engine.Tensor{tensor(4, 1), {}})
	b := NewKey("m", "1")
	b.Tensors([]engine.Tensor{{}, tensor(4, 1)}) // the same bytes under the other input
	c := NewKey("m", "2")
	c.Tensors([]engine.Tensor{tensor(4, 1), {}})
	d := NewKey("m", "1")
	d.Tensors([]engine.Tensor{tensor(4, 1), {}})
	ka, kb, kc, kd := a.Sum(), b.Sum(), c.Sum(), d.Sum()
	if ka == kb || ka == kc || ka != kd {
		t.Fatal("keys: absent inputs, versions and equal requests are not told apart as they should be")
	}
	e := NewKey("m", "1")
	e.Ints([]int{0, 1})
	f := NewKey("m", "1")
	f.Ints([]int{1, 0})
	if e.Sum() == f.Sum() {
		t.Fatal("requested outputs in another order gave the same key")
	}
}

func TestLRUWithinBudget(t *testing.T) {
	c := New(3 * (100 + entryOverhead + 8 + 64))
	for i, k := range []string{"a", "b", "c"} {
		c.Put(key(k), []engine.Tensor{tensor(100, byte(i))})
	}
	if _, ok := c.Get(key("a")); !ok { // a is now the most recent: b goes first
		t.Fatal("a was not kept")
	}
	c.Put(key("d"), []engine.Tensor{tensor(100, 9)})
	if _, ok := c.Get(key("b")); ok {
		t.Fatal("b, the least recently used, was not evicted")
	}
	for _, k := range []string{"a", "c", "d"} {
		if _, ok := c.Get(key(k)); !ok {
			t.Fatalf("%s was evicted", k)
		}
	}
	if n, used := c.Len(); n != 3 || used > c.Size() {
		t.Fatalf("%d entries, %d of %d bytes", n, used, c.Size())
	}
	c.Put(key("huge"), []engine.Tensor{tensor(int(c.Size()), 1)})
	if _, ok := c.Get(key("huge")); ok {
		t.Fatal("an answer larger than the budget was kept")
	}
}

func TestAnswersAreCopies(t *testing.T) {
	c := New(1 << 20)
	out := []engine.Tensor{tensor(8, 7)}
	c.Put(key("x"), out)
	out[0].Data[0], out[0].Shape[0] = 0, 99 // the caller's answer changes after Put
	got, ok := c.Get(key("x"))
	if !ok || got[0].Data[0] != 7 || got[0].Shape[0] != 8 {
		t.Fatalf("kept answer changed with the caller's: %v", got)
	}
	got[0].Shape[0] = 1 // a reshape by one reader
	again, _ := c.Get(key("x"))
	if again[0].Shape[0] != 8 {
		t.Fatal("a reader's shape change reached the cache")
	}
}

func TestConcurrentUse(t *testing.T) {
	c := New(10 * (64 + entryOverhead + 8 + 64))
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 500 {
				k := key(string(rune('a' + (g+i)%20)))
				if _, ok := c.Get(k); !ok {
					c.Put(k, []engine.Tensor{tensor(64, byte(i))})
				}
			}
		})
	}
	wg.Wait()
	if _, used := c.Len(); used > c.Size() {
		t.Fatalf("%d bytes used of %d", used, c.Size())
	}
}

func TestGenerationsDiffer(t *testing.T) {
	c := New(1 << 10)
	if a, b := c.NextGeneration(), c.NextGeneration(); a == b || a == 0 {
		t.Fatalf("generations %d and %d", a, b)
	}
}
