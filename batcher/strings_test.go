package batcher

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/fw-serve/fw/engine"
)

// reverser is an engine on BYTES: [N,K] strings -> their reversals [N,K]
// and each row's total length as int64 [N,1].
func reverser(_ context.Context, in []engine.Tensor) ([]engine.Tensor, error) {
	elems, err := in[0].Strings()
	if err != nil {
		return nil, err
	}
	n, k := in[0].Shape[0], in[0].Shape[1]
	rev := make([]string, len(elems))
	lens := make([]int64, n)
	for i, e := range elems {
		r := []byte(string(e))
		slices.Reverse(r)
		rev[i] = string(r)
		lens[int64(i)/k] += int64(len(e))
	}
	out, err := engine.FromStrings([]int64{n, k}, rev)
	if err != nil {
		return nil, err
	}
	return []engine.Tensor{out, engine.FromInt64([]int64{n, 1}, lens)}, nil
}

// stringRows is request id's [rows, 2] BYTES input: strings of different
// lengths per request and row, empty and non-UTF-8 ones among them.
func stringRows(t *testing.T, id, rows int) ([]string, engine.Tensor) {
	t.Helper()
	var elems []string
	for r := 0; r < rows; r++ {
		elems = append(elems, strings.Repeat(fmt.Sprintf("%d.%d,", id, r), id+r), fmt.Sprintf("\xff%d", id))
	}
	x, err := engine.FromStrings([]int64{int64(rows), 2}, elems)
	if err != nil {
		t.Fatal(err)
	}
	return elems, x
}

// BYTES requests of different row counts and string lengths are joined into
// one engine call (their serialized data concatenated) and each gets back
// exactly its own rows of every output, strings and numbers alike.
func TestStringRequestsJoinAndSplit(t *testing.T) {
	g := newGate()
	stats := &recorder{}
	b := New(g.wrap(reverser), Config{MaxDelay: 0, Instances: 1}, stats)
	defer closeOK(t, b)
	_, x0 := stringRows(t, 0, 1)
	first := submitAsync(context.Background(), b, x0)
	<-g.started // the worker is busy: the next requests queue up together
	var inputs [][]engine.Tensor
	var want [][]string
	for id := 1; id <= 4; id++ {
		elems, x := stringRows(t, id, id%3+1)
		inputs = append(inputs, []engine.Tensor{x})
		want = append(want, elems)
	}
	chans := queueInOrder(t, b, inputs...)
	g.open()
	if r := <-first; r.err != nil {
		t.Fatal(r.err)
	}
	joined := <-g.started
	if joined[0].Shape[0] != 2+3+1+2 {
		t.Fatalf("the engine saw shape %v, want the 8 rows of 4 requests joined", joined[0].Shape)
	}
	for i, ch := range chans {
		r := <-ch
		if r.err != nil {
			t.Fatalf("request %d: %v", i+1, r.err)
		}
		got, err := r.out[0].Strings()
		if err != nil {
			t.Fatalf("request %d: %v", i+1, err)
		}
		rows := len(want[i]) / 2
		if r.out[0].Shape[0] != int64(rows) || len(got) != len(want[i]) || r.out[1].Shape[0] != int64(rows) {
			t.Fatalf("request %d: shapes %v %v, want %d rows", i+1, r.out[0].Shape, r.out[1].Shape, rows)
		}
		for k, s := range want[i] {
			rs := []byte(s)
			slices.Reverse(rs)
			if string(got[k]) != string(rs) {
				t.Errorf("request %d element %d = %q, want %q", i+1, k, got[k], rs)
			}
		}
		for row := 0; row < rows; row++ {
			if n := r.out[1].Int64s()[row]; n != int64(len(want[i][2*row])+len(want[i][2*row+1])) {
				t.Errorf("request %d row %d length %d", i+1, row, n)
			}
		}
	}
	if got := stats.all(); len(got) != 2 || got[1].requests != 4 {
		t.Fatalf("batches %+v, want the 4 queued requests in one", got)
	}
}

// Malformed BYTES data is bad input, refused before any engine call; a
// malformed BYTES output fails the batch as a bad output.
func TestStringDataChecked(t *testing.T) {
	b := New(reverser, Config{}, nil)
	defer closeOK(t, b)
	_, x := stringRows(t, 3, 2)
	for name, bad := range map[string]engine.Tensor{
		"cut":          {DType: engine.String, Shape: x.Shape, Data: x.Data[:len(x.Data)-1]},
		"trailing":     {DType: engine.String, Shape: x.Shape, Data: append(slices.Clone(x.Data), 0)},
		"more rows":    {DType: engine.String, Shape: []int64{3, 2}, Data: x.Data},
		"4 GiB":        {DType: engine.String, Shape: []int64{1, 1}, Data: []byte{0xff, 0xff, 0xff, 0xff, 'a'}},
		"huge shape":   {DType: engine.String, Shape: []int64{1 << 40, 1 << 40}, Data: x.Data},
		"unknown type": {DType: engine.DType(99), Shape: []int64{1}, Data: []byte{1}},
	} {
		_, err := b.Submit(context.Background(), []engine.Tensor{bad})
		var ie *engine.InputError
		if !errors.As(err, &ie) {
			t.Errorf("%s: %v, want an *engine.InputError", name, err)
		}
	}
	broken := New(func(context.Context, []engine.Tensor) ([]engine.Tensor, error) {
		return []engine.Tensor{{DType: engine.String, Shape: []int64{2, 2}, Data: []byte{9, 0, 0, 0}}}, nil
	}, Config{}, nil)
	defer closeOK(t, broken)
	if _, err := broken.Submit(context.Background(), []engine.Tensor{x}); !errors.Is(err, ErrBadOutput) {
		t.Errorf("a malformed string output: %v, want ErrBadOutput", err)
	}
}
