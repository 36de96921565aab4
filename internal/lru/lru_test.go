package lru

import "testing"

// The least recently used entries go over the budget; a Get counts as a
// use; a value over the whole budget is not kept; a Put replaces.
func TestCache(t *testing.T) {
	c := New[string, int](10)
	c.Put("a", 1, 4)
	c.Put("b", 2, 4)
	if v, ok := c.Get("a"); !ok || v != 1 { // a is now the most recent
		t.Fatalf("a: %v %v", v, ok)
	}
	c.Put("c", 3, 4) // 12 > 10: b, the least recent, goes
	if _, ok := c.Get("b"); ok {
		t.Fatal("b kept over the budget")
	}
	if _, ok := c.Get("a"); !ok {
		t.Fatal("a dropped")
	}
	c.Put("d", 4, 11)
	if _, ok := c.Get("d"); ok || c.Len() != 2 || c.Used() != 8 {
		t.Fatalf("a value over the budget: len %d used %d", c.Len(), c.Used())
	}
	c.Put("a", 5, 2)
	if v, _ := c.Get("a"); v != 5 || c.Used() != 6 {
		t.Fatalf("replaced: %d, used %d", v, c.Used())
	}
}
